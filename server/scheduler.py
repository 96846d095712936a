"""The scheduler RPCs (ScalingCurve, Replan, SmallestAllocation, TrainingFront), mixed into
PlannerServicer.

They go through the servicer's own `_unary` (admission ticket, the call's deadline and
cancellation, the log line) and hold one solver slot for the whole query, so a query counts as a
solve for the limits. Answers are memoised by cache key as response messages (the same request
gives the same bytes); the curves that SmallestAllocation and TrainingFront walk are memoised too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import Message
from pydantic import BaseModel, ValidationError

from meshplan.server.convert import FieldValueError, from_proto, to_proto
from meshplan.server.limits import CallState, RpcFailure
from meshplan.server.validate import Violation, from_validation_error
from meshplan.solver.scheduler import (
    AdmitRequest,
    AnswerCache,
    Budget,
    CurveRequest,
    CurveResult,
    FrontRequest,
    QueryStopped,
    ReplanRequest,
    SchedulerInputError,
    cache_key,
    replan,
    scaling_curve,
    smallest_allocation,
    training_front,
)
from meshplan.v1 import scheduler_pb2

ANSWER_CACHE_ENTRIES = 256  # answers kept (a 256-cell curve is ~100 KB)
_caches_lock = threading.Lock()


class SchedulerRpcs:
    """Needs `self._unary(method, context, body)`, `self.slots` and `self.settings` (the
    PlannerServicer's)."""

    _unary: Callable[..., Any]
    slots: Any
    settings: Any

    # --- RPCs -------------------------------------------------------------------------------

    def ScalingCurve(self, request: Message, context: grpc.ServicerContext) -> Any:
        return self._query("ScalingCurve", request, context, CurveRequest)

    def Replan(self, request: Message, context: grpc.ServicerContext) -> Any:
        return self._query("Replan", request, context, ReplanRequest)

    def SmallestAllocation(self, request: Message, context: grpc.ServicerContext) -> Any:
        return self._query("SmallestAllocation", request, context, AdmitRequest)

    def TrainingFront(self, request: Message, context: grpc.ServicerContext) -> Any:
        return self._query("TrainingFront", request, context, FrontRequest)

    # --- work -------------------------------------------------------------------------------

    def scheduler_caches(self) -> tuple[AnswerCache[Message], AnswerCache[CurveResult]]:
        """(response messages by cache key, curves by cache key), made on first use."""
        with _caches_lock:
            if not hasattr(self, "_scheduler_caches"):
                self._scheduler_caches = (
                    AnswerCache(ANSWER_CACHE_ENTRIES),
                    AnswerCache(ANSWER_CACHE_ENTRIES),
                )
            return self._scheduler_caches

    def _query(
        self, method: str, request: Message, context: grpc.ServicerContext, model_cls: type
    ) -> Any:
        def body(call: CallState) -> Message:
            req = _parse(request, model_cls)
            answers, curves = self.scheduler_caches()
            key = _answer_key(method, req)
            if key is not None and (hit := answers.get(key)) is not None:
                return hit
            with self.slots.slot(call):
                started = time.monotonic()
                try:
                    result = _run(method, self._capped(req), self._budget(call), curves)
                except SchedulerInputError as err:
                    violation = Violation(err.field, err.description)
                    raise RpcFailure(
                        grpc.StatusCode.INVALID_ARGUMENT, str(err), [violation]
                    ) from err
                except QueryStopped as err:
                    code = (
                        grpc.StatusCode.CANCELLED
                        if err.cancelled
                        else grpc.StatusCode.DEADLINE_EXCEEDED
                    )
                    raise RpcFailure(code, f"{method} stopped: {err}") from err
                finally:
                    call.add_solve_time(time.monotonic() - started)
            msg = to_proto(result, _RESPONSES[method])
            if key is not None:
                answers.put(key, msg)
            return msg

        return self._unary(method, context, body)

    def _capped(self, req: Any) -> Any:
        """Each cell's time limit capped by the server's max_time_limit_s."""
        limit = min(req.options.cell_time_limit_s, self.settings.max_time_limit_s)
        if limit == req.options.cell_time_limit_s:
            return req
        options = req.options.model_copy(update={"cell_time_limit_s": limit})
        return req.model_copy(update={"options": options})

    def _budget(self, call: CallState) -> Budget:
        """The call's stop event, and its deadline less the time kept back to send the answer."""
        remaining = call.remaining()
        if remaining is None:
            return Budget(stop=call.stop)
        s = self.settings
        keep = remaining * s.deadline_reserve + s.deadline_margin_s
        return Budget(stop=call.stop, deadline=time.monotonic() + remaining - keep)


_RESPONSES: dict[str, type[Message]] = {
    "ScalingCurve": scheduler_pb2.ScalingCurveResponse,
    "Replan": scheduler_pb2.ReplanResponse,
    "SmallestAllocation": scheduler_pb2.SmallestAllocationResponse,
    "TrainingFront": scheduler_pb2.TrainingFrontResponse,
}


def _run(method: str, req: Any, budget: Budget, curves: AnswerCache[CurveResult]) -> BaseModel:
    if method == "ScalingCurve":
        return scaling_curve(req, budget, curves)
    if method == "Replan":
        return replan(req, budget)
    if method == "SmallestAllocation":
        return smallest_allocation(req, budget, curves=curves)
    return training_front(req, budget, curves=curves)


def _answer_key(method: str, req: Any) -> str | None:
    """The answer's cache key; None for a deadline against the server's clock (it moves)."""
    if isinstance(req, AdmitRequest) and req.deadline_unix_s and not req.now_unix_s:
        return None
    return f"{method}:{cache_key(method, req)}"


def _parse(message: Message, model_cls: type) -> Any:
    try:
        return from_proto(message, model_cls)
    except FieldValueError as err:
        raise RpcFailure(
            grpc.StatusCode.INVALID_ARGUMENT, str(err), [Violation(err.path, err.message)]
        ) from err
    except ValidationError as err:
        violations = from_validation_error(err)
        summary = "; ".join(f"{v.field}: {v.description}" for v in violations)
        raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, summary, violations) from err
