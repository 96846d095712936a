"""ProcessRunner: the SolveRunner of server.dispatch over spawned worker processes.

Each worker process runs one solve at a time, so N workers use N cores (a thread pool shares one
interpreter: the Python that builds each model holds the GIL). In the server process one
"courier" thread per worker takes the next task from a shared queue, sends it over a pipe
(pickled: fn must be a module-level function), and waits for the answer; the event loop never
blocks. The call's stop event is forwarded at once (`StopEvent.on_set`) over a second pipe, where
a small thread in the worker sets the local event that fn polls (solver.plan's stop_event).

Workers are spawned (a fork would copy the server's gRPC and OR-Tools threads mid-flight), warm
up (import the solver, solve one small plan, gc.freeze), and then serve until their pipe closes:
they also end if the server dies. A worker that dies mid-solve (killed, out of memory, a crash
in native code) is replaced, and its call fails with `WorkerLost`; a worker that does not end
within `kill_after_s` of a stop is killed and replaced the same way, so a stop always ends the
solve. Each worker keeps its own caches (solver/cache.py): they warm per process.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import multiprocessing
import os
import queue
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from meshplan.server.dispatch import StopEvent

log = logging.getLogger("meshplan.server")
T = TypeVar("T")

KILL_AFTER_S = 10.0  # a solve still running this long after its stop: its process is killed
_START_TIMEOUT_S = 300.0  # spawn, import and warm-up of one worker, under load
_TRIM_EVERY_S = 5.0  # a worker returns freed heap to the system at most this often


class WorkerLost(Exception):
    """The worker process running a call ended before answering (it has been replaced)."""


@dataclass
class _Task:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    stop: threading.Event
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop


class ProcessRunner:
    """SolveRunner over `processes` spawned worker processes (see the module docstring)."""

    def __init__(
        self, processes: int, *, warm: bool = True, kill_after_s: float = KILL_AFTER_S
    ) -> None:
        self.processes = processes
        self.kill_after_s = kill_after_s
        self._tasks: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        self._closed = False
        self._couriers = [_Courier(self, i, warm) for i in range(processes)]

    def start(self, fn: Callable[..., T], *args: Any, stop: threading.Event) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if self._closed:
            future.set_exception(WorkerLost("the solver pool is shut down"))
        else:
            self._tasks.put(_Task(fn, args, stop, future, loop))
        return future

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
        if self._closed:
            return
        self._closed = True
        for courier in self._couriers:
            courier.stop_current()
        for _ in self._couriers:
            self._tasks.put(None)

    def join(self, timeout: float = 10.0) -> None:
        """Wait for the couriers and their processes to end (after close)."""
        end = time.monotonic() + timeout
        for courier in self._couriers:
            courier.thread.join(max(end - time.monotonic(), 0))


class _Courier:
    """One worker process and the thread in the server that feeds it."""

    def __init__(self, runner: ProcessRunner, index: int, warm: bool) -> None:
        self.runner = runner
        self.index = index
        self.warm = warm
        self.ready = threading.Event()
        self.proc: multiprocessing.process.BaseProcess | None = None
        self.conn: Connection | None = None
        self.ctrl: Connection | None = None
        self.poller: select.poll | None = None  # on conn: one, not a selector per wait
        self.ctrl_lock = threading.Lock()
        self.seq = 0
        self.current: _Task | None = None
        self.thread = threading.Thread(target=self._run, name=f"meshplan-courier-{index}")
        self.thread.daemon = True
        self.thread.start()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.ready.is_set() else None

    # --- the courier thread -----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            if self.proc is None and not self.runner._closed:  # at start, and after a loss
                try:
                    self._spawn()
                except Exception as err:  # noqa: BLE001  retried at the next task
                    log.error("solver process %d did not start: %s", self.index, err)
            task = self.runner._tasks.get()
            if task is None:
                break
            ok, value = self._serve(task)
            with contextlib.suppress(RuntimeError):  # the loop closed: no one is waiting
                task.loop.call_soon_threadsafe(_settle, task.future, ok, value)
        self._end()

    def _serve(self, task: _Task) -> tuple[bool, Any]:
        if self.proc is None or not self.proc.is_alive():
            try:
                self._spawn()
            except Exception as err:  # noqa: BLE001
                return False, WorkerLost(f"no solver process could be started: {err}")
        assert self.conn is not None
        self.seq += 1
        seq = self.seq
        self.current = task
        try:
            self.conn.send((seq, task.fn, task.args))
        except Exception as err:  # noqa: BLE001  not picklable: this call's error, not the pool's
            self.current = None
            if isinstance(err, OSError):  # the pipe broke: the process is gone
                return False, self._lost("before it received the request")
            return False, TypeError(f"the solve cannot be sent to a worker process: {err}")
        forget = _on_stop(task.stop, lambda: self._send_stop(seq))
        try:
            return self._await_answer(task, seq)
        finally:
            forget()
            self.current = None

    def _await_answer(self, task: _Task, seq: int) -> tuple[bool, Any]:
        assert self.conn is not None
        kill_at: float | None = None
        while True:
            wait = 0.05 if kill_at is None else max(kill_at - time.monotonic(), 0.0)
            try:
                if self._answered(min(wait, 0.05)):
                    got, ok, value = self.conn.recv()
                    if got == seq:
                        return ok, value
                    continue  # an answer to an earlier, abandoned message: not possible, skip
            except (EOFError, OSError):
                return False, self._lost("during the solve")
            except Exception as err:  # noqa: BLE001  the answer did not unpickle
                return False, RuntimeError(f"the worker's answer could not be read: {err}")
            if task.stop.is_set():
                if kill_at is None:
                    self._send_stop(seq)  # in case the event is not a StopEvent
                    kill_at = time.monotonic() + self.runner.kill_after_s
                elif time.monotonic() >= kill_at:
                    self._kill()
                    return False, WorkerLost(
                        f"the solve did not stop within {self.runner.kill_after_s:g} s of being "
                        f"asked to, so its worker process was killed and replaced"
                    )

    def _answered(self, timeout: float) -> bool:
        """Whether the worker's pipe can be read (an answer, or its end) within `timeout` s:
        Connection.poll builds a selector on every call; this poll object is kept."""
        assert self.poller is not None
        return bool(self.poller.poll(timeout * 1000))

    def _send_stop(self, seq: int) -> None:
        with self.ctrl_lock:
            if self.ctrl is not None:
                with contextlib.suppress(OSError):  # the process is gone: the courier sees it
                    self.ctrl.send(seq)

    def stop_current(self) -> None:
        task = self.current
        if task is not None:
            task.stop.set()

    def _lost(self, when: str) -> WorkerLost:
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
        self.ready.clear()
        return WorkerLost(f"the solver process running this request ended ({how}); it was replaced")

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
        self.poller = select.poll()
        self.poller.register(parent.fileno(), select.POLLIN)
        with self.ctrl_lock:
            self.ctrl = ctrl_write
        if not parent.poll(_START_TIMEOUT_S):
            self._kill()
            raise RuntimeError(f"not ready within {_START_TIMEOUT_S:g} s")
        try:
            parent.recv()  # ("ready", pid)
        except (EOFError, OSError) as err:
            self._lost("while starting")
            raise RuntimeError("it ended while starting") from err
        self.ready.set()

    def _kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.join(5.0)
        self._close_pipes()
        self.proc = None
        self.ready.clear()

    def _close_pipes(self) -> None:
        with self.ctrl_lock:
            for conn in (self.conn, self.ctrl):
                if conn is not None:
                    conn.close()
            self.conn = self.ctrl = None
            self.poller = None

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


def _on_stop(stop: threading.Event, callback: Callable[[], None]) -> Callable[[], None]:
    if isinstance(stop, StopEvent):
        return stop.on_set(callback)
    return lambda: None  # polled by the courier instead


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


# --- in the worker process ------------------------------------------------------------------


def worker_main(conn: Connection, ctrl: Connection, warm: bool) -> None:
    """A worker's life: warm up, say ready, then run one call at a time until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's: it drains, then ends us
    lock = threading.Lock()
    state: dict[str, Any] = {"seq": 0, "event": None, "stopped": 0}

    def listen() -> None:  # stops from the server: set the running call's event
        while True:
            try:
                seq = ctrl.recv()
            except (EOFError, OSError):
                return
            with lock:
                state["stopped"] = max(state["stopped"], seq)
                if state["seq"] == seq and state["event"] is not None:
                    state["event"].set()

    threading.Thread(target=listen, name="meshplan-stop", daemon=True).start()
    if warm:
        _warm_up()
    gc.collect()
    gc.freeze()  # the start-up heap stays out of full collections (server/memory.py)
    trim = _trimmer()
    trimmed = time.monotonic()
    conn.send(("ready", os.getpid()))
    while True:
        try:
            seq, fn, args = conn.recv()
        except (EOFError, OSError):
            return
        event = threading.Event()
        with lock:
            state["seq"], state["event"] = seq, event
            if state["stopped"] >= seq:
                event.set()
        try:
            reply: tuple[int, bool, Any] = (seq, True, fn(*args, stop=event))
        except BaseException as err:  # noqa: BLE001  every failure goes back to the caller
            reply = (seq, False, err)
        with lock:
            state["event"] = None
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return
        except Exception as err:  # noqa: BLE001  an answer that does not pickle
            conn.send((seq, False, RuntimeError(f"the answer could not be sent back: {err}")))
        if trim is not None and time.monotonic() - trimmed > _TRIM_EVERY_S:
            trim()
            trimmed = time.monotonic()


def _warm_up() -> None:
    """Import what a call needs and solve one small plan (the lazy imports, the first tables)."""
    from meshplan.server import work
    from meshplan.solver import plan
    from meshplan.solver.schema import PlanRequest

    del work
    req = PlanRequest.model_validate(
        {
            "model": {"preset": "llama3-8b"},
            "cluster": {"num_gpus": 8},
            "options": {"time_limit_s": 10},
        }
    )
    try:
        plan(req)
    except Exception as err:  # noqa: BLE001  a warm-up failure must not stop the worker
        log.warning("solver warm-up failed: %s", err)


def _trimmer() -> Callable[[], int] | None:
    from meshplan.server.memory import trimmer

    return trimmer()
