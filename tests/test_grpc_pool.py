"""The server's pool of solver processes (server.pool.ProcessRunner): stops reach the worker, a
killed worker is replaced and its call fails cleanly, health answers while every worker is
busy, and PlanBatch and a scaling curve answer what the solver answers in-process."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from test_grpc_support import LOOPBACK, big_request, running_server, small_request

from meshplan.client import PlannerClient
from meshplan.client.sync import plan_message
from meshplan.server.app import PlannerServer
from meshplan.server.dispatch import StopEvent
from meshplan.server.limits import RpcFailure
from meshplan.server.pool import ProcessRunner, WorkerLost
from meshplan.server.work import SolveLimits, plan_call
from meshplan.solver import plan
from meshplan.solver.scheduler import CurveRequest, scaling_curve
from meshplan.v1 import planner_pb2, planner_pb2_grpc


def stubborn(seconds: float, *, stop: threading.Event) -> str:
    """A call that ignores its stop event (run in a worker process)."""
    time.sleep(seconds)
    return "done"


def waits_for_stop(seconds: float, *, stop: threading.Event) -> str:
    """A call that ends when its stop event (in the worker process) is set."""
    return "stopped" if stop.wait(seconds) else "done"


def _limits(seconds: float = 60.0) -> SolveLimits:
    return SolveLimits(
        deadline=time.monotonic() + 2 * seconds,  # the request's limit, not the deadline
        default_time_limit_s=seconds,
        max_time_limit_s=seconds,
        deadline_reserve=0.0,
        deadline_margin_s=0.0,
        workers_per_solve=1,
    )


@pytest.fixture(scope="module")
def runner() -> Iterator[ProcessRunner]:
    pool = ProcessRunner(1, kill_after_s=1.0)  # warmed: the solver imported
    assert pool.wait_ready(120) == 1
    yield pool
    pool.close()
    pool.join()


async def _start_then(
    runner: ProcessRunner, fn: Any, *args: Any, stop: StopEvent | threading.Event, after: float
) -> tuple[Any, float]:
    """Start fn in the pool, set `stop` after `after` s; (outcome, seconds from stop to end)."""
    future = runner.start(fn, *args, stop=stop)
    await asyncio.sleep(after)
    assert not future.done(), "the call ended before it was stopped"
    stopped = time.monotonic()
    stop.set()
    try:
        outcome: Any = await asyncio.wait_for(future, 30)
    except Exception as err:  # noqa: BLE001
        outcome = err
    return outcome, time.monotonic() - stopped


def test_a_stop_reaches_the_solve_in_the_worker(runner: ProcessRunner) -> None:
    """A 60 s search stopped after 0.3 s ends within 0.5 s (the solver polls the event the
    worker's listener sets), with the no-plan answer of a stopped call. (Stopped after 1 s,
    the search had sometimes already proved its optimum on a quiet machine.)"""
    stop = StopEvent()
    outcome, took = asyncio.run(
        _start_then(runner, plan_call, big_request(60), _limits(), stop=stop, after=0.3)
    )
    assert took < 0.5, took
    assert isinstance(outcome, RpcFailure) and outcome.code == grpc.StatusCode.CANCELLED, outcome


def test_a_solve_that_ignores_its_stop_is_killed_and_replaced(runner: ProcessRunner) -> None:
    before = runner.pids()
    outcome, took = asyncio.run(_start_then(runner, stubborn, 60.0, stop=StopEvent(), after=0.3))
    assert isinstance(outcome, WorkerLost) and "killed and replaced" in str(outcome)
    assert took < 5.0, took  # kill_after_s = 1 s
    assert runner.wait_ready(120) == 1 and runner.pids() != before

    async def again() -> Any:
        return await runner.start(stubborn, 0.0, stop=StopEvent())

    assert asyncio.run(again()) == "done"


@pytest.fixture(scope="module")
def pool_server() -> Iterator[tuple[int, PlannerServer]]:
    with running_server(solver_processes=2, max_solves_per_caller=2, max_queued_solves=64) as (
        port,
        server,
    ):
        assert server.wait_ready(120) == 2
        yield port, server


def test_plan_batch_answers_what_the_solver_answers_in_process(
    pool_server: tuple[int, PlannerServer],
) -> None:
    port, server = pool_server
    reqs = [
        small_request(),
        small_request(top_k=3),
        big_request(60).model_copy(update={"cluster": small_request().cluster}),
        plan_request(num_gpus=64, seq_len=8192),
        plan_request(num_gpus=16, model="llama3-70b"),
        plan_request(num_gpus=8, model="llama3-405b"),  # infeasible: the explanation
    ]
    with PlannerClient(f"{LOOPBACK}:{port}") as client:
        items = sorted(client.plan_batch(reqs, timeout=120), key=lambda i: i.index)
    assert [i.error for i in items] == [None] * len(reqs)
    for item, req in zip(items, reqs, strict=True):
        local = plan(req)
        got = item.result
        assert got is not None and got.status == local.status, item.index
        assert got.config == local.config and got.performance == local.performance, item.index
        assert got.explanation == local.explanation, item.index


def plan_request(num_gpus: int, model: str = "llama3-8b", seq_len: int = 4096) -> Any:
    from meshplan.solver import PlanRequest

    return PlanRequest.model_validate(
        {
            "model": {"preset": model},
            "cluster": {"num_gpus": num_gpus},
            "training": {"seq_len": seq_len},
        }
    )


def test_a_scaling_curve_spreads_its_cells_and_answers_the_same(
    pool_server: tuple[int, PlannerServer],
) -> None:
    port, _ = pool_server
    body = {
        "model": {"preset": "llama3-8b"},
        "training": {"seq_len": 4096},
        "clusters": [{"gpu": "h100-sxm-80gb"}, {"gpu": "a100-sxm-80gb"}],
        "grid": {"counts": [8, 16, 32]},
        "batch": {"kind": "FIXED_GLOBAL", "global_batch_tokens": 4096 * 256},
    }
    with PlannerClient(f"{LOOPBACK}:{port}") as client:
        remote = client.scaling_curve(CurveRequest.model_validate(body), timeout=120)
    local = scaling_curve(CurveRequest.model_validate(body))
    assert remote.cells == local.cells and remote.clusters == local.clusters


def test_health_answers_while_every_worker_is_busy(pool_server: tuple[int, PlannerServer]) -> None:
    port, server = pool_server
    with grpc.insecure_channel(f"{LOOPBACK}:{port}") as channel:
        stub = planner_pb2_grpc.PlannerStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        calls = [stub.Plan.future(plan_message(big_request(30)), timeout=30) for _ in range(2)]
        try:
            _wait(lambda: server.runtime.slots.free == 0, "both workers busy")
            times = []
            for _ in range(20):
                started = time.monotonic()
                reply = health.Check(health_pb2.HealthCheckRequest(), timeout=5)
                times.append(time.monotonic() - started)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
            assert server.runtime.slots.free == 0  # still busy throughout
            assert max(times) < 0.25, max(times)
        finally:
            for call in calls:
                call.cancel()
        _wait(lambda: server.runtime.slots.free == 2, "the workers free again")


def test_a_killed_worker_fails_its_call_and_is_replaced(
    pool_server: tuple[int, PlannerServer],
) -> None:
    port, server = pool_server
    runner = server.runtime.runner
    assert isinstance(runner, ProcessRunner)
    before = [p for p in runner.pids() if p is not None]
    with grpc.insecure_channel(f"{LOOPBACK}:{port}") as channel:
        stub = planner_pb2_grpc.PlannerStub(channel)
        call = stub.Plan.future(plan_message(big_request(30)), timeout=30)
        _wait(lambda: server.runtime.slots.free < 2, "the solve started")
        time.sleep(0.3)
        busy = [c.proc.pid for c in runner._couriers if c.current is not None]
        assert len(busy) == 1
        os.kill(busy[0], signal.SIGKILL)
        with pytest.raises(grpc.RpcError) as failed:
            call.result(timeout=10)
    assert failed.value.code() == grpc.StatusCode.INTERNAL
    assert "killed by SIGKILL" in failed.value.details()
    assert "replaced" in failed.value.details()
    assert server.wait_ready(120) == 2
    after = runner.pids()
    assert busy[0] not in after and set(before) - {busy[0]} <= set(after)
    with PlannerClient(f"{LOOPBACK}:{port}") as client:  # the pool serves again
        assert client.plan(small_request(), timeout=60).config is not None


def _wait(condition: Any, what: str, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_pool_settings_resolve_and_refuse_more_slots_than_processes() -> None:
    from pydantic import ValidationError

    from meshplan.server.settings import Settings, usable_cpus

    assert 1 <= usable_cpus() <= len(os.sched_getaffinity(0))
    default = Settings()
    assert default.solver_processes == default.max_concurrent_solves == usable_cpus()
    assert Settings(max_concurrent_solves=3).solver_processes == 3
    assert Settings(solver_processes=4).max_concurrent_solves == 4
    threads = Settings(solver_processes=0)
    assert threads.max_concurrent_solves == max(1, usable_cpus() // 2)
    with pytest.raises(
        ValidationError, match="max_concurrent_solves .3. exceeds solver_processes .2."
    ):
        Settings(solver_processes=2, max_concurrent_solves=3)


def test_workers_run_numeric_libraries_on_one_thread(runner: ProcessRunner) -> None:
    """Each worker is one solve on one core: no BLAS thread pool per worker (they would only
    contend); the server's own environment is left as it was."""
    (pid,) = runner.pids()
    assert pid is not None
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    if "OPENBLAS_NUM_THREADS" not in os.environ:
        assert b"OPENBLAS_NUM_THREADS=1" in environ
        assert b"OMP_NUM_THREADS=1" in environ
        assert "OPENBLAS_NUM_THREADS" not in os.environ  # set for the spawn only


