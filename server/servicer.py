"""meshplan.v1.Planner: proto in, solver call, proto out. Limits live in server.limits."""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, NoReturn

import grpc
from pydantic import ValidationError

from meshplan.server.convert import FieldValueError, from_proto, to_proto
from meshplan.server.limits import REQUEST_ID_KEY, CallState, RpcFailure, SolveSlots, track_call
from meshplan.server.scheduler import SchedulerRpcs
from meshplan.server.settings import Settings
from meshplan.server.validate import (
    Violation,
    bad_request_status,
    from_solver_error,
    from_validation_error,
)
from meshplan.solver.results import Evaluation, PlanResult, PlanStatus
from meshplan.solver.schema import EvaluateRequest, PlanRequest
from meshplan.v1 import planner_pb2, planner_pb2_grpc

log = logging.getLogger("meshplan.server")

PlanFn = Callable[..., PlanResult]
EvaluateFn = Callable[..., Evaluation]
_NO_PLAN = {"UNKNOWN", "MODEL_INVALID"}  # CP-SAT statuses that mean "nothing found yet"


def _default_plan(req: PlanRequest, stop_event: Any = None) -> PlanResult:
    from meshplan import solver

    return solver.plan(req, stop_event=stop_event)


def _default_evaluate(req: EvaluateRequest) -> Evaluation:
    from meshplan import solver

    return solver.evaluate(req)


def _takes_stop_event(fn: Callable[..., Any]) -> bool:
    try:
        return "stop_event" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


