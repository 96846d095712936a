"""Where solves run: one small interface between the event loop and the solver.

`runner.start(fn, *args, stop=event)` begins the blocking call `fn(*args, stop=<an event>)` off
the event loop and returns an asyncio future that completes when the call has really ended;
setting `stop` asks it to end now (fn polls the event it is given: in-process `stop` itself, in
a worker process a local event the runner sets when `stop` is set). The runtime answers a call at
its deadline without waiting for that future, and hands the solver slot on only when the future
completes, so the slots always count what really runs.

- `ThreadRunner`: a thread pool in the server process (CP-SAT releases the GIL while it solves;
  the Python that builds the model does not).
- `server.pool.ProcessRunner`: spawned worker processes, one solve each at a time, so the solves
  use every core. fn and its arguments must then be picklable (module-level functions). It can
  also queue a call behind a running one on the same worker (`start_behind`, `recall`,
  `running`): the runtime then hands the slot from one to the next (Runtime.begin_behind).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from functools import partial
from typing import Any, Protocol, TypeVar

from meshplan.server.memory import settle_heap

T = TypeVar("T")


class StopEvent(threading.Event):
    """A threading.Event that also calls back when set, so a runner can forward a stop to a
    worker process at once instead of polling for it."""

    def __init__(self, label: str = "") -> None:
        super().__init__()
        self.label = label  # the call it stops ("Plan request_id=..."): named in the logs
        self._callbacks: list[Callable[[], None]] = []
        self._guard = threading.Lock()

    def set(self) -> None:
        with self._guard:
            if self.is_set():
                return
            super().set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` once when the event is set (now, if it is); returns a function that
        forgets the callback."""
        with self._guard:
            if not self.is_set():
                self._callbacks.append(callback)
                return partial(self._forget, callback)
        callback()
        return lambda: None

    def _forget(self, callback: Callable[[], None]) -> None:
        with self._guard:
            if callback in self._callbacks:
                self._callbacks.remove(callback)


class SolveRunner(Protocol):
    """Runs blocking solves off the event loop."""

    def start(self, fn: Callable[..., T], *args: Any, stop: threading.Event) -> asyncio.Future[T]:
        """Begin fn(*args, stop=...); the future completes with its result once it has returned."""
        ...

    def close(self) -> None:
        """Release the workers (solves still running are told to stop)."""
        ...

    def start_behind(
        self, after: asyncio.Future[Any], fn: Callable[..., T], *args: Any, stop: threading.Event
    ) -> asyncio.Future[T] | None:
        """Queue fn(*args) to start where the call of `after` runs, the moment it ends; None
        when the runner cannot (then the caller waits for a slot as usual)."""
        ...

    def recall(self, future: asyncio.Future[Any]) -> bool:
        """Take back a call queued by start_behind before it starts; False if it is not queued."""
        ...

    def running(self, future: asyncio.Future[Any]) -> bool:
        """Whether the call of `future` runs now (not queued, not taken back, not ended)."""
        ...


def _then_settle(fn: Callable[..., T], *args: Any, stop: threading.Event) -> T:
    """fn, then settle the heap (server/memory.py) as a worker process does after each call."""
    try:
        return fn(*args, stop=stop)
    finally:
        settle_heap()


class ThreadRunner:
    """SolveRunner over a thread pool of `workers` threads (one per solver slot); fn polls
    `stop` itself (solver.plan's stop_event), so the runner only has to pass it on."""

    processes = 0  # solves run in the server process

    def __init__(self, workers: int) -> None:
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="meshplan-solve")

    def start(self, fn: Callable[..., T], *args: Any, stop: threading.Event) -> asyncio.Future[T]:
        # The thread hands its outcome to the loop in one call_soon_threadsafe, not through a
        # concurrent.futures.Future chained to this one (run_in_executor): less work per solve.
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()

        def run() -> None:
            try:
                outcome: tuple[bool, Any] = (True, _then_settle(fn, *args, stop=stop))
            except BaseException as err:  # noqa: BLE001  handed to the awaiting coroutine
                outcome = (False, err)
            _post(loop, _settle_future, future, outcome)

        work = self.pool.submit(run)
        work.add_done_callback(lambda w: w.cancelled() and _post(loop, future.cancel))
        return future

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    # A thread is given its next call by the executor at once: nothing to queue behind.
    def start_behind(
        self, after: asyncio.Future[Any], fn: Callable[..., T], *args: Any, stop: threading.Event
    ) -> asyncio.Future[T] | None:
        return None

    def recall(self, future: asyncio.Future[Any]) -> bool:
        return False

    def running(self, future: asyncio.Future[Any]) -> bool:
        return False


def _settle_future(future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if future.done():  # cancelled when the pool shut down
        return
    ok, value = outcome
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def _post(loop: asyncio.AbstractEventLoop, callback: Callable[..., Any], *args: Any) -> None:
    with suppress(RuntimeError):  # the loop is closed: nobody awaits the outcome any more
        loop.call_soon_threadsafe(callback, *args)