def test_workers_yield_the_cpu_to_the_server(runner: ProcessRunner) -> None:
    """A worker runs at WORKER_NICENESS in a session of its own (with Linux's autogroup
    scheduling, a CPU share apart from the server's event loop, at the default weight), and is
    still the server's child."""
    from meshplan.server.worker import WORKER_NICENESS

    (pid,) = runner.pids()
    assert pid is not None
    assert os.getsid(pid) == pid != os.getsid(0)
    assert os.getpriority(os.PRIO_PROCESS, pid) == os.getpriority(os.PRIO_PROCESS, 0) + min(
        WORKER_NICENESS, 19 - os.getpriority(os.PRIO_PROCESS, 0)
    )
    assert os.getppid() != pid and Path(f"/proc/{pid}/stat").read_text().split()[3] == str(
        os.getpid()
    )
    group, ours = (_autogroup(f"/proc/{pid}/autogroup"), _autogroup("/proc/self/autogroup"))
    if group and ours:  # Linux with CONFIG_SCHED_AUTOGROUP: a group apart, at the default weight
        assert group[0] != ours[0]
        assert group[-1] == "0"


def _autogroup(path: str) -> list[str]:
    """The words of an autogroup file ("/autogroup-498 nice 0"); none where the kernel has no
    autogroups or a sandbox shows the file empty."""
    try:
        return Path(path).read_text().split()
    except OSError:
        return []


