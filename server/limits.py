"""Admission, fair solver slots and what one call carries (id, caller, deadline, stop event).

Every Planner call takes an admission ticket (tickets = solver slots + queue); a call that finds
none waits in its caller's queue, served in turns across callers and bounded by its deadline,
with at most `max_calls_per_caller` per caller and `max_waiting_calls` waiting in all (beyond:
RESOURCE_EXHAUSTED at once), so nothing queues without bound. Every solve then takes a solver slot from
`FairSlots`: first come, first served, except that a caller at its share of running solves
waits while another caller's solve goes first. Everything here runs on the server's event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import threading
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc

from meshplan.server.dispatch import StopEvent
from meshplan.server.validate import Violation

REQUEST_ID_KEY = "x-request-id"
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")  # what a caller-chosen id may hold


class RpcFailure(Exception):
    """A call (or one batch item) that ends with a non-OK status."""

    def __init__(
        self, code: grpc.StatusCode, message: str, violations: list[Violation] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.violations = violations or []

    def __reduce__(self) -> tuple[Any, ...]:  # crosses from a worker process intact
        return (RpcFailure, (self.code, self.message, self.violations))


def busy(message: str) -> RpcFailure:
    """RESOURCE_EXHAUSTED with a message that says to retry later."""
    return RpcFailure(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{message}; retry later")


@dataclass
class CallState:
    """What one call carries through the servicer: its id, caller, deadline and stop event."""

    method: str
    request_id: str
    caller: str  # "token:<hash>" or the peer's address: the unit of fair use
    deadline: float  # time.monotonic() at which the call ends (the caller's, capped)
    started: float = field(default_factory=time.monotonic)
    stop: threading.Event = field(default_factory=StopEvent)  # read by solves (forwarded)
    solve_s: float = 0.0
    transport: str = "grpc"  # or "http": the metrics' label

    def __post_init__(self) -> None:
        if isinstance(self.stop, StopEvent) and not self.stop.label:
            self.stop.label = f"{self.method} request_id={self.request_id}"

    def remaining(self) -> float:
        """Seconds until the call's deadline."""
        return self.deadline - time.monotonic()


def request_id(metadata: object) -> str:
    """The caller's x-request-id if it is a short plain token, else a fresh one: an id is
    logged and echoed, so it must not be able to forge a log field or a line."""
    for key, value in metadata or ():  # type: ignore[attr-defined]
        if key == REQUEST_ID_KEY and isinstance(value, str) and _REQUEST_ID.fullmatch(value):
            return value
    return os.urandom(8).hex()  # 16 random hex digits, as uuid4().hex[:16] but cheaper


def peer_address(peer: str) -> str:
    """The caller's address without its port: 'ipv4:10.0.0.5:41234' -> 'ipv4:10.0.0.5'."""
    if peer.startswith(("ipv4:", "ipv6:")):
        return peer.rsplit(":", 1)[0]
    return peer or "unknown"


class Admission:
    """Tickets for calls in progress: `total` in all. A call that finds none waits in its
    caller's queue, bounded by its deadline; when a ticket frees it goes to the waiting caller
    with the fewest calls in progress, then the one served longest ago (turns, not arrival
    order), so a caller that sends many calls, or retries fast, gets no more than its turn.
    Refused at once with RESOURCE_EXHAUSTED: a caller's call past `per_caller` (in progress
    and waiting), past `batch_per_caller` batch requests pending, or past `max_waiting` calls
    waiting in all. A batch larger than a caller may ever have pending is INVALID_ARGUMENT."""

    def __init__(
        self, total: int, per_caller: int, batch_per_caller: int, max_waiting: int = 0
    ) -> None:
        self.total, self.per_caller, self.batch_per_caller = total, per_caller, batch_per_caller
        self.max_waiting = max_waiting
        self.calls: Counter[str] = Counter()
        self.batch: Counter[str] = Counter()
        self.waiting: dict[str, deque[asyncio.Future[None]]] = {}
        self.last_served: dict[str, int] = {}
        self._seq = itertools.count()

    @property
    def in_progress(self) -> int:
        """Calls admitted and not yet finished."""
        return sum(self.calls.values())

    @property
    def queued(self) -> int:
        """Calls waiting for a ticket."""
        return sum(len(q) for q in self.waiting.values())

    @asynccontextmanager
    async def admit(
        self, caller: str, batch_requests: int = 0, deadline: float | None = None
    ) -> AsyncIterator[None]:
        """Hold a ticket (and room for `batch_requests`) for a call, waiting for one in turn
        until `deadline` (time.monotonic(); DEADLINE_EXCEEDED), or raise RESOURCE_EXHAUSTED."""
        if batch_requests > self.batch_per_caller:
            raise RpcFailure(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"requests: {batch_requests} requests, more than the {self.batch_per_caller} "
                "one caller may have pending",
                [Violation("requests", f"holds {batch_requests} requests, more than the "
                           f"{self.batch_per_caller} one caller may have pending; split it")],
            )  # fmt: skip
        held = self.calls[caller] + len(self.waiting.get(caller, ()))
        if held >= self.per_caller:
            raise busy(
                f"caller {caller} has {held} calls in progress or waiting, the most one "
                f"caller may have"
            )
        if batch_requests and self.batch[caller] + batch_requests > self.batch_per_caller:
            raise busy(
                f"caller {caller} has {self.batch[caller]} batch requests pending; "
                f"{batch_requests} more would pass the cap of {self.batch_per_caller} per caller"
            )
        self.batch[caller] += batch_requests
        try:
            if self.in_progress < self.total and not self.waiting:
                self._grant(caller)
            else:
                await self._wait(caller, deadline)
            try:
                yield
            finally:
                self._release(caller)
        finally:
            self.batch[caller] -= batch_requests
            self.batch += Counter()  # drop callers at zero

    async def _wait(self, caller: str, deadline: float | None) -> None:
        if self.queued >= self.max_waiting:
            raise busy(
                f"server busy: {self.in_progress} calls in progress and {self.queued} waiting"
            )
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(caller, deque()).append(future)
        self._dispatch()  # a ticket may be free (the queue was only others' turns)
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        try:
            async with asyncio.timeout(left):
                await future
        except BaseException as err:
            if future.done() and not future.cancelled() and future.exception() is None:
                self._release(caller)  # granted just as the wait ended: hand it on
            else:
                future.cancel()
                self._forget(caller, future)
            if isinstance(err, TimeoutError):
                raise RpcFailure(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"the call's deadline passed while it waited its turn ({self.in_progress} "
                    f"calls in progress, {self.queued} waiting)",
                ) from None
            raise

    def refuse_waiting(self, failure: RpcFailure) -> None:
        """End every wait with `failure` (the server drains: no call waits for its turn)."""
        for queue in self.waiting.values():
            for future in queue:
                if not future.done():
                    future.set_exception(failure)
        self.waiting.clear()

    def _grant(self, caller: str) -> None:
        self.calls[caller] += 1
        self.last_served[caller] = next(self._seq)

    def _release(self, caller: str) -> None:
        self.calls[caller] -= 1
        if self.calls[caller] <= 0:
            del self.calls[caller]
        self._dispatch()
        self.last_served = {
            c: s for c, s in self.last_served.items() if c in self.calls or c in self.waiting
        }

    def _forget(self, caller: str, future: asyncio.Future[None]) -> None:
        queue = self.waiting.get(caller)
        if queue is not None and future in queue:
            queue.remove(future)
            if not queue:
                del self.waiting[caller]

    def _dispatch(self) -> None:
        """Hand free tickets to waiting callers in turns."""
        while self.in_progress < self.total and self.waiting:
            caller = min(self.waiting, key=lambda c: (self.calls[c], self.last_served.get(c, -1)))
            future = self.waiting[caller].popleft()
            if not self.waiting[caller]:
                del self.waiting[caller]
            if future.done():  # its wait already ended
                continue
            self._grant(caller)
            future.set_result(None)


