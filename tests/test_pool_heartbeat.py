"""A worker that stops answering (SIGSTOP) or dies while idle: its courier's heartbeat finds it
(server/courier.py), logs it and replaces it, and a call sent to it runs again on a worker that
answers, long before the call's deadline."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from meshplan.server.dispatch import StopEvent
from meshplan.server.limits import CallState
from meshplan.server.metrics import Metrics
from meshplan.server.pool import ProcessRunner, Recalled
from meshplan.server.runtime import Runtime
from meshplan.server.settings import Settings

HEARTBEAT_S, ANSWER_S = 0.2, 0.5


@contextlib.contextmanager
def stopped(pid: int) -> Iterator[None]:
    """The worker SIGSTOPped for the block, continued after it (if it still lives)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def pid_of(seconds: float, *, stop: threading.Event) -> int:
    """The worker's process id, after `seconds` (run in a worker process)."""
    time.sleep(seconds)
    return os.getpid()


@contextlib.contextmanager
def one_worker(**timing: float) -> Iterator[tuple[ProcessRunner, int]]:
    """A pool of one worker, ready, with the heartbeat's timing (HEARTBEAT_S, ANSWER_S unless
    given), and that worker's pid; closed after the block."""
    pool = ProcessRunner(
        1, warm=False, **({"heartbeat_s": HEARTBEAT_S, "answer_s": ANSWER_S} | timing)
    )
    try:
        assert pool.wait_ready(120) == 1
        (pid,) = pool.pids()
        assert pid is not None
        yield pool, pid
    finally:
        pool.close()
        pool.join()


@pytest.fixture
def runner() -> Iterator[ProcessRunner]:
    with one_worker() as (pool, _):
        yield pool


def test_a_stopped_idle_worker_is_replaced_and_the_call_runs_again(
    runner: ProcessRunner, caplog: pytest.LogCaptureFixture
) -> None:
    (pid,) = runner.pids()
    assert pid is not None
    caplog.set_level(logging.WARNING, "meshplan.server")
    settings = Settings(solver_processes=1, max_concurrent_solves=1)

    async def go() -> tuple[int, float]:
        rt = Runtime(settings, Metrics(), runner)
        call = CallState("Plan", "r1", "a", deadline=time.monotonic() + 60)
        began = time.monotonic()
        answer = await rt.solve(call, "Plan", pid_of, 0.0)
        return answer, time.monotonic() - began

    with stopped(pid):
        answered_by, took = asyncio.run(go())
    assert answered_by != pid  # the replacement ran it: the stopped worker was killed
    # found within a heartbeat and a ping's wait, then a worker spawned (no warm-up): not 60 s
    assert took < 20, took
    words = [r.getMessage() for r in caplog.records]
    assert any(
        f"(pid {pid}) did not answer a ping within" in w and "started again" in w for w in words
    )
    assert runner.pids() == [answered_by]


def test_a_call_sent_to_a_stopped_worker_is_recalled_not_lost(runner: ProcessRunner) -> None:
    """At the runner: the call fails with Recalled (it may be started again), within the
    heartbeat and the ping's wait."""
    (pid,) = runner.pids()
    assert pid is not None

    async def go() -> tuple[BaseException | None, float]:
        began = time.monotonic()
        try:
            await runner.start(pid_of, 0.0, stop=StopEvent())
        except Exception as err:  # noqa: BLE001
            return err, time.monotonic() - began
        return None, time.monotonic() - began

    with stopped(pid):
        err, took = asyncio.run(go())
    assert isinstance(err, Recalled), err
    assert took < HEARTBEAT_S + ANSWER_S + 2.0, took


def test_a_worker_killed_while_idle_is_logged_and_replaced_before_any_call(
    runner: ProcessRunner, caplog: pytest.LogCaptureFixture
) -> None:
    (pid,) = runner.pids()
    assert pid is not None
    caplog.set_level(logging.WARNING, "meshplan.server")
    os.kill(pid, signal.SIGKILL)
    end = time.monotonic() + 30
    while runner.pids() in ([pid], [None]):
        assert time.monotonic() < end, "the dead worker was not replaced"
        time.sleep(0.05)
    words = [r.getMessage() for r in caplog.records]
    assert any(f"(pid {pid}) ended while idle (killed by SIGKILL)" in w for w in words), words


