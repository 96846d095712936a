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
"courier" thread each, off the event loop, warm up (import the solver, solve one small plan,
gc.freeze), and then serve until their pipe closes: they also end if the server dies. A worker
that dies mid-solve (killed, out of memory, a crash in native code) is replaced by its courier,
and its call fails with `WorkerLost`; a worker that does not end within `kill_after_s` of a stop
is killed and replaced the same way, so a stop always ends the solve. Each worker keeps its own
caches (solver/cache.py): they warm per process. The worker's side is server/worker.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from meshplan.server.dispatch import StopEvent
from meshplan.server.worker import worker_main

log = logging.getLogger("meshplan.server")
T = TypeVar("T")

KILL_AFTER_S = 10.0  # a solve still running this long after its stop: its process is killed
_START_TIMEOUT_S = 300.0  # spawn, import and warm-up of one worker, under load
_POLL_STOP_S = 0.05  # how often a stop event that is not a StopEvent is looked at


class WorkerLost(Exception):
    """The worker process running a call ended before answering (it has been replaced)."""


class Recalled(Exception):
    """A call queued behind another one in a worker's pipe was taken back before it started
    (recalled, or its worker ended first): it has not run, and may be started again."""


def _nothing() -> None:
    pass


@dataclass
class _Task:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    stop: threading.Event
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    seq: int = 0  # its message number on its worker's pipe (0: not sent)
    forget_stop: Callable[[], None] = _nothing
    recall_sent: bool = False


class ProcessRunner:
    """SolveRunner over `processes` spawned worker processes (see the module docstring)."""

    def __init__(
        self, processes: int, *, warm: bool = True, kill_after_s: float = KILL_AFTER_S
    ) -> None:
        self.processes = processes
        self.kill_after_s = kill_after_s
        self._lock = threading.Lock()  # guards _pending, _idle and each courier's `current`
        self._pending: deque[_Task] = deque()  # started, waiting for an idle worker
        self._idle: list[_Courier] = []  # workers without a call (started, or failed to)
        self._closed = False
        self._couriers = [_Courier(self, i, warm) for i in range(processes)]

    def start(self, fn: Callable[..., T], *args: Any, stop: threading.Event) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        task = _Task(fn, args, stop, future, loop)
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
            task = _Task(fn, args, stop, future, loop)
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

    def wait_ready(self, timeout: float = _START_TIMEOUT_S) -> int:
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
            running = [c.current for c in self._couriers if c.current is not None]
            for courier in self._couriers:  # queued behind a solve: asked back, failed now
                if courier.standby is not None:
                    courier.send_ctrl(("recall", courier.standby.seq))
                    pending.append(courier.standby)
                    courier.standby = None
        for task in pending:
            _settle_from_any_thread(task, False, WorkerLost("the solver pool is shut down"))
        for task in running:
            task.stop.set()  # its courier ends the worker when the answer is in
        for courier in idle:
            courier.orders.put(_END)

    def join(self, timeout: float = 10.0) -> None:
        """Wait for the couriers and their processes to end (after close)."""
        end = time.monotonic() + timeout
        for courier in self._couriers:
            courier.thread.join(max(end - time.monotonic(), 0))

    def _free(self, courier: _Courier) -> None:
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
            courier.orders.put(_END)
        elif asyncio._get_running_loop() is task.loop:
            courier.begin(task)
        else:
            _call_soon(task.loop, courier.begin, task)


_SPAWN, _END = "spawn", "end"  # orders to a courier thread (besides a task to spawn for)