@dataclass(order=True)
class _Waiter:
    seq: int
    future: asyncio.Future[None] = field(compare=False)


class FairSlots:
    """`slots` solver slots handed out first come, first served, with `per_caller` the most any
    one caller runs at once. When a slot frees, it goes to the waiting caller with the fewest
    solves running, then the one served longest ago, then the earliest arrival; a caller's
    own solves keep their order. So a caller with a 1,024-request batch takes its share, and
    another caller's single plan waits for at most one of its solves: a solve that has to
    wait calls `on_wait`, with which the runtime asks back the solves a batch queued behind
    its running ones (Runtime.begin_behind)."""

    def __init__(self, slots: int, per_caller: int) -> None:
        self.free = slots
        self.per_caller = per_caller
        self.running: Counter[str] = Counter()
        self.waiting: dict[str, deque[_Waiter]] = {}
        self.last_served: dict[str, int] = {}
        self._seq = itertools.count()
        self.on_wait: Callable[[str], None] = lambda caller: None  # a solve of caller waits

    @property
    def queued(self) -> int:
        """Solves waiting for a slot."""
        return sum(len(q) for q in self.waiting.values())

    async def acquire(self, caller: str) -> None:
        """Wait for a slot (cancel the task to give up waiting)."""
        if self.free > 0 and self.running[caller] < self.per_caller and caller not in self.waiting:
            self._grant(caller)
            return
        waiter = _Waiter(next(self._seq), asyncio.get_running_loop().create_future())
        self.waiting.setdefault(caller, deque()).append(waiter)
        self.on_wait(caller)  # the runtime asks back solves queued behind running ones
        try:
            await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self.release(caller)  # granted just as the wait was cancelled: give it back
            else:
                self._forget(caller, waiter)
            raise

    def release(self, caller: str) -> None:
        """Give a slot back and hand it on."""
        self.running[caller] -= 1
        if self.running[caller] <= 0:
            del self.running[caller]
        self.free += 1
        self._dispatch()
        # A caller with nothing running or waiting is new again: it goes first among equals.
        self.last_served = {
            c: s for c, s in self.last_served.items() if c in self.running or c in self.waiting
        }

    def _grant(self, caller: str) -> None:
        self.free -= 1
        self.running[caller] += 1
        self.last_served[caller] = next(self._seq)

    def _forget(self, caller: str, waiter: _Waiter) -> None:
        queue = self.waiting.get(caller)
        if queue is not None and waiter in queue:
            queue.remove(waiter)
            if not queue:
                del self.waiting[caller]

    def _dispatch(self) -> None:
        while self.free > 0:
            ready = [c for c in self.waiting if self.running[c] < self.per_caller]
            if not ready:
                return
            caller = min(
                ready,
                key=lambda c: (
                    self.running[c],
                    self.last_served.get(c, -1),
                    self.waiting[c][0].seq,
                ),
            )
            waiter = self.waiting[caller].popleft()
            if not self.waiting[caller]:
                del self.waiting[caller]
            if waiter.future.done():  # cancelled while waiting
                continue
            self._grant(caller)
            waiter.future.set_result(None)
