"""meshplan.v1.Planner: proto in, solver call, proto out. Limits live in server.runtime."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import grpc
from google.protobuf.message import Message

from meshplan.server.limits import CallState, RpcFailure
from meshplan.server.logs import FIELDS
from meshplan.server.requests import Malformed, bad, check_message, parse
from meshplan.server.runtime import Runtime, Solve, internal
from meshplan.server.work import (
    EvaluateFn,
    PlanFn,
    SolveLimits,
    evaluate_call,
    plan_bytes_call,
    plan_call,
)
from meshplan.solver.schema import EvaluateRequest, PlanRequest
from meshplan.v1 import planner_pb2

log = logging.getLogger("meshplan.server")

_ITEM_ERROR_FIELDS = 8  # field violations kept per batch item
_CLOSING = planner_pb2.PlanBatchResponse()  # queued when the server's grace nearly ended
_UNFINISHED = planner_pb2.ItemError(
    code="UNAVAILABLE",
    message="the server is shutting down before this item was answered; send it again "
    "(another replica answers it)",
)


class PlannerServicer:
    """Converts, validates and limits; `plan_fn` / `evaluate_fn` do the work (tests swap them)."""

    def __init__(
        self, runtime: Runtime, plan_fn: PlanFn | None = None, evaluate_fn: EvaluateFn | None = None
    ) -> None:
        self.rt = runtime
        self.settings = runtime.settings
        self.plan_fn = plan_fn  # None: solver.plan (in a worker process, if the pool has them)
        self.evaluate_fn = evaluate_fn
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
            return await self.rt.solve(call, "Evaluate", evaluate_call, req, self.evaluate_fn)

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

    async def _plan(self, req: PlanRequest, call: CallState) -> planner_pb2.PlanResponse:
        """One solve under the call's limits; raises RpcFailure for what is not a plan."""
        return await self._solved(call, plan_call, req, self._limits(call), "", self.plan_fn)

    def _limits(self, call: CallState) -> SolveLimits:
        s = self.settings
        return SolveLimits(
            deadline=call.deadline,
            default_time_limit_s=s.default_time_limit_s,
            max_time_limit_s=s.max_time_limit_s,
            deadline_reserve=s.deadline_reserve,
            deadline_margin_s=s.deadline_margin_s,
            workers_per_solve=s.workers_per_solve,
        )

    async def _solved(self, call: CallState, fn: Any, *args: Any) -> planner_pb2.PlanResponse:
        return self._counted(*await self.rt.solve(call, "Plan", fn, *args))

    def _counted(self, status: str, answer: planner_pb2.PlanResponse) -> planner_pb2.PlanResponse:
        """A plan's answer, counted by its status in the metrics."""
        m = self.rt.metrics
        m.child(m.plans, status).inc()
        return answer

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
        answers: asyncio.Queue[planner_pb2.PlanBatchResponse | None] = asyncio.Queue()
        indices = iter(range(count))

        async def worker() -> None:  # each worker takes the next request (shared iterator)
            ahead: tuple[int, Solve] | None = None  # solving, its answer not yet taken

            async def answer_ahead() -> None:
                nonlocal ahead
                if ahead is not None:
                    item, ahead = ahead, None
                    await answers.put(await self._item_answer(*item, call))

            while True:
                if ahead is not None and not self.rt.can_queue_behind(ahead[1]):
                    await answer_ahead()
                i = next(indices, None)  # taken only when it can start (or queue) now
                if i is None:
                    break
                solve = self._item_behind(ahead, i, request.requests[i], call)
                if solve is None:
                    await answer_ahead()
                    try:
                        solve = await self._item_begin(i, request.requests[i], call)
                    except Exception as err:  # noqa: BLE001  this item's answer
                        await answers.put(self._item_failed(i, err, call))
                        continue
                await answer_ahead()
                ahead = (i, solve)
            await answer_ahead()

        share = min(count, self.settings.solves_per_caller)
        workers = [asyncio.create_task(worker()) for _ in range(share)]
        # one timer for the call, not one per answer: at the deadline it queues None
        left = max(call.remaining() - self.settings.deadline_margin_s, 0)
        timer = asyncio.get_running_loop().call_later(left, answers.put_nowait, None)
        close = partial(answers.put_nowait, _CLOSING)  # the server's grace nearly ended
        self.rt.on_close.add(close)
        answered: set[int] = set()
        try:
            for done in range(count):
                answer = answers.get_nowait() if not answers.empty() else await answers.get()
                if answer is None:
                    raise RpcFailure(
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        f"the call's deadline passed after {done} of {count} answers",
                    )
                if answer is _CLOSING:  # every item not answered says so, then the stream ends
                    call.stop.set()
                    for index in range(count):
                        if index not in answered:
                            yield planner_pb2.PlanBatchResponse(index=index, error=_UNFINISHED)
                    return
                answered.add(answer.index)
                yield answer
        finally:
            self.rt.on_close.discard(close)
            timer.cancel()
            call.stop.set()  # the requests still queued return at once
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    def _item_args(self, index: int, msg: Any, call: CallState) -> tuple[Any, ...]:
        # parsed in the solve (a worker process, if any): the event loop forwards bytes
        data, chars = msg.SerializeToString(), self.settings.max_string_chars
        return data, chars, self._limits(call), f"requests[{index}]", self.plan_fn

    async def _item_begin(self, index: int, msg: Any, call: CallState) -> Solve:
        return await self.rt.begin(
            call, "Plan", plan_bytes_call, *self._item_args(index, msg, call)
        )

    def _item_behind(
        self, ahead: tuple[int, Solve] | None, index: int, msg: Any, call: CallState
    ) -> Solve | None:
        """The item queued on the worker solving `ahead` (None: it waits for a slot)."""
        if ahead is None:
            return None
        args = self._item_args(index, msg, call)
        return self.rt.begin_behind(ahead[1], call, "Plan", plan_bytes_call, *args)

    async def _item_answer(
        self, index: int, solve: Solve, call: CallState
    ) -> planner_pb2.PlanBatchResponse:
        try:
            answer = self._counted(*await self.rt.outcome(call, solve))
        except Exception as err:  # noqa: BLE001  this item's answer
            return self._item_failed(index, err, call)
        return planner_pb2.PlanBatchResponse(index=index, result=answer)

    def _item_failed(
        self, index: int, err: Exception, call: CallState
    ) -> planner_pb2.PlanBatchResponse:
        if isinstance(err, RpcFailure):
            return planner_pb2.PlanBatchResponse(index=index, error=_item_error(err))
        log.error(  # a solver bug must not take the other items down
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
            for v in failure.violations[:_ITEM_ERROR_FIELDS]
        ],
    )
