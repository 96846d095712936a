"""What server/pool.py (the runner) and server/courier.py (one worker process each) share: a call
handed to the pool, the two ways it ends without an answer, settling its future from any thread,
and the environment a worker is spawned with."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol


class WorkerLost(Exception):
    """The worker process running a call ended before answering (it has been replaced)."""


class Recalled(Exception):
    """A call that has not run, and may be started again: queued behind another one in a
    worker's pipe and taken back before it started (recalled, or its worker ended first), or
    sent to a worker that stopped answering (killed and replaced; server/courier.py)."""


def _nothing() -> None:
    pass


@dataclass
class Task:
    """One call handed to the pool: fn(*args, stop=...) in a worker, its future on `loop`."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    stop: threading.Event
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    seq: int = 0  # its message number on its worker's pipe (0: not sent)
    forget_stop: Callable[[], None] = _nothing
    recall_sent: bool = False

    @property
    def label(self) -> str:
        """The call this task runs, as the logs name it (its stop's label: method, request id)."""
        return getattr(self.stop, "label", "") or "unnamed"


class Pool(Protocol):
    """What a worker's courier (server/courier.py, server/heartbeat.py) reads of its runner,
    server/pool.py's ProcessRunner."""

    kill_after_s: float  # a solve still running this long after its stop: its process is killed
    heartbeat_s: float  # a courier pings its worker this often
    answer_s: float  # an idle worker that has not answered a ping this long is replaced
    _lock: threading.Lock  # guards _idle and each courier's current call
    _idle: list[Any]  # the couriers without a call
    _closed: bool

    def _free(self, courier: Any) -> None:
        """`courier` has no call: give it the next pending one, if any."""


def settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    """Complete `future` with a result (ok) or an exception, unless it is done (on its loop)."""
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def settle_from_any_thread(task: Task, ok: bool, value: Any) -> None:
    call_soon(task.loop, settle, task.future, ok, value)


def call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed: no one is waiting
        loop.call_soon_threadsafe(fn, *args)


def how_it_ended(code: int | None) -> str:
    """A process's end in words: 'killed by SIGKILL', 'exit code 1'."""
    if code is not None and code < 0 and -code in signal.valid_signals():
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


# Each worker is one solve on one core: a BLAS or OpenMP pool of a thread per CPU in every worker
# only contends with the other workers. Measured here (80 plans of the throughput suite, 2 CPUs
# shared with other jobs): one worker took 12.8-13.9 s with OpenBLAS's default threads and
# 8.1-9.5 s with one. An operator's own setting of these variables is kept.
_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_ENVIRON_LOCK = threading.Lock()


@contextlib.contextmanager
def one_thread_per_library() -> Iterator[None]:
    """The environment a worker is spawned with: one thread per numeric library, unless set."""
    with _ENVIRON_LOCK:
        added = [k for k in _THREAD_VARIABLES if k not in os.environ]
        for key in added:
            os.environ[key] = "1"
        try:
            yield
        finally:
            for key in added:
                os.environ.pop(key, None)
