"""meshplan's solver: plan(PlanRequest) -> PlanResult, evaluate(EvaluateRequest) -> Evaluation.

The names below load on first use (`plan` and `evaluate` bring in OR-Tools and numpy, the
models pydantic), so importing one light module of the core, or locating its data, stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from meshplan.solver.planner import evaluate, plan
    from meshplan.solver.results import Evaluation, PlanResult
    from meshplan.solver.schema import EvaluateRequest, ParallelConfig, PlanRequest

_WHERE = {
    "EvaluateRequest": "meshplan.solver.schema",
    "ParallelConfig": "meshplan.solver.schema",
    "PlanRequest": "meshplan.solver.schema",
    "Evaluation": "meshplan.solver.results",
    "PlanResult": "meshplan.solver.results",
    "evaluate": "meshplan.solver.planner",
    "plan": "meshplan.solver.planner",
}
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
    if name in _WHERE:
        try:
            module = importlib.import_module(_WHERE[name])
        except ModuleNotFoundError as e:  # the client-only install (meshplan-client)
            if (e.name or "").startswith("meshplan."):
                raise ModuleNotFoundError(
                    f"meshplan.solver.{name} is the planner's: pip install meshplan", name=e.name
                ) from e
            raise
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
