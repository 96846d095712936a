"""The scheduler RPCs on a real server on loopback: answers equal the in-process ones, the same
request gives the same bytes from the cache, bad input is INVALID_ARGUMENT naming the field, a
256-cell curve honours its deadline, a cancelled call stops its work, a query takes a solver
slot like a plan, and the CLI's subcommands reach a server with a token."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from test_grpc_support import LOOPBACK, raw_stub, running_server

from meshplan.client import (
    AsyncPlannerClient,
    InvalidRequestError,
    OverloadedError,
    PlannerClient,
    PlannerError,
)
from meshplan.client.exceptions import DeadlineExceededError, error_from_rpc
from meshplan.client.scheduler import _message
from meshplan.server.scheduler import _turns
from meshplan.solver import cache
from meshplan.solver.scheduler import (
    AdmitRequest,
    CurveRequest,
    CurveResult,
    FrontRequest,
    ReplanRequest,
    replan,
    scaling_curve,
)
from meshplan.solver.schema import PlanRequest
from meshplan.tools.cli.main import main as cli_main
from meshplan.v1 import planner_pb2

CURVE = {
    "model": {"preset": "llama3-8b"},
    "training": {"seq_len": 4096},
    "clusters": [{"gpu": "h100-sxm-80gb"}],
    "grid": {"max_nodes": 2, "sub_node": True},
    "batch": {"kind": "FIXED_GLOBAL", "global_batch_tokens": 4096 * 64},
}
REPLAN = {
    "model": {"preset": "llama3-8b"},
    "training": {"seq_len": 4096},
    "cluster": {"num_gpus": 32},
    "config": {"tp": 2, "pp": 1, "dp": 16, "micro_batch_size": 1, "num_microbatches": 4},
    "event": {"delta_nodes": -1},
    "compatibility": "SAME_MODEL_PARALLEL",
    "batch": {"kind": "FIXED_GLOBAL"},
}
# 4 GPU types x 64 counts: far more work than the deadlines below allow
BIG = {  # 256 cells, ~2.7 s cold here: the tests below need it still running after 1.5 s
    **CURVE,
    "model": {"preset": "qwen3-235b-a22b"},
    "clusters": [
        {"gpu": g} for g in ("h100-sxm-80gb", "h200-141gb", "a100-sxm-80gb", "b200-192gb")
    ],
    "grid": {"max_nodes": 64},
    "batch": {"kind": "FIXED_GLOBAL", "global_batch_tokens": 4096 * 512},
}


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    with running_server(max_concurrent_solves=2, max_queued_solves=8) as (bound, _):
        yield bound


@pytest.fixture()
def client(port: int) -> Iterator[PlannerClient]:
    with PlannerClient(f"{LOOPBACK}:{port}", default_timeout=120) as c:
        yield c


def test_curve_and_replan_over_grpc_equal_the_in_process_answers(client: PlannerClient) -> None:
    req = CurveRequest.model_validate(CURVE)
    assert client.scaling_curve(req) == scaling_curve(req)
    rreq = ReplanRequest.model_validate(REPLAN)
    assert client.replan(rreq) == replan(rreq)


def test_the_same_request_gives_the_same_bytes_quickly(port: int) -> None:
    msg = _message("ScalingCurve", CurveRequest.model_validate({**CURVE, "grid": {"max_nodes": 3}}))
    with raw_stub(port) as stub:
        first = stub.ScalingCurve(msg, timeout=120).SerializeToString()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            again = stub.ScalingCurve(msg, timeout=120).SerializeToString()
            times.append(time.perf_counter() - t0)
            assert again == first
    assert min(times) < 0.1  # a cache lookup (the benchmark measures it against 10 ms)


def test_admit_and_front_over_grpc(client: PlannerClient) -> None:
    clusters = [{"gpu": "h100-sxm-80gb", "max_gpus": 16, "price_per_gpu_hour": 2.5}]
    body = {k: CURVE[k] for k in ("model", "training", "batch")}
    a = client.smallest_allocation(
        AdmitRequest.model_validate(
            {**body, "clusters": clusters, "work": {"steps": 1000}, "deadline_s": 86400.0}
        )  # fmt: skip
    )
    assert a.feasible and a.pick is not None and a.pick.finish_s <= 86400
    f = client.training_front(
        FrontRequest.model_validate(
            {**body, "clusters": clusters, "grid": {"max_nodes": 2}, "token_budget": 10**10}
        )  # fmt: skip
    )
    assert f.priced and any(p.on_front_cost for p in f.points)


def test_the_async_client_answers_too(port: int) -> None:
    async def go() -> int:
        async with AsyncPlannerClient(f"{LOOPBACK}:{port}") as c:
            res = await c.scaling_curve(CurveRequest.model_validate(CURVE), timeout=120)
            return len(res.cells)

    assert asyncio.run(go()) == 5  # 1, 2, 4, 8, 16


def _violation(stub_call) -> tuple[str, str]:  # noqa: ANN001
    with pytest.raises(grpc.RpcError) as err:
        stub_call()
    failure = error_from_rpc(err.value)
    assert isinstance(failure, InvalidRequestError), failure
    (v,) = failure.violations
    return v.field, v.description


@pytest.mark.parametrize(
    ("method", "body", "field"),
    [
        ("ScalingCurve", {**CURVE, "clusters": [{"max_gpus": 8}], "grid": {"counts": [8, 64]}},
         "grid.counts[1]"),
        ("ScalingCurve", {**CURVE, "grid": {}}, "grid"),
        ("ScalingCurve", {**CURVE, "observations": [
            {"cluster": "h100-sxm-80gb", "num_gpus": 12, "step_time_s": 2.0,
             "config": {"tp": 1, "pp": 1, "dp": 12, "micro_batch_size": 1,
                        "num_microbatches": 1}}]}, "observations[0].num_gpus"),
        ("SmallestAllocation", {**{k: CURVE[k] for k in ("model", "training", "batch")},
                                "clusters": [{"max_gpus": 16}], "work": {"tokens": 10**9},
                                "deadline_unix_s": 1_000_000.0}, "deadline_unix_s"),
        ("Replan", {**REPLAN, "config": {**REPLAN["config"], "tp": 3}}, "config.tp"),
        ("Replan", {**REPLAN, "config": {**REPLAN["config"], "tp": 8, "pp": 4, "dp": 1, "zero_stage": 0},
                    "event": {"delta_nodes": -3}}, "compatibility"),
        ("TrainingFront", {**CURVE, "token_budget": 10**9, "batch": {"kind": "FREE",
                           "global_batch_tokens": 4096}}, "batch.global_batch_tokens"),
    ],
)  # fmt: skip
def test_bad_input_is_invalid_argument_naming_the_field(
    port: int, method: str, body: dict, field: str
) -> None:
    model = {"ScalingCurve": CurveRequest, "Replan": ReplanRequest,
             "SmallestAllocation": AdmitRequest, "TrainingFront": FrontRequest}[method]  # fmt: skip
    msg = _message(method, model.model_validate(body))
    with raw_stub(port) as stub:
        got, why = _violation(lambda: getattr(stub, method)(msg, timeout=60))
    assert got == field, why


@pytest.mark.parametrize("field", ["now_unix_s", "deadline_s", "clusters.price_per_gpu_hour"])
def test_an_infinite_number_is_invalid_argument_naming_it(port: int, field: str) -> None:
    """(It was INTERNAL: an infinite deadline or price has no canonical JSON for the cache key.)"""
    body = {k: CURVE[k] for k in ("model", "training", "batch")}
    req = {**body, "clusters": [{"max_gpus": 16}], "work": {"steps": 10}, "deadline_s": 3600.0}
    msg = _message("SmallestAllocation", AdmitRequest.model_validate(req))
    if field.startswith("clusters."):
        msg.clusters[0].price_per_gpu_hour = float("inf")
    else:
        setattr(msg, field, float("inf"))
    with raw_stub(port) as stub:
        got, why = _violation(lambda: stub.SmallestAllocation(msg, timeout=60))
    assert got == field.replace("clusters.", "clusters[0].") and "finite" in why, (got, why)


def test_a_malformed_message_names_the_missing_field(port: int) -> None:
    msg = _message("ScalingCurve", CurveRequest.model_validate(CURVE))
    msg.batch.Clear()  # no batch kind: the policy must be stated
    with raw_stub(port) as stub:
        got, _ = _violation(lambda: stub.ScalingCurve(msg, timeout=60))
    assert got == "batch.kind"


def test_a_256_cell_curve_honours_the_deadline(client: PlannerClient) -> None:
    cache.clear()  # cold: cells cached by an earlier test would finish the curve in time
    req = CurveRequest.model_validate(BIG)
    t0 = time.monotonic()
    with pytest.raises(DeadlineExceededError):
        client.scaling_curve(req, timeout=1.5)
    assert time.monotonic() - t0 < 3.0


def test_a_cancelled_query_stops_its_work_and_frees_its_slot() -> None:
    cache.clear()  # cold: the deadline test before this one leaves some of its cells cached
    with running_server(max_concurrent_solves=1, max_queued_solves=0, max_waiting_calls=0) as (
        port,
        _,
    ):
        msg = _message("ScalingCurve", CurveRequest.model_validate(BIG))
        with raw_stub(port) as stub:
            future = stub.ScalingCurve.future(msg, timeout=300)
            time.sleep(0.5)
            # the query holds the only ticket: a plan is refused while it runs
            plan = planner_pb2.PlanRequest()
            plan.model.preset, plan.cluster.num_gpus = "llama3-8b", 8
            with pytest.raises(grpc.RpcError) as busy:
                stub.Plan(plan, timeout=30)
            assert busy.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            future.cancel()
            cancelled = time.monotonic()
            while True:  # the call's ticket comes back at once; then the plan needs the slot
                try:
                    stub.Plan(plan, timeout=30)
                    break
                except grpc.RpcError as err:
                    assert err.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
                    assert time.monotonic() - cancelled < 5.0, "the cancelled call kept its ticket"
                    time.sleep(0.1)
            # the server's work stopped: the solver slot came free within seconds, not after
            # the whole curve (tens of seconds)
            assert time.monotonic() - cancelled < 5.0, "the cancelled curve kept its slot"


def test_the_cli_subcommands_answer_through_a_server_with_a_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = tmp_path / "tokens"
    token.write_text("scheduler-cli-token-0123456789\n")
    curve = ["curve", "--model", "llama3-8b", "--seq-len", "4096", "--counts", "4,8",
             "--batch", "fixed-global", "--global-batch-tokens", str(4096 * 64), "--json"]  # fmt: skip
    admit = ["admit", "--model", "llama3-8b", "--batch", "free", "--max-gpus", "8",
             "--tokens", "1000000", "--deadline-unix", "1000"]  # fmt: skip
    saved = dict(os.environ)  # the connection flags are exported to the environment
    try:
        assert cli_main(curve) == 0
        local = json.loads(capsys.readouterr().out)
        with running_server(auth_token_file=str(token)) as (port, _):
            remote = ["--server", f"{LOOPBACK}:{port}", "--token-file", str(token)]
            assert cli_main([*curve, *remote]) == 0
            assert json.loads(capsys.readouterr().out) == local  # the same answer, same key
            assert cli_main([*admit, *remote]) == 2  # bad input: one line naming the flag
            err = capsys.readouterr().err
            assert "--deadline-unix" in err and len(err.strip().splitlines()) == 1, err
            os.environ.pop("MESHPLAN_TOKEN_FILE")
            assert cli_main([*curve, "--server", f"{LOOPBACK}:{port}"]) == 1
            assert "UNAUTHENTICATED" in capsys.readouterr().err
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _scrape(port: int) -> dict[str, float]:
    import urllib.request

    with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/metrics", timeout=5) as page:
        lines = page.read().decode().splitlines()
    return {
        name: float(value)
        for name, value in (x.rsplit(" ", 1) for x in lines if x and not x.startswith("#"))
    }


def test_a_query_counts_as_a_solve_for_limits_deadline_and_metrics(tmp_path: Path) -> None:
    """One solver slot, one call per caller: caller A's 256-cell curve takes the slot a turn
    of a few cells at a time, A's next call is refused, caller B's plan takes the slot at the
    next turn (not after the whole curve); the curve ends at its deadline; the metrics count
    each turn as a solve of the query's method, and a cache hit without one."""
    tokens = ("caller-a-token-0123456789", "caller-b-token-0123456789")
    (tmp_path / "tokens").write_text("\n".join(tokens) + "\n")
    settings = {
        "max_concurrent_solves": 1,
        "max_queued_solves": 4,
        "max_calls_per_caller": 1,
        "auth_token_file": str(tmp_path / "tokens"),
        "metrics_port": 0,
        "metrics_host": LOOPBACK,
    }
    small = CurveRequest.model_validate(CURVE)
    cache.clear()  # the big curve starts cold, so it still runs at its deadline
    with (
        running_server(**settings) as (port, server),
        PlannerClient(f"{LOOPBACK}:{port}", token=tokens[0]) as a,
        PlannerClient(f"{LOOPBACK}:{port}", token=tokens[1]) as b,
    ):
        plan = PlanRequest.model_validate(
            {"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": 8}}
        )
        outcome: list[BaseException] = []

        def big_curve() -> None:
            try:
                a.scaling_curve(CurveRequest.model_validate(BIG), timeout=1.5)
            except PlannerError as err:
                outcome.append(err)

        curve = threading.Thread(target=big_curve)
        curve.start()
        time.sleep(0.5)  # the curve holds the only slot, and A's only call
        with pytest.raises(OverloadedError):
            a.plan(plan, timeout=10)
        started = time.monotonic()
        assert b.plan(plan, timeout=20).config is not None  # one cell's turn, then run
        waited = time.monotonic() - started
        curve.join(10)
        assert [type(e) for e in outcome] == [DeadlineExceededError]
        assert waited < 0.9, waited  # before the curve's deadline (1.5 s) ended it
        first = a.scaling_curve(small, timeout=120)  # computed once, then from the cache
        solved = _scrape(server.metrics_port)

        async def again() -> CurveResult:  # the async client, with the token, the same answer
            async with AsyncPlannerClient(f"{LOOPBACK}:{port}", token=tokens[0]) as c:
                return await c.scaling_curve(small, timeout=120)

        assert asyncio.run(again()) == first
        m = _scrape(server.metrics_port)
    assert (
        m['meshplan_calls_total{code="DEADLINE_EXCEEDED",method="ScalingCurve",transport="grpc"}']
        == 1
    )
    assert m['meshplan_calls_total{code="OK",method="ScalingCurve",transport="grpc"}'] == 2
    assert m['meshplan_rejected_calls_total{method="Plan",transport="grpc"}'] == 1
    count = 'meshplan_solve_duration_seconds_count{method="ScalingCurve"}'
    turns = len(_turns(len(first.cells), 1))  # the small curve's, then >= 1 of the big one's
    assert m[count] == solved[count] >= turns + 1  # none on a hit
    assert m['meshplan_calls_total{code="OK",method="Plan",transport="grpc"}'] == 1
    assert m["meshplan_solves_in_flight"] == 0 and m["meshplan_solves_queued"] == 0


