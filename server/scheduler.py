"""The scheduler RPCs of meshplan.v1.Planner: ScalingCurve, Replan, SmallestAllocation and
TrainingFront, registered next to PlannerServicer in server.app.SERVICES.

Each goes through the shared Runtime like a plan: an admission ticket (the per-caller limits),
the call's capped deadline, the log line and the metrics. The query itself (checks, the
observations' fit, envelopes, answers) runs on a thread of the server; its cells run in turns
of a few cells (TURN_CELLS, TURN_CPU_S), each turn a solve (`Runtime.solve`: a fair turn on a
solver slot, in a worker process when the pool has them), so a curve's cells spread over the
pool and another caller waits for at most one cell and TURN_CPU_S. All run under a `Budget`
made of the call's stop event (set on cancel or deadline) and its deadline less the time kept
back to send the answer. Answers are memoised by cache key as response messages (the same
request gives the same bytes); the curves that SmallestAllocation and TrainingFront walk are
memoised too.
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
from meshplan.server.requests import check_message, parse_in_steps
from meshplan.server.runtime import Runtime
from meshplan.server.validate import Violation, shorten
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
    cache_key,
    cost_model_version,
    replan,
    scaling_curve,
    smallest_allocation,
    training_front,
)
from meshplan.solver.scheduler.cache import curve_bytes
from meshplan.solver.scheduler.cells import CellOutcome, CellSolver, CellTask, run_cells
from meshplan.solver.scheduler.curve import observed_fit
from meshplan.solver.scheduler.observe import Fit
from meshplan.v1 import scheduler_pb2

# One turn on a solver slot runs up to TURN_CELLS cells, and starts none after TURN_CPU_S of CPU
# time: a turn saves the hand-off between two solves (a solver process idle 2.2-7 ms per cell,
# measured on 2 cores under load, against 12-17 ms of CPU per cell of the benchmark's 70B
# curve), and another caller still waits for at most one cell and TURN_CPU_S.
TURN_CELLS = 4
TURN_CPU_S = 0.05

# method -> (request model, response message)
QUERIES: dict[str, tuple[type[BaseModel], type[Message]]] = {
    "ScalingCurve": (CurveRequest, scheduler_pb2.ScalingCurveResponse),
    "Replan": (ReplanRequest, scheduler_pb2.ReplanResponse),
    "SmallestAllocation": (AdmitRequest, scheduler_pb2.SmallestAllocationResponse),
    "TrainingFront": (FrontRequest, scheduler_pb2.TrainingFrontResponse),
}


class SchedulerServicer:
    """The four scheduler queries over one Runtime (shared with PlannerServicer)."""

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
        """The response message of a scheduler query: its request (a proto message, or
        Malformed) checked, parsed, looked up and answered on a query thread, never on the
        event loop (a 1 MiB request takes a second to convert); RpcFailure for what is not an
        answer. Callable from outside gRPC (the HTTP front end) inside `Runtime.unary`'s body."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.queries, self._run, method, request, call, loop)

    def _run(
        self, method: str, request: Any, call: CallState, loop: asyncio.AbstractEventLoop
    ) -> Message:
        """On a query thread: the request parsed (in steps, between which the call's end
        stops it), the answer from the cache or the query under the call's budget (its cells
        solved through the runtime's slots), and its response message."""
        budget = self._budget(call)
        cells = partial(self._cells, method, call, loop)
        try:
            budget.check()
            # one conversion and one fit at a time hold the GIL (the event loop waits behind
            # each), not one per query in progress
            with self.converting:
                message = check_message(request, self.settings.max_string_chars)
                req = parse_in_steps(message, QUERIES[method][0], budget.check)
                key = _answer_key(method, req)
                hit = self.answers.get(key) if key is not None else None
                if hit is not None:
                    return QUERIES[method][1].FromString(hit)
                fit = observed_fit(req, budget) if getattr(req, "observations", None) else None
            result = _answer(method, self._capped(req), budget, self.curves, cells, fit)
            answer = answer_proto(result, QUERIES[method][1], req)
        except SchedulerInputError as err:
            violation = Violation(err.field, shorten(err.description, 300))
            raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, str(err), [violation]) from err
        except QueryStopped as err:
            code = grpc.StatusCode.CANCELLED if err.cancelled else grpc.StatusCode.DEADLINE_EXCEEDED
            raise RpcFailure(code, f"{method} stopped: {err}") from err
        except (ValueError, KeyError, OverflowError) as err:  # what a cell's plan refused
            raise invalid(err, req) from err
        if key is not None:
            self.answers[key] = answer.SerializeToString()
        return answer

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


def _answer_key(method: str, req: Any) -> str | None:
    """The answer's cache key; None for a deadline against the server's clock (it moves)."""
    if isinstance(req, AdmitRequest) and req.deadline_unix_s and not req.now_unix_s:
        return None
    return f"{method}:{cache_key(method, req)}"
