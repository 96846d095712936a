"""Admission, fair solver slots and what one call carries (id, caller, deadline, stop event).

Every Planner call takes an admission ticket (tickets = solver slots + queue, and at most
`max_calls_per_caller` per caller); a call that finds none fails at once with
RESOURCE_EXHAUSTED, so nothing queues without bound. Every solve then takes a solver slot from
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
    """Tickets for calls in progress: `total` in all, `per_caller` for any one caller, and at
    most `batch_per_caller` batch requests pending for one caller."""

    def __init__(self, total: int, per_caller: int, batch_per_caller: int) -> None:
        self.total, self.per_caller, self.batch_per_caller = total, per_caller, batch_per_caller
        self.calls: Counter[str] = Counter()
        self.batch: Counter[str] = Counter()

    @property
    def in_progress(self) -> int:
        """Calls admitted and not yet finished."""
        return sum(self.calls.values())

    @contextmanager
    def admit(self, caller: str, batch_requests: int = 0) -> Iterator[None]:
        """Hold a ticket (and room for `batch_requests`) for a call, or raise RESOURCE_EXHAUSTED."""
        if self.in_progress >= self.total:
            raise busy(f"server busy: {self.in_progress} calls in progress")
        if self.calls[caller] >= self.per_caller:
            raise busy(
                f"caller {caller} has {self.calls[caller]} calls in progress, the most one "
                f"caller may have"
            )
        if batch_requests and self.batch[caller] + batch_requests > self.batch_per_caller:
            raise busy(
                f"caller {caller} has {self.batch[caller]} batch requests pending; "
                f"{batch_requests} more would pass the cap of {self.batch_per_caller} per caller"
            )
        self.calls[caller] += 1
        self.batch[caller] += batch_requests
        try:
            yield
        finally:
            self.calls[caller] -= 1
            self.batch[caller] -= batch_requests
            self.calls += Counter()  # drop callers at zero
            self.batch += Counter()


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
