"""Fair use: solver slots in first-come order with a share per caller, per-caller caps on calls
and pending batch requests; one client flooding PlanBatch cannot starve another."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import grpc
import pytest
from test_grpc_support import LOOPBACK, BlockingPlan, running_server, small_request

from meshplan.client import InvalidRequestError, PlannerClient
from meshplan.client.sync import batch_message
from meshplan.server.limits import Admission, FairSlots, RpcFailure
from meshplan.v1 import planner_pb2_grpc

FLOOD, OTHER = "flood-token-0123456789", "other-token-0123456789"


def _grants(slots: FairSlots, arrivals: list[str], busy: list[str]) -> list[str]:
    """The order in which queued callers get a slot, releasing one slot at a time."""

    async def run() -> list[str]:
        for caller in busy:
            await slots.acquire(caller)
        order: list[str] = []

        async def wait(caller: str) -> None:
            await slots.acquire(caller)
            order.append(caller)

        tasks = []
        for caller in arrivals:
            tasks.append(asyncio.create_task(wait(caller)))
            await asyncio.sleep(0)  # arrives, and queues
        holders = list(busy)
        while len(order) < len(arrivals):
            granted = len(order)
            slots.release(holders.pop(0))
            await asyncio.sleep(0)  # the granted waiter runs
            holders.extend(order[granted:])
        await asyncio.gather(*tasks)
        return order

    return asyncio.run(run())


def test_distinct_callers_are_served_in_arrival_order() -> None:
    arrivals = [f"c{i}" for i in range(12)]
    assert _grants(FairSlots(1, 1), arrivals, busy=["c-busy"]) == arrivals


def test_a_caller_with_many_queued_solves_takes_turns_with_a_newcomer() -> None:
    # the flooding caller queued 5 solves before the other caller's one arrived
    order = _grants(FairSlots(1, 1), ["a", "a", "a", "a", "a", "b"], busy=["a"])
    assert order.index("b") == 0  # served as soon as the slot frees, not after the five


def test_a_caller_never_holds_more_than_its_share() -> None:
    async def run() -> tuple[int, int]:
        slots = FairSlots(4, 2)
        for _ in range(2):
            await slots.acquire("a")
        third = asyncio.create_task(slots.acquire("a"))
        await asyncio.sleep(0)
        await slots.acquire("b")  # free slots remain: b goes ahead of a's third
        waiting = slots.queued
        third.cancel()  # gives up waiting: forgotten
        await asyncio.gather(third, return_exceptions=True)
        return waiting, slots.queued

    assert asyncio.run(run()) == (1, 0)


def test_admission_caps_calls_and_pending_batch_requests_per_caller() -> None:
    async def run() -> Admission:
        admission = Admission(total=10, per_caller=2, batch_per_caller=5, max_waiting=4)
        async with admission.admit("a"), admission.admit("a", batch_requests=3):
            for kwargs in ({}, {"batch_requests": 1}):
                with pytest.raises(RpcFailure) as full:
                    async with admission.admit("a", **kwargs):
                        pass
                assert full.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            async with admission.admit("b", batch_requests=5):
                pass
            with pytest.raises(RpcFailure) as never:  # can never fit: not "retry later"
                async with admission.admit("c", batch_requests=6):
                    pass
            assert never.value.code == grpc.StatusCode.INVALID_ARGUMENT
            assert never.value.violations[0].field == "requests"
        return admission

    admission = asyncio.run(run())
    assert admission.in_progress == 0 and not admission.batch


def _admitted_order(admission: Admission, arrivals: list[str], busy: list[str]) -> list[str]:
    """The order in which waiting calls are admitted, one ticket freed at a time."""

    async def run() -> list[str]:
        order: list[str] = []
        release: dict[str, list[asyncio.Event]] = {}

        async def call(caller: str, log: bool) -> None:
            done = asyncio.Event()
            async with admission.admit(caller, deadline=time.monotonic() + 30):
                if log:
                    order.append(caller)
                release.setdefault(caller, []).append(done)
                await done.wait()

        held = [asyncio.create_task(call(c, False)) for c in busy]
        await asyncio.sleep(0)
        tasks = []
        for caller in arrivals:
            tasks.append(asyncio.create_task(call(caller, True)))
            await asyncio.sleep(0)  # arrives, and waits
        while len(order) < len(arrivals):
            holder = next(c for c, evs in release.items() if evs)
            release[holder].pop(0).set()
            await asyncio.sleep(0.01)
        for evs in release.values():
            for ev in evs:
                ev.set()
        await asyncio.gather(*held, *tasks)
        return order

    return asyncio.run(run())


def test_waiting_calls_are_admitted_in_turns_across_callers() -> None:
    # "a" sent five calls before "b" and "c" sent one each: b and c do not wait behind them
    admission = Admission(total=1, per_caller=8, batch_per_caller=8, max_waiting=16)
    order = _admitted_order(admission, ["a", "a", "a", "a", "a", "b", "c"], busy=["x"])
    assert order[:3] == ["a", "b", "c"] and order.count("a") == 5


def test_a_wait_ends_at_the_deadline_and_the_queue_is_bounded() -> None:
    async def run() -> tuple[grpc.StatusCode, grpc.StatusCode, int]:
        admission = Admission(total=1, per_caller=4, batch_per_caller=4, max_waiting=1)
        async with admission.admit("a"):
            with pytest.raises(RpcFailure) as late:
                async with admission.admit("b", deadline=time.monotonic() + 0.05):
                    pass
            waiter = asyncio.create_task(_hold(admission, "b"))
            await asyncio.sleep(0)
            with pytest.raises(RpcFailure) as full:
                async with admission.admit("c", deadline=time.monotonic() + 5):
                    pass
            waiter.cancel()
            await asyncio.gather(waiter, return_exceptions=True)
        return late.value.code, full.value.code, admission.queued

    late, full, queued = asyncio.run(run())
    assert late == grpc.StatusCode.DEADLINE_EXCEEDED
    assert full == grpc.StatusCode.RESOURCE_EXHAUSTED and queued == 0


async def _hold(admission: Admission, caller: str) -> None:
    async with admission.admit(caller, deadline=time.monotonic() + 5):
        await asyncio.sleep(5)


def _tokens(tmp_path: Path) -> str:
    path = tmp_path / "tokens"
    path.write_text(f"{FLOOD}\n{OTHER}\n")
    return str(path)


def test_a_flooding_batch_does_not_starve_another_callers_plan(tmp_path: Path) -> None:
    settings = {"auth_token_file": _tokens(tmp_path), "max_concurrent_solves": 1}
    with running_server(**settings) as (port, _):
        target = f"{LOOPBACK}:{port}"
        answered: list[float] = []
        flood_done = threading.Event()

        def flood() -> None:  # 48 real solves, one slot: several seconds of work
            with PlannerClient(target, token=FLOOD) as client:
                for _ in client.plan_batch([small_request(time_limit_s=10)] * 48, timeout=300):
                    answered.append(time.monotonic())
            flood_done.set()

        threading.Thread(target=flood, daemon=True).start()
        deadline = time.monotonic() + 60
        while len(answered) < 2:  # the batch is under way
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with PlannerClient(target, token=OTHER) as other:
            started = time.monotonic()
            result = other.plan(small_request(time_limit_s=10), timeout=5)
            took = time.monotonic() - started
        assert result.config is not None and took < 5
        assert not flood_done.is_set()  # served while the flood was still running
        assert flood_done.wait(300) and len(answered) == 48


def test_one_callers_open_calls_are_capped_while_another_is_served(tmp_path: Path) -> None:
    fake = BlockingPlan()
    settings = {
        "auth_token_file": _tokens(tmp_path),
        "max_concurrent_solves": 2,
        "max_calls_per_caller": 3,
        "max_batch_requests_per_caller": 6,
        "plan_fn": fake,
    }
    with (
        running_server(**settings) as (port, _),
        grpc.insecure_channel(f"{LOOPBACK}:{port}") as channel,
    ):
        stub = planner_pb2_grpc.PlannerStub(channel)
        auth = (("authorization", f"Bearer {FLOOD}"),)
        batch = batch_message([small_request(time_limit_s=30)] * 2)
        open_calls = [stub.PlanBatch(batch, timeout=30, metadata=auth) for _ in range(3)]
        fake.wait_started(1)
        with pytest.raises(grpc.RpcError) as refused:  # a fourth call of the same caller
            next(stub.PlanBatch(batch, timeout=5, metadata=auth))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "calls in progress" in refused.value.details()
        with PlannerClient(f"{LOOPBACK}:{port}", token=OTHER) as other:
            with pytest.raises(InvalidRequestError) as never:  # 7 requests, cap 6: not overload
                list(other.plan_batch([small_request()] * 7, timeout=5))
            assert "one caller may have pending" in never.value.message
            fake.max_s = 0.01  # the other caller's solves return at once
            assert other.plan(small_request(time_limit_s=0.05), timeout=10) is not None
        for call in open_calls:
            call.cancel()


def test_a_token_names_the_caller_only_when_tokens_are_checked() -> None:
    from meshplan.server.auth import caller_of

    made_up = [(("authorization", f"Bearer made-up-{i:04d}-0123456789"),) for i in range(3)]
    peer = "ipv4:10.0.0.5:41234"
    assert {caller_of(m, peer, verified=False) for m in made_up} == {"ipv4:10.0.0.5"}
    assert len({caller_of(m, peer, verified=True) for m in made_up}) == 3