class PlannerServicer(SchedulerRpcs, planner_pb2_grpc.PlannerServicer):
    """Converts, validates and limits; `plan_fn` / `evaluate_fn` do the work (tests swap them)."""

    def __init__(
        self,
        settings: Settings,
        plan_fn: PlanFn | None = None,
        evaluate_fn: EvaluateFn | None = None,
    ) -> None:
        self.settings = settings
        self.plan_fn = plan_fn or _default_plan
        self.evaluate_fn = evaluate_fn or _default_evaluate
        self._stop_kwarg = _takes_stop_event(self.plan_fn)
        self.slots = SolveSlots(settings.max_concurrent_solves, settings.max_queued_solves)

    # --- RPCs -------------------------------------------------------------------------------

    def Plan(self, request: planner_pb2.PlanRequest, context: grpc.ServicerContext) -> Any:
        def body(call: CallState) -> planner_pb2.PlanResponse:
            req = _parse(request, PlanRequest)
            return to_proto(self._plan(req, call), planner_pb2.PlanResponse)

        return self._unary("Plan", context, body)

    def Evaluate(self, request: planner_pb2.EvaluateRequest, context: grpc.ServicerContext) -> Any:
        def body(call: CallState) -> planner_pb2.EvaluateResponse:
            req = _parse(request, EvaluateRequest)
            started = time.monotonic()
            try:
                result = self.evaluate_fn(req)
            except (ValueError, KeyError) as err:
                violations = from_solver_error(err, req)
                raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, str(err), violations) from err
            finally:
                call.add_solve_time(time.monotonic() - started)
            return to_proto(result, planner_pb2.EvaluateResponse)

        return self._unary("Evaluate", context, body)

    def PlanBatch(
        self, request: planner_pb2.PlanBatchRequest, context: grpc.ServicerContext
    ) -> Iterator[planner_pb2.PlanBatchResponse]:
        try:
            with track_call("PlanBatch", context) as call, self.slots.admit():
                yield from self._batch(request, call)
        except RpcFailure as failure:
            _abort(context, failure)

    def ListCatalog(
        self, request: planner_pb2.ListCatalogRequest, context: grpc.ServicerContext
    ) -> planner_pb2.ListCatalogResponse:
        with track_call("ListCatalog", context):
            from meshplan.server.catalog import list_catalog

            return list_catalog()

    # --- work -------------------------------------------------------------------------------

    def _unary(self, method: str, context: grpc.ServicerContext, body: Callable[..., Any]) -> Any:
        try:
            with track_call(method, context) as call, self.slots.admit():
                return body(call)
        except RpcFailure as failure:
            _abort(context, failure)
        except Exception as err:
            log.exception("%s failed", method)
            _abort(context, RpcFailure(grpc.StatusCode.INTERNAL, f"{type(err).__name__}: {err}"))

    def _plan(self, req: PlanRequest, call: CallState, prefix: str = "") -> PlanResult:
        """One solve under the call's limits; raises RpcFailure for what is not a plan."""
        with self.slots.slot(call):
            req, capped = self._limited(req, call)
            kwargs = {"stop_event": call.stop} if self._stop_kwarg else {}
            started = time.monotonic()
            try:
                result = self.plan_fn(req, **kwargs)
            except (ValueError, KeyError) as err:
                violations = from_solver_error(err, req, prefix)
                raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, str(err), violations) from err
            except TimeoutError as err:  # stopped, or out of time, before any plan was found
                code = "CANCELLED" if call.stop.is_set() and not capped else "DEADLINE_EXCEEDED"
                raise RpcFailure(grpc.StatusCode[code], f"no plan found: {err}") from err
            finally:
                call.add_solve_time(time.monotonic() - started)
        if call.stop.is_set():  # the call ended (cancelled, or its deadline passed) mid-solve
            raise RpcFailure(grpc.StatusCode.CANCELLED, "call ended during the solve")
        found = result.status != PlanStatus.INFEASIBLE
        if capped and not found and result.solver is not None and result.solver.status in _NO_PLAN:
            raise RpcFailure(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"no plan found within the deadline ({req.options.time_limit_s:.3f} s of solving)",
            )
        return result

    def _limited(self, req: PlanRequest, call: CallState) -> tuple[PlanRequest, bool]:
        """The request with its time limit capped by the settings and the RPC deadline.

        Returns the request and whether the RPC deadline (not the request) set the limit.
        """
        s, opts = self.settings, req.options
        asked = opts.time_limit_s if "time_limit_s" in opts.model_fields_set else None
        limit = min(asked or s.default_time_limit_s, s.max_time_limit_s)
        remaining = call.remaining()
        if remaining is not None:
            remaining = remaining * (1 - s.deadline_reserve) - s.deadline_margin_s
        capped = remaining is not None and remaining < limit
        if capped:
            limit = remaining
            if limit <= 0:
                raise RpcFailure(grpc.StatusCode.DEADLINE_EXCEEDED, "no time left to solve")
        workers = s.workers_per_solve
        if "num_workers" in opts.model_fields_set:
            workers = min(opts.num_workers, workers)
        options = opts.model_copy(update={"time_limit_s": limit, "num_workers": workers})
        return req.model_copy(update={"options": options}), capped

    def _batch(
        self, request: planner_pb2.PlanBatchRequest, call: CallState
    ) -> Iterator[planner_pb2.PlanBatchResponse]:
        count, cap = len(request.requests), self.settings.max_batch_requests
        if count == 0:
            _bad("requests", "is empty: send at least one request")
        if count > cap:
            _bad("requests", f"holds {count} requests, more than the cap of {cap} per call")
        workers = min(count, self.settings.max_concurrent_solves)
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="meshplan-batch")
        try:
            futures = [
                pool.submit(self._batch_item, i, msg, call)
                for i, msg in enumerate(request.requests)
            ]
            for future in as_completed(futures):
                yield future.result()
        finally:
            call.stop.set()  # the items still queued return at once
            pool.shutdown(wait=True, cancel_futures=True)

    def _batch_item(
        self, index: int, msg: planner_pb2.PlanRequest, call: CallState
    ) -> planner_pb2.PlanBatchResponse:
        prefix = f"requests[{index}]"
        try:
            req = _parse(msg, PlanRequest, prefix)
            result = self._plan(req, call, prefix)
            return planner_pb2.PlanBatchResponse(
                index=index, result=to_proto(result, planner_pb2.PlanResponse)
            )
        except RpcFailure as failure:
            error = planner_pb2.ItemError(
                code=failure.code.name,
                message=failure.message,
                field_violations=[
                    planner_pb2.FieldViolation(field=v.field, description=v.description)
                    for v in failure.violations
                ],
            )
            return planner_pb2.PlanBatchResponse(index=index, error=error)
        except Exception as err:  # a solver bug must not take the other items down
            log.exception("request_id=%s batch item %d failed", call.request_id, index)
            error = planner_pb2.ItemError(code="INTERNAL", message=f"{type(err).__name__}: {err}")
            return planner_pb2.PlanBatchResponse(index=index, error=error)


def _parse(message: Any, model_cls: type, prefix: str = "") -> Any:
    try:
        return from_proto(message, model_cls)
    except FieldValueError as err:  # e.g. an enum number this server does not know
        path = f"{prefix}.{err.path}" if prefix else err.path
        _bad(path, err.message)
    except ValidationError as err:
        violations = from_validation_error(err, prefix)
        summary = "; ".join(f"{v.field}: {v.description}" for v in violations)
        raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, summary, violations) from err


def _bad(field: str, description: str) -> NoReturn:
    raise RpcFailure(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"{field}: {description}",
        [Violation(field, description)],
    )


def _abort(context: grpc.ServicerContext, failure: RpcFailure) -> NoReturn:
    request_id = ((REQUEST_ID_KEY, failure.request_id),) if failure.request_id else ()
    if failure.violations:
        status = bad_request_status(failure.violations, failure.message)
        metadata = tuple(status.trailing_metadata) + request_id
        context.abort_with_status(status._replace(trailing_metadata=metadata))
    context.abort(failure.code, failure.message)
