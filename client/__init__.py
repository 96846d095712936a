"""Thin Python client of meshplan.v1.Planner: the solver's pydantic objects in and out.

from meshplan.client import PlannerClient
with PlannerClient("localhost:50051") as planner:
    result = planner.plan(PlanRequest(...), timeout=30)
"""

from meshplan.client.aio import AsyncPlannerClient
from meshplan.client.exceptions import (
    CancelledError,
    DeadlineExceededError,
    FieldViolation,
    InvalidRequestError,
    OverloadedError,
    PlannerError,
    UnauthenticatedError,
    UnavailableError,
)
from meshplan.client.security import Security
from meshplan.client.sync import BatchItem, Catalog, PlannerClient

__all__ = [
    "AsyncPlannerClient",
    "BatchItem",
    "CancelledError",
    "Catalog",
    "DeadlineExceededError",
    "FieldViolation",
    "InvalidRequestError",
    "OverloadedError",
    "PlannerClient",
    "PlannerError",
    "Security",
    "UnauthenticatedError",
    "UnavailableError",
]
