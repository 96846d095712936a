"""meshplan's solver: plan(PlanRequest) -> PlanResult, evaluate(EvaluateRequest) -> Evaluation.

`plan` and `evaluate` load on first use (they bring in OR-Tools and numpy), so importing the
schema or the catalog stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from meshplan.solver.results import Evaluation, PlanResult
from meshplan.solver.schema import EvaluateRequest, ParallelConfig, PlanRequest

if TYPE_CHECKING:
    from meshplan.solver.planner import evaluate, plan

__all__ = [
    "EvaluateRequest",
    "Evaluation",
    "ParallelConfig",
    "PlanRequest",
    "PlanResult",
    "evaluate",
    "plan",
]


def __getattr__(name: str) -> Any:
    if name in ("plan", "evaluate"):
        from meshplan.solver import planner

        return getattr(planner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
