"""meshplan's solver: plan(PlanRequest) -> PlanResult, evaluate(EvaluateRequest) -> Evaluation."""

from meshplan.solver.planner import evaluate, plan
from meshplan.solver.results import Evaluation, PlanResult
from meshplan.solver.schema import EvaluateRequest, ParallelConfig, PlanRequest

__all__ = [
    "EvaluateRequest",
    "Evaluation",
    "ParallelConfig",
    "PlanRequest",
    "PlanResult",
    "evaluate",
    "plan",
]
