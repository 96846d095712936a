"""Whether a solver worker still answers: its courier thread (server/courier.py) pings it every
`heartbeat_s`, over the pipe that carries its stops, where a small thread in the worker answers
(server/worker.py) and the worker says which call it took off its pipe and when it has settled
after it. A worker that has not answered within `answer_s` (SIGSTOPped while idle or before it
took its call; `kill_after_s` while it is busy by its own word: a solve, or the collection after
it, may hold its GIL in native code for a while) is killed, logged and replaced; a call it was
sent and had not taken is started again on a worker that answers (`Recalled`), rather than
waiting for its deadline (one it took fails: WorkerLost, as when a stop is not heeded). A
worker found dead while idle is logged and replaced before a call is sent to it.

A worker still settling its heap after its last call (a full collection holds its GIL, and on a
starved CPU it took over 10 s here) is not killed for it, idle or with a call sent behind it
that it never took: that call is taken back (`rest`: started again elsewhere, or ended if it
was stopped) and the worker rests out of the pool until it says it has settled; it is killed,
with no call to blame, only if it rests longer than REST_LIMIT kill_after_s."""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from multiprocessing.connection import Connection

from meshplan.server.tasks import Pool, Recalled, Task, how_it_ended, settle_from_any_thread

log = logging.getLogger("meshplan.server")

REST_LIMIT = 6  # a resting worker not settled after this many kill_after_s is killed


