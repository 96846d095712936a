"""Scheduler queries over plan() and evaluate(): ScalingCurve, Replan, SmallestAllocation and
TrainingFront (docs/schedulers.md, "Definitions", defines their terms).

    from meshplan.solver.scheduler import CurveRequest, scaling_curve

Names load on first use (PEP 562), so a solver process that only runs cells
(`meshplan.solver.scheduler.cells`, unpickling a CellTask) imports the cells, the batch policy
and the cell status, not every query, request and answer.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from meshplan.solver.scheduler.admit import smallest_allocation
    from meshplan.solver.scheduler.answers import (
        AdmitResult,
        CurveResult,
        FrontResult,
        ReplanResult,
    )
    from meshplan.solver.scheduler.cache import AnswerCache
    from meshplan.solver.scheduler.cells import Budget, QueryStopped
    from meshplan.solver.scheduler.curve import scaling_curve
    from meshplan.solver.scheduler.front import training_front
    from meshplan.solver.scheduler.key import cache_key, cost_model_version
    from meshplan.solver.scheduler.replan import replan
    from meshplan.solver.scheduler.requests import (
        AdmitRequest,
        CurveRequest,
        FrontRequest,
        ReplanRequest,
    )
    from meshplan.solver.scheduler.status import CellStatus
    from meshplan.solver.scheduler.validate import SchedulerInputError

_WHERE = {  # public name -> the module of this package that defines it
    "AdmitRequest": "requests",
    "AdmitResult": "answers",
    "AnswerCache": "cache",
    "Budget": "cells",
    "CellStatus": "status",
    "CurveRequest": "requests",
    "CurveResult": "answers",
    "FrontRequest": "requests",
    "FrontResult": "answers",
    "QueryStopped": "cells",
    "ReplanRequest": "requests",
    "ReplanResult": "answers",
    "SchedulerInputError": "validate",
    "cache_key": "key",
    "cost_model_version": "key",
    "replan": "replan",
    "scaling_curve": "curve",
    "smallest_allocation": "admit",
    "training_front": "front",
}

__all__ = [
    "AdmitRequest",
    "AdmitResult",
    "AnswerCache",
    "Budget",
    "CellStatus",
    "CurveRequest",
    "CurveResult",
    "FrontRequest",
    "FrontResult",
    "QueryStopped",
    "ReplanRequest",
    "ReplanResult",
    "SchedulerInputError",
    "cache_key",
    "cost_model_version",
    "replan",
    "scaling_curve",
    "smallest_allocation",
    "training_front",
]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use (then kept in the package)."""
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{where}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
