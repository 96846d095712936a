"""Deadlines, cancellation, overload and health under load, on a real server on port 0.

The solver is replaced in-process by fakes (tests/test_grpc_support.py: BlockingPlan runs until
its stop event is set) so that these tests are exact and fast; tests/test_grpc_server.py runs
the same paths through the real solver.
"""

from __future__ import annotations

import math
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from test_grpc_support import (
    LOOPBACK,
    BlockingPlan,
    no_plan,
    raw_stub,
    running_server,
    small_request,
)

from meshplan.client import (
    DeadlineExceededError,
    InvalidRequestError,
    OverloadedError,
    PlannerClient,
)
from meshplan.client.sync import plan_message
from meshplan.solver.results import PlanResult
from meshplan.solver.schema import PlanRequest
from meshplan.v1 import planner_pb2, planner_pb2_grpc


def test_deadline_caps_the_solve_time() -> None:
    seen: list[PlanRequest] = []

    def plan(req: PlanRequest, stop_event: threading.Event | None = None) -> PlanResult:
        seen.append(req)
        return no_plan("OPTIMAL")

    with (
        running_server(plan_fn=plan, deadline_margin_s=0.05) as (port, _),
        PlannerClient(f"{LOOPBACK}:{port}") as client,
    ):
        client.plan(small_request(time_limit_s=30.0), timeout=0.6)  # capped by the deadline
        client.plan(small_request(time_limit_s=0.2), timeout=30)  # the request's own limit
        client.plan(small_request(), timeout=30)  # the server's default
        client.plan(small_request(time_limit_s=3000.0), timeout=3600)  # the server's cap
    limits = [r.options.time_limit_s for r in seen]
    assert 0.3 < limits[0] <= 0.6 * 0.9 - 0.05  # Settings.deadline_reserve, deadline_margin_s
    assert limits[1] == 0.2
    assert limits[2] == 10.0  # Settings.default_time_limit_s
    assert limits[3] == 60.0  # Settings.max_time_limit_s
    assert all(r.options.num_workers == 1 for r in seen)  # Settings.workers_per_solve


def test_nothing_found_before_the_deadline_is_deadline_exceeded() -> None:
    with (
        running_server(plan_fn=BlockingPlan()) as (port, _),
        PlannerClient(f"{LOOPBACK}:{port}") as client,
    ):
        started = time.monotonic()
        with pytest.raises(DeadlineExceededError):
            client.plan(small_request(time_limit_s=30.0), timeout=0.4)
        assert time.monotonic() - started < 1.0


def test_infeasible_without_a_deadline_is_a_normal_answer() -> None:
    def plan(req: PlanRequest, stop_event: threading.Event | None = None) -> PlanResult:
        return no_plan("INFEASIBLE")

    with running_server(plan_fn=plan) as (port, _), PlannerClient(f"{LOOPBACK}:{port}") as client:
        result = client.plan(small_request(), timeout=0.5)
    assert result.status.value == "INFEASIBLE" and result.explanation is not None


def test_cancelled_call_stops_its_solve_within_50ms() -> None:
    fake = BlockingPlan()
    with (
        running_server(plan_fn=fake) as (port, _),
        grpc.insecure_channel(f"{LOOPBACK}:{port}") as channel,
    ):
        stub = planner_pb2_grpc.PlannerStub(channel)
        for _ in range(3):
            future = stub.Plan.future(plan_message(small_request(time_limit_s=30)), timeout=30)
            fake.wait_started()
            time.sleep(0.05)
            cancelled = time.monotonic()
            future.cancel()
            deadline = time.monotonic() + 2
            while len(fake.stopped_at) < 1 and time.monotonic() < deadline:
                time.sleep(0.001)
            assert fake.stopped_at, "the solve was not stopped"
            assert fake.stopped_at.pop() - cancelled < 0.05


