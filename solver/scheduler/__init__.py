"""Scheduler queries over plan() and evaluate(): ScalingCurve, Replan, SmallestAllocation and
TrainingFront (the README's "For schedulers" defines their terms).

    from meshplan.solver.scheduler import CurveRequest, scaling_curve
"""

from meshplan.solver.scheduler.admit import smallest_allocation
from meshplan.solver.scheduler.answers import (
    AdmitResult,
    CellStatus,
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
from meshplan.solver.scheduler.validate import SchedulerInputError

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
