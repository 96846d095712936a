"""One solver worker process of server/pool.py: its pipes, its call, and the "courier" thread
that spawns it, replaces it when it ends, and checks that it still answers (server/heartbeat.py).

The event loop of a call sends it down the worker's pipe and reads the answer itself when the
pipe becomes readable (`loop.add_reader`). The call's stop is forwarded over a second, duplex
pipe (`ctrl`), where a small thread in the worker sets the event fn polls; the same pipe carries
the heartbeat's pings and the worker's word of which call it took. The worker's side is
server/worker.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import queue
import threading
from multiprocessing.connection import Connection
from typing import Any

from meshplan.server.dispatch import StopEvent
from meshplan.server.heartbeat import Heartbeat
from meshplan.server.tasks import (
    Pool,
    Recalled,
    Task,
    WorkerLost,
    call_soon,
    how_it_ended,
    one_thread_per_library,
    settle,
    settle_from_any_thread,
)
from meshplan.server.worker import worker_main

log = logging.getLogger("meshplan.server")

START_TIMEOUT_S = 300.0  # spawn, import and warm-up of one worker, under load
POLL_STOP_S = 0.05  # how often a stop event that is not a StopEvent is looked at
SPAWN, END = "spawn", "end"  # orders to a courier thread (besides a task to spawn for)


class Courier(Heartbeat):
    """One worker process: its pipes, its call, and the thread that (re)spawns and pings it."""

    def __init__(
        self, runner: Pool, index: int, warm: bool, cache_bytes: int | None = None
    ) -> None:
        self.runner = runner
        self.index = index
        self.warm = warm
        self.cache_bytes = cache_bytes  # the worker's caches' bound (None: solver/cache.py's)
        self.ready = threading.Event()
        self.proc: multiprocessing.process.BaseProcess | None = None
        self.conn: Connection | None = None
        self.ctrl: Connection | None = None
        self.ctrl_lock = threading.Lock()
        self.seq = 0
        self.pings = 0
        self.taken = 0  # the last call the worker said it took off its pipe (read when pinged)
        self.settled = 0  # ... and the last it said it answered and settled after
        self.unresponsive = False  # killed for not answering a ping: its call starts again
        self.resting = 0  # a call taken back while the worker settled (server/heartbeat.py)
        self.resting_since = 0.0
        self.current: Task | None = None  # the call being sent or solved (runner._lock)
        self.standby: Task | None = None  # a call queued behind it in the pipe (runner._lock)
        self.watching: asyncio.AbstractEventLoop | None = None  # the loop reading the pipe
        self.kill_timer: asyncio.TimerHandle | None = None
        self.orders: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name=f"meshplan-courier-{index}")
        self.thread.daemon = True
        self.thread.start()
        self.orders.put(SPAWN)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.ready.is_set() else None

    # --- on the event loop of the call ------------------------------------------------------

    def begin(self, task: Task) -> None:
        """Send `task` to the idle worker and watch its pipe for the answer (on task.loop)."""
        if self.conn is None or self.proc is None or not self.proc.is_alive():
            if self.proc is not None and self.ready.is_set():
                log.warning(
                    "solver process %d (pid %s) ended while idle (%s); replacing it",
                    self.index,
                    self.proc.pid,
                    how_it_ended(self.proc.exitcode),
                )
            self.ready.clear()  # not started, failed to, or ended while idle: spawn first
            self.orders.put(task)
            return
        if self._send(task):
            self.watching = task.loop
            task.loop.add_reader(self.conn.fileno(), self._readable)
        else:
            self._fail_unsent(task)

    def queue(self, task: Task) -> None:
        """Send `task` (runner.start_behind made it `standby`) behind the current call."""
        if not self._send(task):
            with self.runner._lock:
                if self.standby is task:
                    self.standby = None
            settle(task.future, False, Recalled("its worker could not take it"))

    def _send(self, task: Task) -> bool:
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
            settle(task.future, False, TypeError(f"the solve cannot be sent to a worker: {err}"))
            return False
        if isinstance(task.stop, StopEvent):
            task.forget_stop = task.stop.on_set(lambda: self._stopped(task))
        else:
            task.loop.call_later(POLL_STOP_S, self._poll_stop, task)
        return True

    def _fail_unsent(self, task: Task) -> None:
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
        settle(task.future, ok, value)

    def _next(self, task: Task) -> None:
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

    def _lose(self, task: Task, when: str) -> None:
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

    def _stopped(self, task: Task) -> None:  # from any thread
        self.send_ctrl(("stop", task.seq))
        call_soon(task.loop, self._arm_kill, task)

    def _poll_stop(self, task: Task) -> None:
        if self.current is not task and self.standby is not task:
            return
        if task.stop.is_set():
            self._stopped(task)
        else:
            task.loop.call_later(POLL_STOP_S, self._poll_stop, task)

    def _arm_kill(self, task: Task) -> None:
        if self.current is task and self.kill_timer is None:
            self.kill_timer = task.loop.call_later(self.runner.kill_after_s, self._kill_stuck, task)

    def _kill_stuck(self, task: Task) -> None:
        self.kill_timer = None
        if self.current is not task:
            return
        # never taken (by the worker's last word): it settles its heap after its last call, and
        # the stop asked nothing of it; the call ends, taken back, and the worker rests
        if self.settled < self.taken < task.seq and self.rest(task, "its stop"):
            self._unwatch()
            return
        if self.proc is not None:
            log.warning(
                "solver process %d (pid %s) did not stop within %g s of being asked to "
                "(stopped, or stuck in native code); killing and replacing it (call: %s)",
                self.index,
                self.proc.pid,
                self.runner.kill_after_s,
                task.label,
            )
            self.proc.kill()
        task.forget_stop()
        self._unwatch()
        with self.runner._lock:
            following, self.standby = self.standby, None
            self.current = None
        self.ready.clear()
        settle(
            task.future,
            False,
            WorkerLost(
                f"the solve did not stop within {self.runner.kill_after_s:g} s of being asked "
                f"to, so its worker process was killed and replaced"
            ),
        )
        if following is not None:
            following.forget_stop()
            settle(following.future, False, Recalled("its worker was replaced"))
        self.orders.put(SPAWN)  # reaped and replaced, then free again

    def send_ctrl(self, message: tuple[str, int]) -> None:
        """A stop, a recall or a ping for the call numbered message[1] (from any thread)."""
        with self.ctrl_lock:
            if self.ctrl is not None:
                with contextlib.suppress(OSError):  # the process is gone: the reader sees it
                    self.ctrl.send(message)

    # --- the courier thread -----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                order = self.orders.get(timeout=self.runner.heartbeat_s)
            except queue.Empty:
                order = SPAWN if self._heartbeat() else None
                if order is None:
                    continue
            if order == END:
                break
            if isinstance(order, tuple):  # the worker died under `task` (`following` unstarted)
                when, task, following = order
                if self.unresponsive:  # killed by the heartbeat, and logged then: run it again
                    again = Recalled("its worker process stopped answering; it was replaced")
                    settle_from_any_thread(task, False, again)
                else:
                    settle_from_any_thread(task, False, self._reap(when))
                if following is not None:
                    settle_from_any_thread(following, False, Recalled("its worker ended"))
                order = SPAWN
            if self.runner._closed:
                if isinstance(order, Task):
                    settle_from_any_thread(order, False, WorkerLost("the solver pool is shut down"))
                break
            self._reap_if_gone()
            try:
                self._spawn()
            except Exception as err:  # noqa: BLE001  retried at the next call
                log.error("solver process %d did not start: %s", self.index, err)
                if isinstance(order, Task):
                    with self.runner._lock:
                        self.current = None
                    lost = WorkerLost(f"no solver process could be started: {err}")
                    settle_from_any_thread(order, False, lost)
                self.runner._free(self)
                continue
            if isinstance(order, Task):
                call_soon(order.loop, self.begin, order)
            else:
                self.runner._free(self)
        self._end()

    def _reap(self, when: str) -> WorkerLost:
        proc = self.proc
        code = None
        if proc is not None:
            proc.join(1.0)
            code = proc.exitcode
        how = how_it_ended(code)
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
        ctrl_parent, ctrl_child = ctx.Pipe(duplex=True)
        proc = ctx.Process(
            target=worker_main,
            args=(child, ctrl_child, self.warm, self.cache_bytes),
            name=f"meshplan-solver-{self.index}",
            daemon=True,
        )
        with one_thread_per_library():
            proc.start()
        child.close()
        ctrl_child.close()
        self.proc, self.conn = proc, parent
        self.unresponsive = False
        self.taken = self.settled = self.resting = 0
        with self.ctrl_lock:
            self.ctrl = ctrl_parent
        if not parent.poll(START_TIMEOUT_S):
            self._reap_if_gone()
            raise RuntimeError(f"not ready within {START_TIMEOUT_S:g} s")
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
