"""The scheduler queries on the Python clients: mixed into PlannerClient (blocking) and
AsyncPlannerClient (asyncio). Requests and answers are the core's pydantic objects."""

from __future__ import annotations

import re
from typing import Any

import grpc
from google.protobuf import json_format

from meshplan.client.exceptions import FieldViolation, InvalidRequestError
from meshplan.convert import from_proto, to_proto
from meshplan.solver.scheduler import (
    AdmitRequest,
    AdmitResult,
    CurveRequest,
    CurveResult,
    FrontRequest,
    FrontResult,
    ReplanRequest,
    ReplanResult,
)
from meshplan.v1 import scheduler_pb2

# method -> (request message, answer model)
_CALLS: dict[str, tuple[type, type]] = {
    "ScalingCurve": (scheduler_pb2.ScalingCurveRequest, CurveResult),
    "Replan": (scheduler_pb2.ReplanRequest, ReplanResult),
    "SmallestAllocation": (scheduler_pb2.SmallestAllocationRequest, AdmitResult),
    "TrainingFront": (scheduler_pb2.TrainingFrontRequest, FrontResult),
}


_PARSE_FIELD = re.compile(r"Failed to parse (\w+) field")


def _message(method: str, req: Any) -> Any:
    """The request's proto, only the fields the caller set (as client.sync.request_message)."""
    try:
        return to_proto(req, _CALLS[method][0], only_set=True)
    except json_format.ParseError as err:
        path = ".".join(_PARSE_FIELD.findall(str(err)))
        raise InvalidRequestError(
            grpc.StatusCode.INVALID_ARGUMENT, str(err), violations=[FieldViolation(path, str(err))]
        ) from None


def _answer(method: str, msg: Any) -> Any:
    return from_proto(msg, _CALLS[method][1], with_defaults=True)


class SchedulerClient:
    """ScalingCurve, Replan, SmallestAllocation and TrainingFront for PlannerClient (needs its
    `_stub` and `_unary`). Cache an answer by its `cache_key`: the same request gives the same
    answer until the server's cost-model version changes."""

    _stub: Any
    _unary: Any

    def scaling_curve(self, req: CurveRequest, *, timeout: float | None = None) -> CurveResult:
        """ScalingCurve(): throughput over (GPU type, count), with envelope, knee and bands."""
        return self._call("ScalingCurve", req, timeout)

    def replan(self, req: ReplanRequest, *, timeout: float | None = None) -> ReplanResult:
        """Replan(): the layout after losing or gaining nodes (or a table for k = 1..K)."""
        return self._call("Replan", req, timeout)

    def smallest_allocation(
        self, req: AdmitRequest, *, timeout: float | None = None
    ) -> AdmitResult:
        """SmallestAllocation(): the fewest (or cheapest) GPUs per type that meet the deadline."""
        return self._call("SmallestAllocation", req, timeout)

    def training_front(self, req: FrontRequest, *, timeout: float | None = None) -> FrontResult:
        """TrainingFront(): days against GPU-hours and cost for a token budget."""
        return self._call("TrainingFront", req, timeout)

    def _call(self, method: str, req: Any, timeout: float | None) -> Any:
        msg = self._unary(getattr(self._stub, method), _message(method, req), timeout)
        return _answer(method, msg)


class AsyncSchedulerClient:
    """The same four queries as coroutines, for AsyncPlannerClient."""

    _stub: Any
    _unary: Any

    async def scaling_curve(
        self, req: CurveRequest, *, timeout: float | None = None
    ) -> CurveResult:
        """ScalingCurve(): throughput over (GPU type, count), with envelope, knee and bands."""
        return await self._call("ScalingCurve", req, timeout)

    async def replan(self, req: ReplanRequest, *, timeout: float | None = None) -> ReplanResult:
        """Replan(): the layout after losing or gaining nodes (or a table for k = 1..K)."""
        return await self._call("Replan", req, timeout)

    async def smallest_allocation(
        self, req: AdmitRequest, *, timeout: float | None = None
    ) -> AdmitResult:
        """SmallestAllocation(): the fewest (or cheapest) GPUs per type that meet the deadline."""
        return await self._call("SmallestAllocation", req, timeout)

    async def training_front(
        self, req: FrontRequest, *, timeout: float | None = None
    ) -> FrontResult:
        """TrainingFront(): days against GPU-hours and cost for a token budget."""
        return await self._call("TrainingFront", req, timeout)

    async def _call(self, method: str, req: Any, timeout: float | None) -> Any:
        msg = await self._unary(getattr(self._stub, method), _message(method, req), timeout)
        return _answer(method, msg)
