"""The client's own pieces: targets, service config, typed errors, async twin, batch CLI.

Servers here run a fake solver (answers in microseconds); tests/test_grpc_server.py uses the
real one.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from test_grpc_support import LOOPBACK, no_plan, running_server, small_request

from meshplan.client import (
    AsyncPlannerClient,
    DeadlineExceededError,
    InvalidRequestError,
    OverloadedError,
    PlannerClient,
    PlannerError,
    UnavailableError,
)
from meshplan.client.channel import make_target, service_config
from meshplan.client.exceptions import error_from_parts
from meshplan.solver.results import PlanResult
from meshplan.solver.schema import PlanRequest
from meshplan.tools.cli.batch import add_batch_arguments, run_batch
from meshplan.tools.render.progress import Progress


def fake_plan(req: PlanRequest, stop_event: threading.Event | None = None) -> PlanResult:
    if req.model.preset == "no-such-model":
        raise KeyError(f"unknown model {req.model.preset!r}: known: llama3-8b")
    return no_plan("INFEASIBLE")


def test_targets() -> None:
    assert make_target("localhost:50051") == "localhost:50051"
    assert make_target("dns:///planner.ns.svc:50051") == "dns:///planner.ns.svc:50051"
    assert make_target(["127.0.0.1:1", "127.0.0.1:2"]) == "ipv4:127.0.0.1:1,127.0.0.1:2"
    assert make_target("127.0.0.1:1,127.0.0.1:2") == "ipv4:127.0.0.1:1,127.0.0.1:2"
    assert make_target(["[::1]:1", "[::1]:2"]) == "ipv6:[::1]:1,[::1]:2"
    assert make_target(["127.0.0.1:1"]) == "127.0.0.1:1"
    assert make_target("a.example:1,a.example:1") == "a.example:1"  # a repeated target once
    assert (
        make_target(["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:1"]) == "ipv4:127.0.0.1:1,127.0.0.1:2"
    )
    with pytest.raises(ValueError, match="DNS name"):
        make_target(["a.example:1", "b.example:1"])
    with pytest.raises(ValueError):
        make_target([])


def test_service_config_balances_and_retries() -> None:
    config = json.loads(service_config())
    assert config["loadBalancingConfig"] == [{"round_robin": {}}]
    policy = config["methodConfig"][0]["retryPolicy"]
    assert policy["retryableStatusCodes"] == ["UNAVAILABLE"] and policy["maxAttempts"] >= 2
    assert "retryPolicy" not in json.loads(service_config(max_attempts=1))["methodConfig"][0]
    with PlannerClient(f"{LOOPBACK}:1", max_attempts=1) as client, pytest.raises(UnavailableError):
        client.plan(small_request(), timeout=2)  # a valid channel without retries


def test_errors_are_typed_and_carry_violations() -> None:
    bad = error_details_pb2.BadRequest(
        field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field="cluster.num_gpus", description="x")
        ]
    )
    packed = any_pb2.Any()
    packed.Pack(bad)
    status = status_pb2.Status(code=3, message="bad", details=[packed])
    metadata = (("grpc-status-details-bin", status.SerializeToString()), ("x-request-id", "r1"))
    err = error_from_parts(grpc.StatusCode.INVALID_ARGUMENT, "bad", metadata)
    assert isinstance(err, InvalidRequestError) and err.request_id == "r1"
    assert [(v.field, v.description) for v in err.violations] == [("cluster.num_gpus", "x")]
    kinds = {
        grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
        grpc.StatusCode.RESOURCE_EXHAUSTED: OverloadedError,
        grpc.StatusCode.UNAVAILABLE: UnavailableError,
        grpc.StatusCode.INTERNAL: PlannerError,
    }
    for code, kind in kinds.items():
        assert type(error_from_parts(code, "m")) is kind


def test_unreachable_server_is_unavailable() -> None:
    with PlannerClient(f"{LOOPBACK}:1", max_attempts=2) as client, pytest.raises(UnavailableError):
        client.plan(small_request(), timeout=2)


def test_client_refuses_values_the_proto_cannot_hold() -> None:
    req = small_request().model_copy(update={"search": small_request().search.model_copy(
        update={"tp": 2**40})})  # fmt: skip
    with PlannerClient(f"{LOOPBACK}:1") as client, pytest.raises(InvalidRequestError) as bad:
        client.plan(req, timeout=1)
    assert bad.value.violations[0].field == "search.tp"


def test_async_client_matches_the_sync_one() -> None:
    async def calls(port: int) -> tuple[PlanResult, list[int], int, str]:
        async with AsyncPlannerClient([f"{LOOPBACK}:{port}"]) as client:
            result = await client.plan(small_request(), timeout=5)
            items = [i.index async for i in client.plan_batch([small_request()] * 3, timeout=5)]
            catalog = await client.list_catalog(timeout=5)
            with pytest.raises(InvalidRequestError) as bad:
                await client.plan(PlanRequest.model_validate(
                    {"model": {"preset": "no-such-model"}, "cluster": {"num_gpus": 8}}), timeout=5)  # fmt: skip
            assert bad.value.violations[0].field == "model.preset"
            return result, sorted(items), len(catalog.models), await client.health()

    with running_server(plan_fn=fake_plan) as (port, _):
        result, items, models, health = asyncio.run(calls(port))
        with PlannerClient(f"{LOOPBACK}:{port}") as client:
            assert client.plan(small_request(), timeout=5) == result
    assert items == [0, 1, 2] and models > 0 and health == "SERVING"


def _batch_args(tmp_path: Path, port: int, output: str, reqs: list[dict]) -> argparse.Namespace:
    path = tmp_path / "requests.json"
    path.write_text(json.dumps(reqs))
    parser = argparse.ArgumentParser()
    add_batch_arguments(parser)
    return parser.parse_args(
        ["--server", f"{LOOPBACK}:{port}", "--request", str(path), "--output", output,
         "--chunk-size", "2", "--no-progress"]
    )  # fmt: skip


def test_batch_cli_writes_json_lines_and_csv(tmp_path: Path) -> None:
    good = {"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": 8}}
    bad = {"model": {"preset": "no-such-model"}, "cluster": {"num_gpus": 8}}
    reqs = [good, good, bad, good, good]
    with running_server(plan_fn=fake_plan) as (port, _):
        out = tmp_path / "out.jsonl"
        assert run_batch(_batch_args(tmp_path, port, str(out), reqs)) == 1  # one item failed
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert sorted(r["index"] for r in rows) == [0, 1, 2, 3, 4]
        errors = [r for r in rows if "error" in r]
        assert [e["index"] for e in errors] == [2]
        assert errors[0]["error"]["field_violations"][0]["field"] == "requests[2].model.preset"
        assert all(r["result"]["status"] == "INFEASIBLE" for r in rows if "result" in r)
        out_csv = tmp_path / "out.csv"
        assert run_batch(_batch_args(tmp_path, port, str(out_csv), [good] * 3)) == 0
        table = list(csv.DictReader(out_csv.open()))
        assert sorted(int(r["index"]) for r in table) == [0, 1, 2]
        assert {r["status"] for r in table} == {"INFEASIBLE"} and table[0]["gpu"] == "h100-sxm-80gb"


def test_batch_cli_keeps_a_chunk_in_flight_on_every_server(tmp_path: Path) -> None:
    """Two servers, chunks of 2: the servers solve at the same time (one chunk in flight on
    each), and every request is answered once, with a bad request's path counted in the whole
    file."""
    good = {"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": 8}}
    bad = {"model": {"preset": "no-such-model"}, "cluster": {"num_gpus": 8}}
    spans: dict[str, list[tuple[float, float]]] = {"a": [], "b": []}

    def timed(name: str) -> Any:
        def plan(req: PlanRequest) -> PlanResult:
            started = time.monotonic()
            time.sleep(0.2)
            spans[name].append((started, time.monotonic()))
            return fake_plan(req)

        return plan

    with (
        running_server(plan_fn=timed("a"), max_concurrent_solves=1) as (a, _),
        running_server(plan_fn=timed("b"), max_concurrent_solves=1) as (b, _),
    ):
        out = tmp_path / "out.jsonl"
        args = _batch_args(tmp_path, a, str(out), [good, good, good, bad, good, good, good, good])
        args.server = f"{LOOPBACK}:{a},{LOOPBACK}:{b}"
        assert run_batch(args) == 1
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["index"] for r in rows) == list(range(8))
    errors = [r for r in rows if "error" in r]
    assert [e["index"] for e in errors] == [3]
    assert errors[0]["error"]["field_violations"][0]["field"] == "requests[3].model.preset"
    overlap = [
        (x, y) for x in spans["a"] for y in spans["b"] if x[0] < y[1] and y[0] < x[1]
    ]  # solves on both servers at once: sent one chunk at a time, there would be none
    assert overlap, spans


def test_batch_cli_rejects_an_unreadable_file(tmp_path: Path) -> None:
    args = _batch_args(tmp_path, 1, "-", [{"model": {}, "cluster": {"num_gpus": 0}}])
    assert run_batch(args) == 2


def test_progress_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    bar = Progress(4, enabled=True)
    bar.update()
    bar.update("ERROR")
    bar.close()
    assert "2/4" in err.getvalue() and "1 error" in err.getvalue()  # rich's bar, at its end