class _Courier:
    """One worker process: its pipes, its call, and the thread that (re)spawns it."""

    def __init__(self, runner: ProcessRunner, index: int, warm: bool) -> None:
        self.runner = runner
        self.index = index
        self.warm = warm
        self.ready = threading.Event()
        self.proc: multiprocessing.process.BaseProcess | None = None
        self.conn: Connection | None = None
        self.ctrl: Connection | None = None
        self.ctrl_lock = threading.Lock()
        self.seq = 0
        self.current: _Task | None = None  # the call being sent or solved (runner._lock)
        self.standby: _Task | None = None  # a call queued behind it in the pipe (runner._lock)
        self.watching: asyncio.AbstractEventLoop | None = None  # the loop reading the pipe
        self.kill_timer: asyncio.TimerHandle | None = None
        self.orders: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name=f"meshplan-courier-{index}")
        self.thread.daemon = True
        self.thread.start()
        self.orders.put(_SPAWN)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.ready.is_set() else None

    # --- on the event loop of the call ------------------------------------------------------

    def begin(self, task: _Task) -> None:
        """Send `task` to the idle worker and watch its pipe for the answer (on task.loop)."""
        if self.conn is None or self.proc is None or not self.proc.is_alive():
            self.ready.clear()  # not started, failed to, or ended while idle: spawn first
            self.orders.put(task)
            return
        if self._send(task):
            self.watching = task.loop
            task.loop.add_reader(self.conn.fileno(), self._readable)
        else:
            self._fail_unsent(task)

    def queue(self, task: _Task) -> None:
        """Send `task` (runner.start_behind made it `standby`) behind the current call."""
        if not self._send(task):
            with self.runner._lock:
                if self.standby is task:
                    self.standby = None
            _settle(task.future, False, Recalled("its worker could not take it"))

    def _send(self, task: _Task) -> bool:
        """Pipe `task` to the worker and forward its stop; False if it could not be sent."""
        assert self.conn is not None
        self.seq += 1
        task.seq = self.seq
        try:
            self.conn.send((task.seq, task.fn, task.args))
        except OSError:  # the pipe broke: the process is gone
            task.seq = 0
            return False
        except Exception as err:  # noqa: BLE001  not picklable: this call's error, not the pool's
            task.seq = 0
            _settle(task.future, False, TypeError(f"the solve cannot be sent to a worker: {err}"))
            return False
        if isinstance(task.stop, StopEvent):
            task.forget_stop = task.stop.on_set(lambda: self._stopped(task))
        else:
            task.loop.call_later(_POLL_STOP_S, self._poll_stop, task)
        return True

    def _fail_unsent(self, task: _Task) -> None:
        """`begin` could not send: a broken pipe is a lost worker, else the call failed alone."""
        if task.future.done():  # not picklable: answered; the worker is free
            with self.runner._lock:
                self.current = None
            self.runner._free(self)
            return
        with self.runner._lock:
            self.current = None
        self.ready.clear()
        self.orders.put(("before it received the request", task, None))

    def _readable(self) -> None:
        assert self.conn is not None
        task = self.current
        if task is None:  # an answer nobody waits for (asked back at shutdown)
            self._unwatch()
            return
        try:
            got, ok, value = self.conn.recv()
        except (EOFError, OSError):
            self._lose(task, "during the solve")
            return
        except Exception as err:  # noqa: BLE001  the answer did not unpickle
            got, ok, value = (
                task.seq,
                False,
                RuntimeError(f"the worker's answer could not be read: {err}"),
            )
        if got != task.seq:  # an answer to an earlier, abandoned message: not possible, skip
            return
        if ok is None:
            ok, value = False, Recalled("it was asked back before it started")
        self._next(task)
        _settle(task.future, ok, value)

    def _next(self, task: _Task) -> None:
        """`task` has ended: the call queued behind it (if any) is now the worker's; else the
        worker is free."""
        task.forget_stop()
        if self.kill_timer is not None:
            self.kill_timer.cancel()
            self.kill_timer = None
        with self.runner._lock:
            following, self.standby = self.standby, None
            self.current = following
        if following is None:
            self._unwatch()
            self.runner._free(self)
        elif following.stop.is_set():
            self._arm_kill(following)

    def _unwatch(self) -> None:
        if self.conn is not None and self.watching is not None:
            self.watching.remove_reader(self.conn.fileno())
        self.watching = None

    def _lose(self, task: _Task, when: str) -> None:
        """The worker is gone: its courier reaps and replaces it, then fails the call (the one
        queued behind it never started: Recalled)."""
        task.forget_stop()
        self._unwatch()
        with self.runner._lock:
            following, self.standby = self.standby, None
            self.current = None
        if following is not None:
            following.forget_stop()
        self.ready.clear()
        self.orders.put((when, task, following))

    def _stopped(self, task: _Task) -> None:  # from any thread
        self.send_ctrl(("stop", task.seq))
        _call_soon(task.loop, self._arm_kill, task)

    def _poll_stop(self, task: _Task) -> None:
        if self.current is not task and self.standby is not task:
            return
        if task.stop.is_set():
            self._stopped(task)
        else:
            task.loop.call_later(_POLL_STOP_S, self._poll_stop, task)

    def _arm_kill(self, task: _Task) -> None:
        if self.current is task and self.kill_timer is None:
            self.kill_timer = task.loop.call_later(self.runner.kill_after_s, self._kill_stuck, task)

    def _kill_stuck(self, task: _Task) -> None:
        self.kill_timer = None
        if self.current is not task:
            return
        if self.proc is not None:
            log.warning(
                "solver process %d (pid %s) did not stop within %g s of being asked to "
                "(stopped, or stuck in native code); killing and replacing it",
                self.index,
                self.proc.pid,
                self.runner.kill_after_s,
            )
            self.proc.kill()
        task.forget_stop()
        self._unwatch()
        with self.runner._lock:
            following, self.standby = self.standby, None
            self.current = None
        self.ready.clear()
        _settle(
            task.future,
            False,
            WorkerLost(
                f"the solve did not stop within {self.runner.kill_after_s:g} s of being asked "
                f"to, so its worker process was killed and replaced"
            ),
        )
        if following is not None:
            following.forget_stop()
            _settle(following.future, False, Recalled("its worker was replaced"))
        self.orders.put(_SPAWN)  # reaped and replaced, then free again

    def send_ctrl(self, message: tuple[str, int]) -> None:
        """A stop or a recall for the call numbered message[1] (from any thread)."""
        with self.ctrl_lock:
            if self.ctrl is not None:
                with contextlib.suppress(OSError):  # the process is gone: the reader sees it
                    self.ctrl.send(message)

    # --- the courier thread -----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            order = self.orders.get()
            if order == _END:
                break
            if isinstance(order, tuple):  # the worker died under `task` (`following` unstarted)
                when, task, following = order
                err = self._reap(when)
                _settle_from_any_thread(task, False, err)
                if following is not None:
                    _settle_from_any_thread(following, False, Recalled("its worker ended"))
                order = _SPAWN
            if self.runner._closed:
                if isinstance(order, _Task):
                    _settle_from_any_thread(
                        order, False, WorkerLost("the solver pool is shut down")
                    )
                break
            self._reap_if_gone()
            try:
                self._spawn()
            except Exception as err:  # noqa: BLE001  retried at the next call
                log.error("solver process %d did not start: %s", self.index, err)
                if isinstance(order, _Task):
                    with self.runner._lock:
                        self.current = None
                    lost = WorkerLost(f"no solver process could be started: {err}")
                    _settle_from_any_thread(order, False, lost)
                self.runner._free(self)
                continue
            if isinstance(order, _Task):
                _call_soon(order.loop, self.begin, order)
            else:
                self.runner._free(self)
        self._end()

    def _reap(self, when: str) -> WorkerLost:
        proc = self.proc
        code = None
        if proc is not None:
            proc.join(1.0)
            code = proc.exitcode
        how = (
            f"killed by {signal.Signals(-code).name}"
            if code is not None and code < 0 and -code in signal.valid_signals()
            else f"exit code {code}"
        )
        log.warning("solver process %d ended %s (%s); replacing it", self.index, when, how)
        self._close_pipes()
        self.proc = None
        return WorkerLost(f"the solver process running this request ended ({how}); it was replaced")

    def _reap_if_gone(self) -> None:
        """A process killed (or ended) before this spawn: reaped and its pipes closed."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.join(5.0)
        self._close_pipes()
        self.proc = None

    def _spawn(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe(duplex=True)
        ctrl_read, ctrl_write = ctx.Pipe(duplex=False)
        proc = ctx.Process(
            target=worker_main,
            args=(child, ctrl_read, self.warm),
            name=f"meshplan-solver-{self.index}",
            daemon=True,
        )
        with one_thread_per_library():
            proc.start()
        child.close()
        ctrl_read.close()
        self.proc, self.conn = proc, parent
        with self.ctrl_lock:
            self.ctrl = ctrl_write
        if not parent.poll(_START_TIMEOUT_S):
            self._reap_if_gone()
            raise RuntimeError(f"not ready within {_START_TIMEOUT_S:g} s")
        try:
            parent.recv()  # ("ready", pid)
        except (EOFError, OSError) as err:
            self._reap("while starting")
            raise RuntimeError("it ended while starting") from err
        self.ready.set()

    def _close_pipes(self) -> None:
        with self.ctrl_lock:
            for conn in (self.conn, self.ctrl):
                if conn is not None:
                    conn.close()
            self.conn = self.ctrl = None

    def _end(self) -> None:
        proc = self.proc
        self._close_pipes()  # the worker reads EOF and exits
        if proc is not None:
            proc.join(5.0)
            if proc.is_alive():
                proc.kill()
                proc.join(1.0)
        self.proc = None
        self.ready.clear()


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


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def _settle_from_any_thread(task: _Task, ok: bool, value: Any) -> None:
    _call_soon(task.loop, _settle, task.future, ok, value)


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed: no one is waiting
        loop.call_soon_threadsafe(fn, *args)
