"""Solves on solver slots, for the Runtime: a call's fair turn for a slot, the solve started on
the runner, one queued behind a running solve on its worker (a batch's next item), the slot
handed on when the solve has really returned, and the metrics of each."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from meshplan.server.dispatch import SolveRunner
from meshplan.server.limits import CallState, FairSlots, RpcFailure
from meshplan.server.metrics import Metrics
from meshplan.server.tasks import Recalled, WorkerLost

T = TypeVar("T")


class Solves:
    """The solve half of server.runtime.Runtime (its slots, runner and metrics)."""

    metrics: Metrics
    runner: SolveRunner
    slots: FairSlots
    _behind: set[Solve]

    async def solve(self, call: CallState, method: str, fn: Callable[..., T], *args: Any) -> T:
        """fn(*args) on a solver slot, after the call's fair turn. If the call ends first
        (cancelled, or its deadline), its stop event is set and it ends at once; the slot is
        handed on when the solve has really returned."""
        return await self.outcome(call, await self.begin(call, method, fn, *args))

    async def begin(
        self, call: CallState, method: str, fn: Callable[..., Any], *args: Any
    ) -> Solve:
        """Start fn(*args) on a solver slot once it is the call's fair turn."""
        if call.stop.is_set():  # the call ended while this solve waited to be asked for
            raise RpcFailure(grpc.StatusCode.CANCELLED, "the call ended before the solve began")
        m = self.metrics
        m.solves_queued.inc()
        try:
            await self.slots.acquire(call.caller)
        finally:
            m.solves_queued.dec()
        solve = Solve(call, method, fn, args, holds_slot=True)
        try:
            solve.future = self.runner.start(fn, *args, stop=call.stop)
        except BaseException:
            self.slots.release(call.caller)
            raise
        self._watch(solve)
        return solve

    def begin_behind(
        self, ahead: Solve, call: CallState, method: str, fn: Callable[..., Any], *args: Any
    ) -> Solve | None:
        """Queue fn(*args) behind `ahead` (the same call's, on its worker) so that the worker
        starts it the moment `ahead` ends, and `ahead`'s slot passes to it; None when the
        runner cannot, or another solve waits for a slot (its turn comes first). If a solve
        starts waiting later, the queued one is asked back (and takes its turn again)."""
        if not self.can_queue_behind(ahead):
            return None
        future = self.runner.start_behind(ahead.future, fn, *args, stop=call.stop)
        if future is None:
            return None
        solve = Solve(call, method, fn, args, holds_slot=False, future=future)
        ahead.next = solve
        self._behind.add(solve)
        self._watch(solve)
        return solve

    def can_queue_behind(self, ahead: Solve) -> bool:
        """Whether `begin_behind(ahead, ...)` would queue a solve now."""
        return (
            ahead.next is None
            and not self.slots.queued
            and not ahead.call.stop.is_set()
            and self.runner.running(ahead.future)
        )

    async def outcome(self, call: CallState, solve: Solve) -> Any:
        """The result of a started solve (one asked back before it ran is started again)."""
        while True:
            try:
                return await asyncio.shield(solve.future)
            except Recalled:
                solve = await self.begin(call, solve.method, solve.fn, *solve.args)
                continue
            except WorkerLost as err:  # the pool replaced the process: say so, plainly
                raise RpcFailure(grpc.StatusCode.INTERNAL, f"{err}; retry the call") from err
            except asyncio.CancelledError:
                call.stop.set()  # the solver polls it (and tells CP-SAT to stop)
                raise
            finally:
                if solve.holds_slot:  # it ran (a recalled one did not)
                    call.solve_s += time.monotonic() - solve.started

    def _watch(self, solve: Solve) -> None:
        if solve.holds_slot:  # in flight: on a slot (one queued behind joins when it starts)
            self.metrics.solves_in_flight.inc()
        solve.future.add_done_callback(_retrieve)  # its outcome may be moot (call ended)
        solve.future.add_done_callback(lambda _: self._finished(solve))

    def _finished(self, solve: Solve) -> None:
        """A solve has returned: its slot passes to the one queued behind it on its worker if
        that one now runs, else back to the fair slots."""
        m = self.metrics
        if solve.future.cancelled() or not isinstance(solve.future.exception(), Recalled):
            m.child(m.solve_seconds, solve.method).observe(time.monotonic() - solve.started)
        self._behind.discard(solve)
        following = solve.next
        if not solve.holds_slot:
            return
        m.solves_in_flight.dec()
        if following is not None and self.runner.running(following.future):
            following.holds_slot = True
            following.started = time.monotonic()
            m.solves_in_flight.inc()
            self._behind.discard(following)
        else:
            self.slots.release(solve.call.caller)

    def _recall(self, caller: str) -> None:
        """A solve of `caller` waits for a slot: the solves queued behind running ones are
        asked back (and wait their turn too), so it waits for at most the solves running now."""
        for solve in list(self._behind):
            if self.runner.recall(solve.future):
                self._behind.discard(solve)


class Solve:
    """One solve handed to the runner, and the solver slot it holds (or will)."""

    def __init__(
        self,
        call: CallState,
        method: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        *,
        holds_slot: bool,
        future: asyncio.Future[Any] | None = None,
    ) -> None:
        self.call, self.method, self.fn, self.args = call, method, fn, args
        self.holds_slot = holds_slot  # False: queued behind another solve, or asked back
        self.future: asyncio.Future[Any] = future  # type: ignore[assignment]
        self.started = time.monotonic()
        self.next: Solve | None = None  # queued behind this one on its worker


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # marked retrieved: no "exception was never retrieved" warning
