"""meshplan.v1.Planner: proto in, solver call, proto out. Limits live in server.runtime."""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

from meshplan.server.convert import to_proto
from meshplan.server.limits import CallState, RpcFailure
from meshplan.server.logs import FIELDS
from meshplan.server.requests import Malformed, bad, check_message, check_strings, parse
from meshplan.server.runtime import Runtime, internal
from meshplan.server.validate import Violation, echo, from_solver_error
from meshplan.solver.results import Evaluation, PlanResult, PlanStatus
from meshplan.solver.schema import EvaluateRequest, PlanRequest
from meshplan.v1 import planner_pb2

log = logging.getLogger("meshplan.server")

PlanFn = Callable[..., PlanResult]
EvaluateFn = Callable[..., Evaluation]
_NO_PLAN = {"UNKNOWN", "MODEL_INVALID"}  # CP-SAT statuses that mean "nothing found yet"
_PARSE_FIELD = re.compile(r"Failed to parse (\w+) field")
_OVERRIDES = ("intra_node_gbps", "inter_node_gbps", "peak_bf16_tflops", "hbm_gib")


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


def _invalid(err: Exception, req: Any, prefix: str = "") -> RpcFailure:
    """The solver's ValueError / KeyError / OverflowError on a valid-looking request."""
    if isinstance(err, OverflowError):  # numbers beyond the model's integers: name the overrides
        cluster = req.cluster
        fields = [f for f in _OVERRIDES if getattr(cluster, f, None) is not None]
        where = [f"{prefix}.cluster.{f}" if prefix else f"cluster.{f}" for f in fields]
        text = f"the numbers this request implies exceed the planner's integer range: {err}"
        violations = [
            Violation(w, f"{text} (got {echo(getattr(cluster, f))})")
            for w, f in zip(where, fields, strict=True)
        ]
        return RpcFailure(
            grpc.StatusCode.INVALID_ARGUMENT, text, violations or [Violation(prefix, text)]
        )
    violations = from_solver_error(err, req, prefix)
    return RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, violations[0].description, violations)