def test_a_busy_worker_that_answers_pings_is_left_alone(runner: ProcessRunner) -> None:
    """A solve longer than several heartbeats: the worker's ping thread answers, so it runs on."""
    (pid,) = runner.pids()

    async def go() -> int:
        return await runner.start(pid_of, 4 * (HEARTBEAT_S + ANSWER_S), stop=StopEvent())

    assert asyncio.run(go()) == pid
    assert runner.pids() == [pid]


def holds_the_gil(count: int, *, stop: threading.Event) -> int:
    """A solve that holds its process's GIL in native code (sum over a range runs in C), so the
    worker's ping thread cannot answer until it ends (run in a worker process)."""
    sum(range(count))
    return os.getpid()


def gil_count(seconds: float) -> int:
    """How many numbers `holds_the_gil` sums in about `seconds` on this machine now (measured
    here: the VM's speed drifts, so a fixed count may hold the GIL too briefly)."""
    n = 2_000_000
    began = time.perf_counter()
    sum(range(n))
    return max(60_000_000, int(n * seconds / (time.perf_counter() - began)))


def test_a_worker_holding_its_gil_in_a_call_it_took_is_not_taken_for_stopped() -> None:
    """It said it took the call before its GIL was held: the heartbeat waits kill_after_s."""
    count = gil_count(5 * (HEARTBEAT_S + ANSWER_S))
    with one_worker(kill_after_s=60) as (pool, pid):
        began = time.monotonic()

        async def go() -> int:
            return await pool.start(holds_the_gil, count, stop=StopEvent())

        assert asyncio.run(go()) == pid
        held = time.monotonic() - began
        assert held > 2 * (HEARTBEAT_S + ANSWER_S), f"the call held the GIL only {held:.2f} s"
        assert pool.pids() == [pid]


def slow_settle(seconds: float, *, stop: threading.Event) -> int:
    """A call whose worker then settles its heap for `seconds` holding its GIL (as a full
    collection on a starved CPU does): its ping thread cannot answer meanwhile (run in a worker
    process; the worker's settle_heap looks the function up at each call)."""
    import sys

    from meshplan.server import memory

    def settle() -> bool:
        memory.settle_heap = real
        interval = sys.getswitchinterval()
        sys.setswitchinterval(10 * seconds)  # no other thread of the worker gets the GIL
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass
        sys.setswitchinterval(interval)
        return False

    real = memory.settle_heap
    memory.settle_heap = settle
    return os.getpid()


SETTLE_S, KILL_AFTER_S = 3.0, 1.0


def test_a_worker_settling_after_its_call_is_not_killed_for_the_call_sent_behind_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The next call was sent while the worker settled (and never taken): the heartbeat takes it
    back instead of killing the worker, which rests until it has settled and then runs it."""
    caplog.set_level(logging.WARNING, "meshplan.server")
    with one_worker(kill_after_s=KILL_AFTER_S) as (pool, pid):
        settings = Settings(solver_processes=1, max_concurrent_solves=1)

        async def go() -> tuple[int, int]:
            rt = Runtime(settings, Metrics(), pool)
            call = CallState("Plan", "r1", "a", deadline=time.monotonic() + 60)
            first = await rt.solve(call, "Plan", slow_settle, SETTLE_S)
            return first, await rt.solve(call, "Plan", pid_of, 0.0)

        assert asyncio.run(go()) == (pid, pid)  # the same worker ran both: none was killed
        assert pool.pids() == [pid]
        words = [r.getMessage() for r in caplog.records]
        assert not any("killing" in w for w in words), words
        assert any("still settling" in w and "rests" in w for w in words), words


def test_a_stop_does_not_kill_a_worker_that_never_took_the_stopped_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The call's deadline passes while it waits behind the worker's settling: the call ends
    (Recalled: it never ran) and its worker is kept, not killed for a stop it never saw."""
    caplog.set_level(logging.WARNING, "meshplan.server")
    with one_worker(heartbeat_s=60, answer_s=60, kill_after_s=KILL_AFTER_S) as (pool, pid):

        async def go() -> BaseException | None:
            assert await pool.start(slow_settle, SETTLE_S, stop=StopEvent()) == pid
            stop = StopEvent()
            asyncio.get_running_loop().call_later(0.2, stop.set)
            try:
                await pool.start(pid_of, 0.0, stop=stop)
            except Exception as err:  # noqa: BLE001
                return err
            return None

        pool._couriers[0].taken = 1  # what its heartbeat (here idle: 60 s) would have read
        err = asyncio.run(go())
        assert isinstance(err, Recalled), err
        words = [r.getMessage() for r in caplog.records]
        assert not any("killing" in w for w in words), words
        assert pool.pids() == [pid]


