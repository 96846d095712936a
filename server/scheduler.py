"""The scheduler RPCs of meshplan.v1.Planner: ScalingCurve, Replan, SmallestAllocation and
TrainingFront, registered next to PlannerServicer in server.app.SERVICES.

Each goes through the shared Runtime like a plan: an admission ticket in the caller's turn, the
call's capped deadline, the log line and the metrics. Nothing of the request is converted on
the event loop: a request past LARGE_REQUEST_BYTES is parsed, checked and its observations
fitted on a solver slot (server.queries: in a worker process, so the server process never holds
the GIL for it), a smaller one on the query thread, one at a time. The query itself (checks,
envelopes, answers) runs on a thread of the server; its cells run in turns of a few cells
(TURN_CELLS, TURN_CPU_S), each turn a solve (`Runtime.solve`: a fair turn on a solver slot, in
a worker process when the pool has them), so a curve's cells spread over the pool and another
caller waits for at most one cell and TURN_CPU_S. All run under a `Budget` made of the call's
stop event (set on cancel or deadline) and its deadline less the time kept back to send the
answer. Answers are memoised by cache key as their wire bytes (the same request gives the same
bytes), the curves that SmallestAllocation and TrainingFront walk as objects, both caches
bounded in bytes (settings answer_cache_bytes, curve_cache_bytes).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import grpc
from google.protobuf.message import Message
from pydantic import BaseModel

from meshplan.server.limits import CallState, RpcFailure
from meshplan.server.memory import settle_heap
from meshplan.server.queries import Prepared, failure, prepare_query
from meshplan.server.requests import Malformed, Wire, bad
from meshplan.server.runtime import Runtime
from meshplan.server.work import answer_proto, invalid
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
    cost_model_version,
    replan,
    scaling_curve,
    smallest_allocation,
    training_front,
)
from meshplan.solver.scheduler.cache import curve_bytes
from meshplan.solver.scheduler.cells import CellOutcome, CellSolver, CellTask, run_cells
from meshplan.solver.scheduler.observe import Fit
from meshplan.v1 import scheduler_pb2

# One turn on a solver slot runs up to TURN_CELLS cells, and starts none after TURN_CPU_S of CPU
# time: a turn saves the hand-off between two solves (a solver process idle 2.2-7 ms per cell,
# measured on 2 cores under load, against 12-17 ms of CPU per cell of the benchmark's 70B
# curve), and another caller still waits for at most one cell and TURN_CPU_S.
TURN_CELLS = 4
TURN_CPU_S = 0.05

# Past this size a request is prepared on a solver slot (a 1 MiB one takes ~3 s to convert and
# fit); below it, on the query thread (a request without observations is far smaller).
LARGE_REQUEST_BYTES = 64 * 1024

# method -> (request model, response message)
QUERIES: dict[str, tuple[type[BaseModel], type[Message]]] = {
    "ScalingCurve": (CurveRequest, scheduler_pb2.ScalingCurveResponse),
    "Replan": (ReplanRequest, scheduler_pb2.ReplanResponse),
    "SmallestAllocation": (AdmitRequest, scheduler_pb2.SmallestAllocationResponse),
    "TrainingFront": (FrontRequest, scheduler_pb2.TrainingFrontResponse),
}


class SchedulerServicer:
    """The four scheduler queries over one Runtime (shared with PlannerServicer)."""

    RAW_REQUESTS = frozenset(QUERIES)  # their bytes reach `answer` unparsed (server/handlers.py)

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.settings = runtime.settings
        # answers kept as their wire bytes (what they weigh: a 4,096-cell curve ~0.9 MB, ~7x
        # that as a message), curves as pydantic objects (curve_bytes): both bounded in bytes
        self.answers: AnswerCache[bytes] = AnswerCache(self.settings.answer_cache_bytes, len)
        self.curves: AnswerCache[CurveResult] = AnswerCache(
            self.settings.curve_cache_bytes, curve_bytes
        )
        # one thread per query in progress at most (its cells run on the solver slots)
        self.queries = ThreadPoolExecutor(
            max_workers=min(64, runtime.admission.total), thread_name_prefix="meshplan-query"
        )
        self.converting = threading.Lock()
        cost_model_version()  # hashes the core's files once, now, not in a call on the loop
        self.width = self.settings.solves_per_caller  # slots one query's cells may take at once

    # --- RPCs -------------------------------------------------------------------------------

    async def ScalingCurve(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        return await self._query("ScalingCurve", request, context)

    async def Replan(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        return await self._query("Replan", request, context)

    async def SmallestAllocation(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        return await self._query("SmallestAllocation", request, context)

    async def TrainingFront(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        return await self._query("TrainingFront", request, context)

    # --- work -------------------------------------------------------------------------------

    async def _query(self, method: str, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async def body(request: Any, call: CallState) -> Message:
            return await self.answer(method, request, call)

        return await self.rt.unary(method, context, request, body)

    async def answer(self, method: str, request: Any, call: CallState) -> Message:
        """The response message of a scheduler query: its request (its bytes as `Wire`, a proto
        message, or Malformed) checked, parsed, looked up and answered on a query thread, never
        on the event loop (a 1 MiB request takes a second to convert); RpcFailure for what is
        not an answer. Callable from outside gRPC (the HTTP front end) inside `Runtime.unary`'s
        body."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.queries, self._run, method, request, call, loop)

    def _run(
        self, method: str, request: Any, call: CallState, loop: asyncio.AbstractEventLoop
    ) -> Message:
        """On a query thread: the request prepared (`_prepare`), the answer from the cache or
        the query under the call's budget (its cells solved through the runtime's slots), and
        its response message."""
        budget = self._budget(call)
        cells = partial(self._cells, method, call, loop)
        req = None
        try:
            budget.check()
            prepared = self._prepare(method, request, call, loop, budget)
            if prepared.key is not None and (hit := self.answers.get(prepared.key)) is not None:
                return QUERIES[method][1].FromString(hit)
            req = prepared.request
            result = _answer(method, self._capped(req), budget, self.curves, cells, prepared.fit)
            answer = answer_proto(result, QUERIES[method][1], req)
        except (SchedulerInputError, QueryStopped) as err:
            raise failure(method, err) from err
        except (ValueError, KeyError, OverflowError) as err:  # what a cell's plan refused
            if req is None:
                raise
            raise invalid(err, req) from err
        if prepared.key is not None:
            self.answers[prepared.key] = answer.SerializeToString()
        # what the query left in the caches (its curve's cells) out of the full collections,
        # which in the server process wait for an idle moment (server/memory.py
        # collect_when_idle): under the fuzz each took 100-500 ms, and the loop waited it out
        settle_heap()
        return answer

    def _prepare(
        self,
        method: str,
        request: Any,
        call: CallState,
        loop: asyncio.AbstractEventLoop,
        budget: Budget,
    ) -> Prepared:
        """The query parsed, checked, keyed and fitted: a request past LARGE_REQUEST_BYTES on a
        solver slot (a worker process, when the pool has them: its observations stay there,
        their fit comes back), a smaller one here, one at a time (each holds the GIL, and the
        event loop waits behind it)."""
        if isinstance(request, Malformed):
            bad("request", request.error)
        # from gRPC, the bytes as they came (never parsed on the loop); from HTTP, a message
        data = request.data if isinstance(request, Wire) else request.SerializeToString()
        chars = self.settings.max_string_chars
        if len(data) <= LARGE_REQUEST_BYTES:
            with self.converting:
                return prepare_query(method, data, chars, budget.deadline, False, stop=call.stop)
        solve = self.rt.solve(call, method, prepare_query, method, data, chars, budget.deadline)
        future = asyncio.run_coroutine_threadsafe(solve, loop)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            budget.check()
            raise
        finally:
            future.cancel()

    def _cells(
        self,
        method: str,
        call: CallState,
        loop: asyncio.AbstractEventLoop,
        tasks: Sequence[CellTask],
        budget: Budget,
    ) -> list[CellOutcome]:
        """The CellSolver of a query: its cells in turns on the runtime's slots (`_turns`;
        what a turn leaves undone goes in a turn of its own)."""
        budget.check()
        tasks = list(tasks)
        futures: list[concurrent.futures.Future[list[CellOutcome]]] = []

        def turn(a: int, b: int) -> concurrent.futures.Future[list[CellOutcome]]:
            solve = self.rt.solve(call, method, run_cells, tasks[a:b], budget.deadline, TURN_CPU_S)
            futures.append(asyncio.run_coroutine_threadsafe(solve, loop))
            return futures[-1]

        try:
            out: list[CellOutcome] = []
            turns = _turns(len(tasks), self.width)
            for (_, b), future in zip(turns, [turn(a, b) for a, b in turns], strict=True):
                while True:
                    try:
                        out += future.result()
                    except (RpcFailure, concurrent.futures.CancelledError):
                        budget.check()  # the call ended: say so as the query does
                        raise
                    if len(out) == b:
                        break
                    future = turn(len(out), b)
            return out
        finally:
            for future in futures:
                future.cancel()

    def _capped(self, req: Any) -> Any:
        """Each cell's time limit capped by the server's max_time_limit_s."""
        limit = min(req.options.cell_time_limit_s, self.settings.max_time_limit_s)
        if limit == req.options.cell_time_limit_s:
            return req
        options = req.options.model_copy(update={"cell_time_limit_s": limit})
        return req.model_copy(update={"options": options})

    def _budget(self, call: CallState) -> Budget:
        """The call's stop event, and its deadline less the time kept back to send the answer
        (as a plan's: `deadline_reserve` of what is left, and `deadline_margin_s`)."""
        s = self.settings
        remaining = call.remaining()
        keep = max(remaining, 0.0) * s.deadline_reserve + s.deadline_margin_s
        return Budget(stop=call.stop, deadline=time.monotonic() + remaining - keep)


def _turns(n: int, width: int) -> list[tuple[int, int]]:
    """n cells cut into consecutive turns [a, b) of at most TURN_CELLS, fewer towards the end
    (half of each of the `width` slots' share of what is left, then one) so the slots end
    together."""
    out, a = [], 0
    while a < n:
        b = a + max(1, min(TURN_CELLS, (n - a) // (2 * width)))
        out.append((a, b))
        a = b
    return out


def _answer(
    method: str,
    req: Any,
    budget: Budget,
    curves: AnswerCache[CurveResult],
    cells: CellSolver,
    fit: Fit | None = None,
) -> BaseModel:
    if method == "ScalingCurve":
        return scaling_curve(req, budget, curves, cells, fit)
    if method == "Replan":
        return replan(req, budget, solver=cells)
    if method == "SmallestAllocation":
        return smallest_allocation(req, budget, curves=curves, solver=cells, fit=fit)
    return training_front(req, budget, curves=curves, solver=cells, fit=fit)