class PlannerServicer:
    """Converts, validates and limits; `plan_fn` / `evaluate_fn` do the work (tests swap them)."""

    def __init__(
        self, runtime: Runtime, plan_fn: PlanFn | None = None, evaluate_fn: EvaluateFn | None = None
    ) -> None:
        self.rt = runtime
        self.settings = runtime.settings
        self.plan_fn = plan_fn or _default_plan
        self.evaluate_fn = evaluate_fn or _default_evaluate
        self._stop_kwarg = _takes_stop_event(self.plan_fn)
        self._catalog: planner_pb2.ListCatalogResponse | None = None

    # --- RPCs -------------------------------------------------------------------------------

    async def Plan(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        async def body(request: Any, call: CallState) -> planner_pb2.PlanResponse:
            req = parse(self._message(request), PlanRequest)
            return await self._plan(req, call)

        return await self.rt.unary("Plan", context, request, body)

    async def Evaluate(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        async def body(request: Any, call: CallState) -> planner_pb2.EvaluateResponse:
            req = parse(self._message(request), EvaluateRequest)
            return await self.rt.solve(call, "Evaluate", self._evaluate, req)

        return await self.rt.unary("Evaluate", context, request, body)

    async def PlanBatch(  # noqa: N802
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[planner_pb2.PlanBatchResponse]:
        def pending(request: Any) -> int:
            return 0 if isinstance(request, Malformed) else len(request.requests)

        async for answer in self.rt.stream(
            "PlanBatch", context, request, self._batch, batch_requests=pending
        ):
            yield answer

    async def ListCatalog(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        async def body(request: Any, call: CallState) -> planner_pb2.ListCatalogResponse:
            if self._catalog is None:  # the catalog is fixed: built once, off the event loop
                from meshplan.server.catalog import list_catalog

                self._catalog = await asyncio.to_thread(list_catalog)
            return self._catalog

        return await self.rt.unary("ListCatalog", context, request, body, admit=False)

    # --- work -------------------------------------------------------------------------------

    def _message(self, request: Any, prefix: str = "") -> Message:
        return check_message(request, self.settings.max_string_chars, prefix)

    async def _plan(
        self, req: PlanRequest, call: CallState, prefix: str = ""
    ) -> planner_pb2.PlanResponse:
        """One solve under the call's limits; raises RpcFailure for what is not a plan."""
        return await self.rt.solve(call, "Plan", self._solve, req, call, prefix)

    def _solve(self, req: PlanRequest, call: CallState, prefix: str) -> planner_pb2.PlanResponse:
        """On a solver thread: the time limit from the deadline left now, the solve, the proto."""
        req, capped = self._limited(req, call)
        kwargs = {"stop_event": call.stop} if self._stop_kwarg else {}
        try:
            result = self.plan_fn(req, **kwargs)
        except (ValueError, KeyError, OverflowError) as err:
            raise _invalid(err, req, prefix) from err
        except TimeoutError as err:  # stopped, or out of time, before any plan was found
            code = "CANCELLED" if call.stop.is_set() and not capped else "DEADLINE_EXCEEDED"
            raise RpcFailure(grpc.StatusCode[code], f"no plan found: {err}") from err
        if call.stop.is_set():  # the call ended (cancelled, or its deadline passed) mid-solve
            raise RpcFailure(grpc.StatusCode.CANCELLED, "call ended during the solve")
        found = result.status != PlanStatus.INFEASIBLE
        if capped and not found and result.solver is not None and result.solver.status in _NO_PLAN:
            raise RpcFailure(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"no plan found within the deadline ({req.options.time_limit_s:.3f} s of solving)",
            )
        self.rt.metrics.plans.labels(result.status.value).inc()
        return to_proto(result, planner_pb2.PlanResponse)

    def _evaluate(self, req: EvaluateRequest) -> planner_pb2.EvaluateResponse:
        try:
            result = self.evaluate_fn(req)
        except (ValueError, KeyError, OverflowError) as err:
            raise _invalid(err, req) from err
        try:
            return to_proto(result, planner_pb2.EvaluateResponse)
        except json_format.ParseError as err:  # a figure beyond its proto field (e.g. int64)
            path = ".".join(_PARSE_FIELD.findall(str(err))) or "result"
            bad(
                "config",
                f"this layout's {path} is beyond what the answer can hold: the layout's values are far too large",
            )

    def _limited(self, req: PlanRequest, call: CallState) -> tuple[PlanRequest, bool]:
        """The request with its time limit capped by the settings and the call's deadline.

        Returns the request and whether the deadline (not the request) set the limit.
        """
        s, opts = self.settings, req.options
        asked = opts.time_limit_s if "time_limit_s" in opts.model_fields_set else None
        limit = min(asked or s.default_time_limit_s, s.max_time_limit_s)
        remaining = call.remaining() * (1 - s.deadline_reserve) - s.deadline_margin_s
        capped = remaining < limit
        if capped:
            limit = remaining
            if limit <= 0:
                raise RpcFailure(grpc.StatusCode.DEADLINE_EXCEEDED, "no time left to solve")
        workers = s.workers_per_solve
        if "num_workers" in opts.model_fields_set:
            workers = min(opts.num_workers, workers)
        options = opts.model_copy(update={"time_limit_s": limit, "num_workers": workers})
        return req.model_copy(update={"options": options}), capped

    async def _batch(
        self, request: Any, call: CallState
    ) -> AsyncIterator[planner_pb2.PlanBatchResponse]:
        """Answers in the order they are solved; at most the caller's share solving at once."""
        if isinstance(request, Malformed):
            self._message(request)
        count, cap = len(request.requests), self.settings.max_batch_requests
        if count == 0:
            bad("requests", "is empty: send at least one request")
        if count > cap:
            bad("requests", f"holds {count} requests, more than the cap of {cap} per call")
        answers: asyncio.Queue[planner_pb2.PlanBatchResponse] = asyncio.Queue()
        indices = iter(range(count))

        async def worker() -> None:
            for i in indices:  # shared: each worker takes the next request
                await answers.put(await self._batch_item(i, request.requests[i], call))

        share = min(count, self.settings.solves_per_caller)
        workers = [asyncio.create_task(worker()) for _ in range(share)]
        try:
            for done in range(count):
                try:
                    left = call.remaining() - self.settings.deadline_margin_s
                    answer = await asyncio.wait_for(answers.get(), max(left, 0))
                except TimeoutError:
                    raise RpcFailure(
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        f"the call's deadline passed after {done} of {count} answers",
                    ) from None
                yield answer
        finally:
            call.stop.set()  # the requests still queued return at once
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def _batch_item(
        self, index: int, msg: Any, call: CallState
    ) -> planner_pb2.PlanBatchResponse:
        prefix = f"requests[{index}]"
        try:
            check_strings(msg, self.settings.max_string_chars, prefix)
            answer = await self._plan(parse(msg, PlanRequest, prefix), call, prefix)
            return planner_pb2.PlanBatchResponse(index=index, result=answer)
        except RpcFailure as failure:
            return planner_pb2.PlanBatchResponse(index=index, error=_item_error(failure))
        except Exception as err:  # a solver bug must not take the other items down
            log.error(
                "call",
                extra={
                    FIELDS: {
                        "method": "PlanBatch",
                        "request_id": call.request_id,
                        "item": index,
                        "status": "INTERNAL",
                        "error": f"{type(err).__name__}: {err}"[:300],
                    }
                },
            )
            return planner_pb2.PlanBatchResponse(index=index, error=_item_error(internal(call)))


def _item_error(failure: RpcFailure) -> planner_pb2.ItemError:
    return planner_pb2.ItemError(
        code=failure.code.name,
        message=failure.message[:1000],
        field_violations=[
            planner_pb2.FieldViolation(field=v.field, description=v.description[:300])
            for v in failure.violations[:8]
        ],
    )
