"""Admission, solver slots, deadlines and the one log line per call.

Every Planner call takes an admission ticket (tickets = solver slots + queue); a call that finds
none fails at once with RESOURCE_EXHAUSTED, so nothing queues without bound. Every solve also
takes a solver slot, waiting for one until its call is cancelled or its deadline passes.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import grpc

from meshplan.server.validate import Violation

log = logging.getLogger("meshplan.server")

REQUEST_ID_KEY = "x-request-id"
_NO_DEADLINE_S = 1e6  # time_remaining() beyond this means the call set no deadline
_POLL_S = 0.01  # how often a queued solve looks at its call's cancellation and deadline


class RpcFailure(Exception):
    """A call (or one batch item) that ends with a non-OK status."""

    def __init__(
        self, code: grpc.StatusCode, message: str, violations: list[Violation] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.violations = violations or []
        self.request_id = ""  # set by track_call


@dataclass
class CallState:
    """What one call carries through the servicer: its id, deadline, stop event and solve time."""

    method: str
    request_id: str
    deadline: float | None  # time.monotonic() at which the RPC deadline passes
    stop: threading.Event = field(default_factory=threading.Event)
    solve_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def remaining(self) -> float | None:
        """Seconds until the RPC deadline (None: no deadline)."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    def add_solve_time(self, seconds: float) -> None:
        with self.lock:
            self.solve_s += seconds


class SolveSlots:
    """Bounded admission (tickets) and bounded concurrency (slots) for solves."""

    def __init__(self, slots: int, queued: int) -> None:
        self._slots = threading.Semaphore(slots)
        self._tickets = slots + queued
        self._admitted = 0
        self._lock = threading.Lock()

    @contextmanager
    def admit(self) -> Iterator[None]:
        """Hold one admission ticket for the duration of a call, or fail RESOURCE_EXHAUSTED."""
        with self._lock:
            if self._admitted >= self._tickets:
                raise RpcFailure(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"server busy: {self._admitted} calls in progress; retry later",
                )
            self._admitted += 1
        try:
            yield
        finally:
            with self._lock:
                self._admitted -= 1

    @contextmanager
    def slot(self, call: CallState) -> Iterator[None]:
        """Hold one solver slot, waiting until the call is cancelled or its deadline passes."""
        while not self._slots.acquire(timeout=_POLL_S):
            if call.stop.is_set():
                raise RpcFailure(grpc.StatusCode.CANCELLED, "call cancelled while queued")
            remaining = call.remaining()
            if remaining is not None and remaining <= 0:
                raise RpcFailure(
                    grpc.StatusCode.DEADLINE_EXCEEDED, "deadline passed while waiting for a solver"
                )
        if call.stop.is_set():  # cancelled just as a slot came free
            self._slots.release()
            raise RpcFailure(grpc.StatusCode.CANCELLED, "call cancelled while queued")
        try:
            yield
        finally:
            self._slots.release()


def _request_id(context: grpc.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == REQUEST_ID_KEY and value:
            return str(value)[:64]
    return uuid.uuid4().hex[:16]


@contextmanager
def track_call(method: str, context: grpc.ServicerContext) -> Iterator[CallState]:
    """Set up a call (request id, deadline, stop on cancel) and log one line when it ends."""
    remaining = context.time_remaining()
    has_deadline = remaining is not None and remaining < _NO_DEADLINE_S
    call = CallState(
        method=method,
        request_id=_request_id(context),
        deadline=time.monotonic() + remaining if has_deadline else None,
    )
    context.add_callback(call.stop.set)  # runs when the RPC ends, including on cancellation
    # Trailing, not initial, metadata: response headers would commit the call and stop the
    # client's retry policy from moving it to another replica if this one dies mid-solve.
    context.set_trailing_metadata(((REQUEST_ID_KEY, call.request_id),))
    status = "OK"
    try:
        yield call
    except RpcFailure as failure:
        status = failure.code.name
        failure.request_id = call.request_id
        raise
    except GeneratorExit:  # a streaming call closed by the client
        status = "CANCELLED"
        raise
    except Exception:
        code = context.code()
        status = code.name if code is not None else "INTERNAL"
        raise
    finally:
        if status == "OK" and not context.is_active():
            status = "CANCELLED"
        log.info(
            "method=%s request_id=%s status=%s solve_s=%.3f",
            method,
            call.request_id,
            status,
            call.solve_s,
        )