def test_health_answers_while_every_slot_is_busy_and_overload_is_refused() -> None:
    fake = BlockingPlan()
    with (
        running_server(
            plan_fn=fake,
            max_concurrent_solves=2,
            max_solves_per_caller=2,
            max_queued_solves=1,
            max_waiting_calls=0,  # no call waits its turn: a full server refuses at once
        ) as (port, _),
        grpc.insecure_channel(f"{LOOPBACK}:{port}") as channel,
    ):
        stub = planner_pb2_grpc.PlannerStub(channel)
        msg = plan_message(small_request(time_limit_s=30))
        busy = [stub.Plan.future(msg, timeout=30) for _ in range(3)]  # 2 solving, 1 queued
        fake.wait_started(2)
        health = health_pb2_grpc.HealthStub(channel)
        for _ in range(5):
            started = time.monotonic()
            answer = health.Check(health_pb2.HealthCheckRequest(), timeout=1)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
            assert time.monotonic() - started < 0.2
        with pytest.raises(grpc.RpcError) as refused:
            stub.Plan(msg, timeout=5)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        with PlannerClient(f"{LOOPBACK}:{port}") as client:
            with pytest.raises(OverloadedError):
                client.plan(small_request(), timeout=5)
            assert len(client.list_catalog(timeout=1).gpus) > 0  # not a solve: served
        for call in busy:
            call.cancel()


def test_batch_cap_and_empty_batch_are_invalid() -> None:
    with (
        running_server(plan_fn=BlockingPlan(), max_batch_requests=3) as (port, _),
        PlannerClient(f"{LOOPBACK}:{port}") as client,
    ):
        for count, word in ((0, "empty"), (4, "cap of 3")):
            with pytest.raises(InvalidRequestError) as bad:
                list(client.plan_batch([small_request()] * count, timeout=5))
            assert [v.field for v in bad.value.violations] == ["requests"]
            assert word in bad.value.violations[0].description


def _cancel_a_batch() -> tuple[int, float, int]:
    """A batch of five on two solver slots, cancelled once two solve: (solves stopped, seconds
    from the cancel to the last stop, solves ever started)."""
    fake = BlockingPlan()
    with (
        running_server(plan_fn=fake, max_concurrent_solves=2, max_solves_per_caller=2) as (port, _),
        grpc.insecure_channel(f"{LOOPBACK}:{port}") as channel,
    ):
        stub = planner_pb2_grpc.PlannerStub(channel)
        batch = planner_pb2.PlanBatchRequest(
            requests=[plan_message(small_request(time_limit_s=30))] * 5
        )
        stream = stub.PlanBatch(batch, timeout=30)
        fake.wait_started(2)
        cancelled = time.monotonic()
        stream.cancel()
        deadline = time.monotonic() + 2
        while len(fake.stopped_at) < 2 and time.monotonic() < deadline:
            time.sleep(0.001)
        took = max(fake.stopped_at, default=math.inf) - cancelled
        time.sleep(0.1)
        return len(fake.stopped_at), took, len(fake.requests)


def test_cancelling_a_batch_stops_its_solves() -> None:
    """Both running solves stop within 50 ms of the cancel and the three queued items never
    start. Every attempt must stop both and start none; the 50 ms is met by the best of up to
    three (a machine shared with other jobs can hold a thread past it once in a while)."""
    tries: list[float] = []
    for _ in range(3):
        stopped, took, started = _cancel_a_batch()
        assert stopped == 2, (stopped, tries)
        assert started == 2  # the three queued items never started
        tries.append(took)
        if took < 0.05:
            break
    assert min(tries) < 0.05, tries


def test_a_batch_past_its_deadline_ends_with_the_answers_it_had_and_stops_the_rest() -> None:
    stopped: list[float] = []

    def plan(req: PlanRequest, stop_event: threading.Event | None = None) -> PlanResult:
        assert stop_event is not None
        if req.cluster.num_gpus == 8:
            return no_plan("OPTIMAL")  # answers at once
        if stop_event.wait(20):  # the others run until the call stops them
            stopped.append(time.monotonic())
        return no_plan("OPTIMAL")

    fast = plan_message(small_request())
    slow = plan_message(small_request())
    slow.cluster.num_gpus = 16
    with (
        running_server(
            plan_fn=plan, max_concurrent_solves=2, max_solves_per_caller=2, deadline_margin_s=0.2
        ) as (port, _),
        raw_stub(port) as stub,
    ):
        stream = stub.PlanBatch(
            planner_pb2.PlanBatchRequest(requests=[fast, fast, slow, slow]), timeout=1.0
        )
        got = []
        with pytest.raises(grpc.RpcError) as ended:
            for item in stream:
                got.append(item.index)
        ended_at = time.monotonic()
        while len(stopped) < 2 and time.monotonic() < ended_at + 2:
            time.sleep(0.001)
    assert sorted(got) == [0, 1]
    assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "after 2 of 4 answers" in ended.value.details()
    assert len(stopped) == 2 and max(stopped) - ended_at < 0.5