def test_a_worker_that_died_while_idle_is_replaced_before_the_next_call(
    runner: ProcessRunner,
) -> None:
    assert runner.wait_ready(120) == 1
    (pid,) = runner.pids()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)

    async def call() -> Any:
        return await runner.start(stubborn, 0.0, stop=StopEvent())

    assert asyncio.run(call()) == "done"  # served by a new process, not failed
    assert runner.pids() not in ([pid], [None])


def test_a_plain_event_stop_is_polled_and_reaches_the_worker(runner: ProcessRunner) -> None:
    """A stop event that is not a StopEvent (no callback) is looked at every 50 ms."""
    stop = threading.Event()
    outcome, took = asyncio.run(_start_then(runner, waits_for_stop, 60.0, stop=stop, after=0.3))
    assert took < 0.5, took
    assert outcome == "stopped"


def test_invalid_batch_items_parsed_in_the_workers_name_their_fields(
    pool_server: tuple[int, PlannerServer],
) -> None:
    """Batch items reach the worker processes as bytes and are checked there: a long string,
    an out-of-range number and an unknown enum number each come back as an item error naming
    the item's field; the valid item is planned."""
    port, _ = pool_server
    negative = plan_message(small_request())
    negative.cluster.num_gpus = -8
    unknown = plan_message(small_request())
    unknown.training.precision = 99  # not a Precision value
    batch = planner_pb2.PlanBatchRequest(
        requests=[
            plan_message(small_request()),
            planner_pb2.PlanRequest(cluster={"gpu": "x" * 5000, "num_gpus": 8}),
            negative,
            unknown,
        ]
    )
    with grpc.insecure_channel(f"{LOOPBACK}:{port}") as channel:
        stub = planner_pb2_grpc.PlannerStub(channel)
        items = {a.index: a for a in stub.PlanBatch(batch, timeout=60)}
    assert items[0].HasField("result") and items[0].result.config.tp >= 1
    fields = {i: [v.field for v in items[i].error.field_violations] for i in (1, 2, 3)}
    assert all(items[i].error.code == "INVALID_ARGUMENT" for i in (1, 2, 3))
    assert fields[1] == ["requests[1].cluster.gpu"]
    assert fields[2] == ["requests[2].cluster.num_gpus"]
    assert fields[3] == ["requests[3].training.precision"]