def test_a_worker_that_dies_while_its_idle_ping_is_on_the_way_is_replaced() -> None:
    """Killed between the heartbeat's look and its ping's answer: the courier, taken out of the
    idle list for the ping, is replaced, not lost (a call then waited for it for ever)."""
    with one_worker() as (pool, pid):
        courier = pool._couriers[0]
        real = courier._ping
        pinged = threading.Event()

        def ping_as_it_dies(working_on: int) -> bool:
            if pinged.is_set():
                return real(working_on)
            pinged.set()
            assert courier.proc is not None
            courier.proc.kill()
            courier.proc.join(10)
            return False

        courier._ping = ping_as_it_dies  # type: ignore[method-assign]
        assert pinged.wait(30)

        async def go() -> int:
            return await asyncio.wait_for(pool.start(pid_of, 0.0, stop=StopEvent()), 120)

        assert asyncio.run(go()) != pid  # a new worker answered: the courier was not lost


def test_an_idle_worker_settling_for_longer_than_a_ping_allows_is_not_killed() -> None:
    """No call waits: the worker rests until it has settled, then takes the next call."""
    with one_worker(kill_after_s=KILL_AFTER_S) as (pool, pid):

        async def go() -> tuple[int, int]:
            first = await pool.start(slow_settle, SETTLE_S, stop=StopEvent())
            await asyncio.sleep(SETTLE_S)  # pinged while it settles, with no call sent
            return first, await asyncio.wait_for(pool.start(pid_of, 0.0, stop=StopEvent()), 60)

        assert asyncio.run(go()) == (pid, pid)
        assert pool.pids() == [pid]


def test_a_worker_whose_call_ends_during_a_ping_and_then_settles_is_not_killed() -> None:
    """A ping goes out while the call runs; the call ends, and the worker settles past the
    ping's wait: it was taken for stuck (no call named) and killed; now it rests, then serves."""
    with one_worker(kill_after_s=KILL_AFTER_S) as (pool, pid):
        courier = pool._couriers[0]
        real = courier._ping
        timed_out = threading.Event()

        def ping_that_outlives_the_call(working_on: int) -> bool:
            if timed_out.is_set() or courier.current is None:
                return real(working_on)
            end = time.monotonic() + 30
            while courier.current is not None and time.monotonic() < end:
                time.sleep(0.01)  # the call answers (its worker settles for SETTLE_S)
            real(working_on)  # reads its word: took, and not settled
            timed_out.set()
            return False  # as a ping unanswered within its wait

        courier._ping = ping_that_outlives_the_call  # type: ignore[method-assign]

        async def go() -> tuple[int, int]:
            first = await pool.start(slow_settle, SETTLE_S, stop=StopEvent())
            while not timed_out.is_set():
                await asyncio.sleep(0.05)
            return first, await asyncio.wait_for(pool.start(pid_of, 0.0, stop=StopEvent()), 60)

        assert asyncio.run(go()) == (pid, pid)
        assert pool.pids() == [pid]