@pytest.mark.parametrize(
    "method", ["ScalingCurve", "Replan", "SmallestAllocation", "TrainingFront"]
)
def test_garbage_bytes_are_invalid_argument(port: int, method: str) -> None:
    with grpc.insecure_channel(f"{LOOPBACK}:{port}") as channel:
        call = channel.unary_unary(f"/meshplan.v1.Planner/{method}")
        got, _ = _violation(lambda: call(b"\xff\xff\xff garbage", timeout=10))
        assert got == "request"


def test_a_long_name_is_refused_and_echoed_truncated(port: int) -> None:
    msg = _message("ScalingCurve", CurveRequest.model_validate(CURVE))
    msg.clusters[0].gpu = "g" * 5000
    with raw_stub(port) as stub:
        got, why = _violation(lambda: stub.ScalingCurve(msg, timeout=10))
    assert got == "clusters[0].gpu" and "5,000 characters" in why and len(why) < 400, why


def test_a_large_query_is_prepared_apart_and_answers_as_in_process() -> None:
    """A curve of 2,000 observations (~110 KB, past LARGE_REQUEST_BYTES) is parsed and fitted
    on a solver slot and runs without its observations: the same fit as in-process, the
    observations counted, the same bytes again from the cache."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks.soak_probe import observed_curve
    from meshplan.server.scheduler import LARGE_REQUEST_BYTES

    req = observed_curve(2_000, seed=5)
    assert len(_message("ScalingCurve", req).SerializeToString()) > LARGE_REQUEST_BYTES
    local = scaling_curve(req)
    with (
        running_server(max_concurrent_solves=2) as (port, _),
        PlannerClient(f"{LOOPBACK}:{port}", default_timeout=120) as c,
    ):
        first, again = c.scaling_curve(req), c.scaling_curve(req)
        other = c.scaling_curve(observed_curve(2_000, seed=6))
    assert first.fit is not None and local.fit is not None
    assert first.fit.num_observations == 2_000
    assert first.fit.model_dump(exclude={"note"}) == local.fit.model_dump(exclude={"note"})
    assert [c.tokens_per_s for c in first.cells] == [c.tokens_per_s for c in local.cells]
    assert again == first and other.cache_key != first.cache_key
