"""A call queued behind another in a worker's pipe (ProcessRunner.start_behind, and the
runtime's begin_behind that PlanBatch uses): it starts as the one ahead ends and takes over its
slot; stops reach it alone; it can be asked back before it starts; a caller who starts waiting
for a slot gets it before the queued call; a worker death fails only the running call; a
cancelled batch stops both its running and its queued item."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from test_grpc_support import LOOPBACK, big_request, running_server

from benchmarks.suite import throughput_requests
from meshplan.client import PlannerClient
from meshplan.client.sync import plan_message
from meshplan.server.dispatch import StopEvent
from meshplan.server.limits import CallState
from meshplan.server.metrics import Metrics
from meshplan.server.pool import ProcessRunner, Recalled, WorkerLost
from meshplan.server.runtime import Runtime
from meshplan.server.settings import Settings
from meshplan.solver import plan
from meshplan.v1 import planner_pb2, planner_pb2_grpc


def stamped(seconds: float, tag: str, *, stop: threading.Event) -> tuple[str, float, float, bool]:
    """(tag, start, end, stopped): waits `seconds` or until stopped (in a worker process;
    time.monotonic is the system's monotonic clock, comparable across processes on Linux)."""
    began = time.monotonic()
    stopped = stop.wait(seconds)
    return tag, began, time.monotonic(), stopped


def stubborn(seconds: float, *, stop: threading.Event) -> str:
    time.sleep(seconds)
    return "done"


@pytest.fixture(scope="module")
def runner() -> Iterator[ProcessRunner]:
    pool = ProcessRunner(1, warm=False, kill_after_s=2.0)
    assert pool.wait_ready(120) == 1
    yield pool
    pool.close()
    pool.join()


def test_a_queued_call_starts_as_the_one_ahead_ends(runner: ProcessRunner) -> None:
    async def go() -> tuple[Any, Any]:
        first = runner.start(stamped, 0.3, "a", stop=StopEvent())
        second = runner.start_behind(first, stamped, 0.0, "b", stop=StopEvent())
        assert second is not None
        # one call queued per worker, and only behind a call that runs on it
        assert runner.start_behind(first, stamped, 0.0, "c", stop=StopEvent()) is None
        assert runner.start_behind(asyncio.Future(), stamped, 0.0, "d", stop=StopEvent()) is None
        return await first, await second

    a, b = asyncio.run(go())
    assert (a[0], b[0]) == ("a", "b")
    assert a[2] <= b[1] < a[2] + 0.5  # after the first, without a round trip through the server


def test_a_stop_reaches_only_the_call_it_belongs_to(runner: ProcessRunner) -> None:
    async def go() -> tuple[Any, Any, Any, Any]:
        ahead, queued = StopEvent(), StopEvent()
        first = runner.start(stamped, 0.3, "a", stop=ahead)
        second = runner.start_behind(first, stamped, 20.0, "b", stop=queued)
        assert second is not None
        queued.set()  # the queued call's stop: the running one goes on
        a, b = await first, await asyncio.wait_for(second, 10)
        # and the other way round: the running call's stop leaves the queued one alone
        ahead, queued = StopEvent(), StopEvent()
        third = runner.start(stamped, 20.0, "c", stop=ahead)
        fourth = runner.start_behind(third, stamped, 0.2, "d", stop=queued)
        assert fourth is not None
        await asyncio.sleep(0.1)
        ahead.set()
        return a, b, await asyncio.wait_for(third, 10), await asyncio.wait_for(fourth, 10)

    a, b, c, d = asyncio.run(go())
    assert a[3] is False and b[3] is True and b[2] - b[1] < 1.0
    assert c[3] is True and d[3] is False


def test_a_queued_call_asked_back_does_not_run(runner: ProcessRunner) -> None:
    async def go() -> tuple[Any, BaseException | None, bool, Any]:
        first = runner.start(stamped, 0.3, "a", stop=StopEvent())
        second = runner.start_behind(first, stamped, 0.0, "b", stop=StopEvent())
        assert second is not None
        assert runner.recall(second)
        again = runner.recall(second)  # asked once
        a = await first
        error = None
        try:
            await second
        except Recalled as err:
            error = err
        return a, error, again, await runner.start(stamped, 0.0, "c", stop=StopEvent())

    a, error, again, c = asyncio.run(go())
    assert a[0] == "a" and isinstance(error, Recalled) and not again
    assert c[0] == "c"  # the worker serves the next call


def test_a_worker_death_fails_the_running_call_and_hands_back_the_queued_one() -> None:
    pool = ProcessRunner(1, warm=False)
    try:
        assert pool.wait_ready(120) == 1

        async def go() -> tuple[BaseException, BaseException, Any]:
            first = pool.start(stubborn, 30.0, stop=StopEvent())
            second = pool.start_behind(first, stamped, 0.0, "b", stop=StopEvent())
            assert second is not None
            await asyncio.sleep(0.3)
            pid = pool.pids()[0]
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            errors = []
            for future in (first, second):
                try:
                    await asyncio.wait_for(future, 30)
                except Exception as err:  # noqa: BLE001
                    errors.append(err)
            await asyncio.to_thread(pool.wait_ready, 120)
            return errors[0], errors[1], await pool.start(stamped, 0.0, "c", stop=StopEvent())

        lost, recalled, c = asyncio.run(go())
        assert isinstance(lost, WorkerLost) and "killed by SIGKILL" in str(lost)
        assert isinstance(recalled, Recalled)
        assert c[0] == "c"
    finally:
        pool.close()
        pool.join()


def _runtime(runner: ProcessRunner) -> Runtime:
    settings = Settings(solver_processes=1, max_concurrent_solves=1, max_solves_per_caller=1)
    return Runtime(settings, Metrics(), runner)


def _call(caller: str) -> CallState:
    return CallState("Plan", caller, caller, deadline=time.monotonic() + 60)


def test_the_slot_passes_to_the_queued_solve(runner: ProcessRunner) -> None:
    def in_flight(rt: Runtime) -> float:
        return rt.metrics.registry.get_sample_value("meshplan_solves_in_flight") or 0.0

    async def go() -> tuple[Any, Any, list[float]]:
        rt = _runtime(runner)
        call = _call("a")
        first = await rt.begin(call, "Plan", stamped, 0.2, "a1")
        second = rt.begin_behind(first, call, "Plan", stamped, 0.2, "a2")
        assert second is not None
        seen = [rt.slots.free, in_flight(rt)]  # the queued solve is not in flight yet
        a1 = await rt.outcome(call, first)
        seen += [rt.slots.free, in_flight(rt)]  # the second solve runs on the first one's slot
        a2 = await rt.outcome(call, second)
        await asyncio.sleep(0)  # its done callbacks
        return a1, a2, [*seen, rt.slots.free, in_flight(rt)]

    a1, a2, seen = asyncio.run(go())
    assert (a1[0], a2[0]) == ("a1", "a2") and a1[2] <= a2[1]
    assert seen == [0, 1, 0, 1, 1, 0]


@pytest.mark.parametrize("other", ["b", "a"])  # another caller; the same caller's next call
def test_a_solve_that_waits_for_a_slot_goes_before_the_queued_one(
    runner: ProcessRunner, other: str
) -> None:
    async def go() -> tuple[Any, Any, Any, Runtime]:
        rt = _runtime(runner)
        a, b = _call("a"), _call(other)  # per caller: one slot
        first = await rt.begin(a, "Plan", stamped, 0.4, "a1")
        second = rt.begin_behind(first, a, "Plan", stamped, 0.0, "a2")
        assert second is not None
        waiting = asyncio.create_task(rt.solve(b, "Plan", stamped, 0.0, "b"))
        await asyncio.sleep(0.05)  # b waits for the slot: the queued solve is asked back
        assert rt.begin_behind(first, a, "Plan", stamped, 0.0, "a3") is None  # b waits
        a1 = await rt.outcome(a, first)
        a2 = await rt.outcome(a, second)  # started again, after b's turn
        return a1, a2, await waiting, rt

    a1, a2, b, rt = asyncio.run(go())
    assert a1[2] <= b[1] <= a2[1]
    assert rt.slots.free == 1 and not rt.slots.running and not rt.slots.waiting


def test_a_batch_through_one_worker_answers_as_in_process_and_frees_its_slot() -> None:
    reqs = throughput_requests(12, quick=True)
    with running_server(solver_processes=1, max_solves_per_caller=1) as (port, server):
        assert server.wait_ready(120) == 1
        rt = server.runtime
        queued: list[Any] = []
        behind = rt.begin_behind

        def counted(*args: Any) -> Any:
            solve = behind(*args)
            queued.append(solve)
            return solve

        rt.begin_behind = counted  # type: ignore[method-assign]
        with PlannerClient(f"{LOOPBACK}:{port}") as client:
            items = sorted(client.plan_batch(reqs, timeout=120), key=lambda i: i.index)
        assert any(s is not None for s in queued)  # items did wait in the worker's pipe
        end = time.monotonic() + 10
        while rt.slots.free != 1 and time.monotonic() < end:
            time.sleep(0.01)
        assert rt.slots.free == 1 and not rt.slots.running and not rt._behind
        gauge = rt.metrics.registry.get_sample_value("meshplan_solves_in_flight")
        assert gauge == 0
    assert [i.index for i in items] == list(range(len(reqs)))
    for item, req in zip(items, reqs, strict=True):
        local = plan(req)
        assert item.result is not None and item.result.status == local.status
        assert item.result.config == local.config


def test_a_cancelled_batch_stops_the_running_and_the_queued_item() -> None:
    slow = plan_message(big_request(30))  # seconds of search each
    batch = planner_pb2.PlanBatchRequest(requests=[slow] * 4)
    with running_server(solver_processes=1, max_solves_per_caller=1) as (port, server):
        assert server.wait_ready(120) == 1
        runner = server.runtime.runner
        assert isinstance(runner, ProcessRunner)
        courier = runner._couriers[0]
        with grpc.insecure_channel(f"{LOOPBACK}:{port}") as channel:
            stream = planner_pb2_grpc.PlannerStub(channel).PlanBatch(batch, timeout=60)
            end = time.monotonic() + 20
            while courier.standby is None and time.monotonic() < end:
                time.sleep(0.01)
            assert courier.standby is not None  # one item solving, the next in the pipe
            cancelled = time.monotonic()
            stream.cancel()
            while (courier.current or courier.standby) and time.monotonic() < cancelled + 5:
                time.sleep(0.01)
            took = time.monotonic() - cancelled
        assert courier.current is None and courier.standby is None
        assert took < 2.0  # both stopped: neither searched on for seconds
        assert server.runtime.slots.free == 1