class Heartbeat:
    """The heartbeat half of server.courier.Courier (run on its courier thread)."""

    runner: Pool
    index: int
    proc: multiprocessing.process.BaseProcess | None
    ctrl: Connection | None
    ready: threading.Event
    current: Task | None
    pings: int
    taken: int
    settled: int
    unresponsive: bool
    standby: Task | None
    resting: int  # the last call taken back while the worker settled (0: not resting)
    resting_since: float

    def send_ctrl(self, message: tuple[str, int]) -> None:
        raise NotImplementedError  # server.courier.Courier's

    def rest(self, task: Task, why: str) -> bool:
        """The worker never took `task`, its current call, and has not settled after its last
        one: take `task` back (and the call queued behind it), each `Recalled` (started again
        elsewhere, or ended if stopped), and keep the worker out of the pool until it has
        settled (`_check_rest`). False if `task` is not its current call any more. From any
        thread."""
        with self.runner._lock:
            if self.current is not task or self.taken >= task.seq:
                return False
            following, self.standby = self.standby, None
            self.current = None
            self.resting = (following or task).seq
            self.resting_since = time.monotonic()
        proc = self.proc
        log.warning(
            "solver process %d (pid %s) has not taken its call within %s: it is still settling "
            "its heap after the last one (a garbage collection on a starved CPU); the call is "
            "taken back and the process rests until it has settled (call: %s)",
            self.index,
            proc.pid if proc is not None else None,
            why,
            task.label,
        )
        for t in (task, following):
            if t is not None:
                t.recall_sent = True
                self.send_ctrl(("recall", t.seq))  # the worker answers it None, unrun
                t.forget_stop()
                settle_from_any_thread(t, False, Recalled("its worker was still settling"))
        return True

    def _check_rest(self) -> bool:
        """A resting worker pinged: back in the pool once it has settled the calls taken back;
        True (replace it) once it has rested longer than REST_LIMIT kill_after_s."""
        proc = self.proc
        if proc is None or not proc.is_alive():
            self.resting = 0
            return True
        self._ping(self.resting)  # reads what it said: took, settled
        if self.settled >= self.resting:
            self.resting = 0
            self.runner._free(self)
            return False
        limit = REST_LIMIT * self.runner.kill_after_s
        if time.monotonic() - self.resting_since < limit:
            return False  # a collection on a starved CPU holds its GIL (no pong): no call waits
        log.warning(
            "solver process %d (pid %s) has not settled its heap within %g s; killing and "
            "replacing it (no call was waiting on it)",
            self.index,
            proc.pid,
            limit,
        )
        self.resting = 0
        self.ready.clear()
        proc.kill()
        return True

    def _heartbeat(self) -> bool:
        """Ping the worker; True if it must be replaced now (it was idle: no call is lost).
        A worker that does not answer in time is killed and logged; if it held a call, the
        call's loop sees the pipe close, and the call starts again elsewhere if the worker had
        not taken it (else it fails: WorkerLost, as when a stop is not heeded)."""
        proc = self.proc
        if proc is None or not self.ready.is_set() or self.runner._closed:
            return False
        if self.resting:
            return self._check_rest()
        with self.runner._lock:
            idle = self in self.runner._idle
            if idle:  # taken out of the idle list: no call is sent to it while it is pinged
                self.runner._idle.remove(self)
            elif self.current is None:
                return False  # being handed a call: the next beat checks it
        if not proc.is_alive():
            return self._ended(proc, idle)
        if self._ping(0 if idle or self.current is None else self.current.seq):
            if idle:
                self.runner._free(self)
            return False
        if not proc.is_alive():  # it ended while pinged (taken out of the idle list: replaced)
            return self._ended(proc, idle)
        # A call the worker never took is started again elsewhere; one it took and is stuck in
        # may be what holds it (native code): it fails, as a stop that is not heeded does.
        busy = self.settled < self.taken
        with self.runner._lock:  # read again: its call may have ended during the ping
            task = self.current
            settling = task is None and busy  # it answered its last call and settles its heap
            if settling:  # out of the pool (it may have gone back in during the ping)
                if self in self.runner._idle:
                    self.runner._idle.remove(self)
                self.resting, self.resting_since = self.taken, time.monotonic()
        again = task is not None and self.taken < task.seq
        if again and busy and task is not None:  # settling after its last call: not stuck in one
            self.rest(task, f"{self.runner.kill_after_s:g} s")
            return False
        if settling:  # no call: it settles its heap after the last one; rest, not kill
            log.info(
                "solver process %d (pid %s) is still settling its heap after its last call "
                "%g s on; it rests until it has settled",
                self.index,
                proc.pid,
                self.runner.kill_after_s,
            )
            return False
        log.warning(
            "solver process %d (pid %s) did not answer a ping within %g s (stopped, or stuck); "
            "killing and replacing it%s%s",
            self.index,
            proc.pid,
            self.runner.kill_after_s if busy else self.runner.answer_s,
            "; its call is started again" if again else "",
            f" (call: {task.label})" if task is not None else "",
        )
        self.ready.clear()
        self.unresponsive = again
        proc.kill()
        return idle

    def _ended(self, proc: multiprocessing.process.BaseProcess, idle: bool) -> bool:
        """The worker has ended: True (replace it now) if it was idle; with a call, its loop
        reads the closed pipe and replaces it."""
        if not idle:
            return False
        log.warning(
            "solver process %d (pid %s) ended while idle (%s); replacing it",
            self.index,
            proc.pid,
            how_it_ended(proc.exitcode),
        )
        self.ready.clear()
        return True

    def _ping(self, working_on: int) -> bool:
        """Whether the worker answers a ping in time (its pipe is read on this thread only). It is
        given runner.kill_after_s while it is busy by its own word: it took call `working_on`, or
        has not yet settled the last call it took (a solve, or the collection after it, may hold
        its GIL in native code for a while); runner.answer_s otherwise (idle, or a call sent and
        not taken: a worker stopped there never says more)."""
        self.pings += 1
        number = self.pings
        self.send_ctrl(("ping", number))
        ctrl = self.ctrl
        if ctrl is None:
            return False
        start = time.monotonic()

        def deadline() -> float:
            busy = (working_on and self.taken >= working_on) or self.settled < self.taken
            return start + (self.runner.kill_after_s if busy else self.runner.answer_s)

        try:
            while (left := deadline() - time.monotonic()) > 0 and ctrl.poll(left):
                kind, got = ctrl.recv()
                if kind == "took":  # the worker took call `got` off its pipe
                    self.taken = max(self.taken, got)
                elif kind == "settled":  # ... and has answered it and settled its heap
                    self.settled = max(self.settled, got)
                elif kind == "pong" and got == number:  # (an earlier ping's late answer: skip)
                    return True
        except (EOFError, OSError):
            return False
        return False
