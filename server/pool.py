"""ProcessRunner: the SolveRunner of server.dispatch over spawned worker processes.

Each worker process runs one solve at a time, so N workers use N cores (a thread pool shares one
interpreter: the Python that builds each model holds the GIL). The event loop that starts a call
sends it down an idle worker's pipe (pickled: fn must be a module-level function) and reads the
answer itself when the pipe becomes readable (`loop.add_reader`): an answer is two wake-ups,
worker to loop and loop to the next worker, with no thread in between. The call's stop event is
forwarded at once (`StopEvent.on_set`) over a second pipe, where a small thread in the worker
sets the local event that fn polls (solver.plan's stop_event).

`start_behind(after, fn, ...)` queues a call in the pipe of the worker solving `after`, so the
worker starts it the moment it has answered, with no round trip through the server (PlanBatch
keeps its next item there). Stops reach such a call alone (they name its message number), and
`recall` asks it back before it starts: the worker then answers `Recalled` without running it,
as does a worker that ends or is killed with a call queued (only the running call fails).

Workers are spawned (a fork would copy the server's gRPC and OR-Tools threads mid-flight) by one
"courier" thread each (server/courier.py), off the event loop, warm up (import the solver, solve
one small plan, gc.freeze), and then serve until their pipe closes: they also end if the server
dies. A worker that dies mid-solve (killed, out of memory, a crash in native code) is replaced by
its courier, and its call fails with `WorkerLost`; a worker that does not end within
`kill_after_s` of a stop is killed and replaced the same way, so a stop always ends the solve; a
worker that does not answer its courier's ping within `answer_s` (stopped) is killed and
replaced, and its call started again (`Recalled`). Each worker keeps its own caches
(solver/cache.py): they warm per process. The worker's side is server/worker.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from meshplan.server.courier import END, START_TIMEOUT_S, Courier
from meshplan.server.tasks import (
    Recalled,
    Task,
    WorkerLost,
    call_soon,
    one_thread_per_library,
    settle_from_any_thread,
)

__all__ = ["ProcessRunner", "Recalled", "WorkerLost", "one_thread_per_library"]

T = TypeVar("T")

KILL_AFTER_S = 10.0  # a solve still running this long after its stop: its process is killed
HEARTBEAT_S = 1.0  # a courier pings its worker after this long without another order
ANSWER_S = 3.0  # an idle worker that has not answered a ping within this long is replaced


class ProcessRunner:
    """SolveRunner over `processes` spawned worker processes (see the module docstring)."""

    def __init__(
        self,
        processes: int,
        *,
        warm: bool = True,
        kill_after_s: float = KILL_AFTER_S,
        heartbeat_s: float = HEARTBEAT_S,
        answer_s: float = ANSWER_S,
        cache_bytes: int | None = None,
    ) -> None:
        self.processes = processes
        self.kill_after_s = kill_after_s
        self.heartbeat_s, self.answer_s = heartbeat_s, answer_s
        self._lock = threading.Lock()  # guards _pending, _idle and each courier's `current`
        self._pending: deque[Task] = deque()  # started, waiting for an idle worker
        self._idle: list[Courier] = []  # workers without a call (started, or failed to)
        self._closed = False
        # each worker bounds its caches to cache_bytes (solver/cache.py `configure`)
        self._couriers = [Courier(self, i, warm, cache_bytes) for i in range(processes)]

    def start(self, fn: Callable[..., T], *args: Any, stop: threading.Event) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        task = Task(fn, args, stop, future, loop)
        with self._lock:
            if self._closed:
                future.set_exception(WorkerLost("the solver pool is shut down"))
                return future
            if not self._idle:
                self._pending.append(task)
                return future
            courier = self._idle.pop()
            courier.current = task
        courier.begin(task)
        return future

    def start_behind(
        self, after: asyncio.Future[Any], fn: Callable[..., T], *args: Any, stop: threading.Event
    ) -> asyncio.Future[T] | None:
        """Queue fn(*args) in the pipe of the worker solving `after`, so it starts the moment
        that one ends; None if `after` is not solving on a worker with no call queued. A call
        so queued may end with `Recalled` (see `recall`) instead of running."""
        loop = asyncio.get_running_loop()
        with self._lock:
            courier = next(
                (
                    c
                    for c in self._couriers
                    if c.current is not None and c.current.future is after and c.standby is None
                ),
                None,
            )
            if self._closed or courier is None or courier.current.loop is not loop:  # type: ignore[union-attr]
                return None
            future: asyncio.Future[T] = loop.create_future()
            task = Task(fn, args, stop, future, loop)
            courier.standby = task
        courier.queue(task)
        return future

    def recall(self, future: asyncio.Future[Any]) -> bool:
        """Ask for a call queued by `start_behind` back, if it has not started: its worker
        answers `Recalled` instead of running it. False if it is not queued (any more)."""
        for courier in self._couriers:
            task = courier.standby
            if task is not None and task.future is future and not task.recall_sent:
                task.recall_sent = True
                courier.send_ctrl(("recall", task.seq))
                return True
        return False

    def running(self, future: asyncio.Future[Any]) -> bool:
        """Whether the call of `future` is its worker's current call (started, or it starts
        now) and not asked back."""
        return any(
            c.current is not None
            and c.current.future is future
            and not c.current.recall_sent
            and not future.done()
            for c in self._couriers
        )

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> int:
        """Wait until every worker has started and warmed up; the number ready."""
        end = time.monotonic() + timeout
        for courier in self._couriers:
            courier.ready.wait(max(end - time.monotonic(), 0))
        return sum(c.ready.is_set() for c in self._couriers)

    def pids(self) -> list[int | None]:
        """The worker processes' ids (None: not started yet, or being replaced)."""
        return [c.pid for c in self._couriers]

    def close(self) -> None:
        """Stop taking tasks; each worker ends after its solve (stopped) or at once if idle."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pending, self._pending = list(self._pending), deque()
            idle, self._idle = self._idle, []
            idle += [c for c in self._couriers if c.resting and c.current is None]
            running = [c.current for c in self._couriers if c.current is not None]
            for courier in self._couriers:  # queued behind a solve: asked back, failed now
                if courier.standby is not None:
                    courier.send_ctrl(("recall", courier.standby.seq))
                    pending.append(courier.standby)
                    courier.standby = None
        for task in pending:
            settle_from_any_thread(task, False, WorkerLost("the solver pool is shut down"))
        for task in running:
            task.stop.set()  # its courier ends the worker when the answer is in
        for courier in idle:
            courier.orders.put(END)

    def join(self, timeout: float = 10.0) -> None:
        """Wait for the couriers and their processes to end (after close)."""
        end = time.monotonic() + timeout
        for courier in self._couriers:
            courier.thread.join(max(end - time.monotonic(), 0))

    def _free(self, courier: Courier) -> None:
        """`courier` has no call (from any thread): give it the next pending task, if any."""
        with self._lock:
            if self._closed:
                task = None
            elif self._pending:
                task = self._pending.popleft()
                courier.current = task
            else:
                self._idle.append(courier)
                return
        if task is None:
            courier.orders.put(END)
        elif asyncio._get_running_loop() is task.loop:
            courier.begin(task)
        else:
            call_soon(task.loop, courier.begin, task)
