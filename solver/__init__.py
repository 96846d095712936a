"""meshplan's solver: plan(PlanRequest) -> PlanResult, evaluate(EvaluateRequest) -> Evaluation."""

from solver.planner import evaluate, plan
from solver.results import Evaluation, PlanResult
from solver.schema import EvaluateRequest, ParallelConfig, PlanRequest

__all__ = [
    "EvaluateRequest",
    "Evaluation",
    "ParallelConfig",
    "PlanRequest",
    "PlanResult",
    "evaluate",
    "plan",
]
