"""Prometheus metrics scraped over HTTP after a few calls, and JSON-lines logs with the request
id, on real servers (in-process, and `python -m meshplan.server` for the flags and SIGHUP)."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from test_grpc_support import LOOPBACK, BlockingPlan, no_plan, running_server, small_request

from meshplan.client import (
    DeadlineExceededError,
    InvalidRequestError,
    OverloadedError,
    PlannerClient,
)
from meshplan.client.sync import plan_message
from meshplan.server.cli import add_serve_arguments, settings_from_args
from meshplan.server.logs import FIELDS, JsonFormatter, TextFormatter
from meshplan.solver.schema import PlanRequest
from meshplan.v1 import planner_pb2, planner_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent


def _scrape(port: int) -> dict[str, float]:
    """Every sample of the /metrics page: 'name{labels}' -> value."""
    with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/metrics", timeout=5) as page:
        text = page.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def test_metrics_count_calls_plans_rejections_and_latency() -> None:
    fake = BlockingPlan()
    settings = {
        "metrics_port": 0,
        "metrics_host": LOOPBACK,
        "max_concurrent_solves": 1,
        "max_queued_solves": 1,
        "max_waiting_calls": 0,  # a full server refuses at once: one RESOURCE_EXHAUSTED
        "plan_fn": fake,
    }
    with (
        running_server(**settings) as (port, server),
        PlannerClient(f"{LOOPBACK}:{port}") as client,
    ):
        assert server.metrics_port
        errors: list[Exception] = []

        def blocked_call() -> None:
            try:
                client.plan(small_request(time_limit_s=30), timeout=2)
            except DeadlineExceededError as err:
                errors.append(err)

        blocked = [threading.Thread(target=blocked_call) for _ in range(2)]
        for t in blocked:
            t.start()
        fake.wait_started()
        time.sleep(0.1)
        busy = _scrape(server.metrics_port)
        assert busy["meshplan_solves_in_flight"] == 1 and busy["meshplan_solves_queued"] == 1
        with pytest.raises(OverloadedError):
            client.plan(small_request(), timeout=2)
        for t in blocked:
            t.join(10)
        assert len(errors) == 2
        fake.max_s = 0.0
        client.plan(small_request(time_limit_s=1), timeout=30)  # not capped: an answer
        with pytest.raises(InvalidRequestError):
            client.plan(
                PlanRequest.model_validate(  # a name longer than the server takes
                    {"model": {"preset": "x" * 300}, "cluster": {"num_gpus": 8}}
                ),
                timeout=5,
            )
        client.list_catalog(timeout=5)
        m = _scrape(server.metrics_port)
    assert m['meshplan_calls_total{code="OK",method="Plan",transport="grpc"}'] == 1
    assert m['meshplan_calls_total{code="DEADLINE_EXCEEDED",method="Plan",transport="grpc"}'] == 2
    assert m['meshplan_calls_total{code="RESOURCE_EXHAUSTED",method="Plan",transport="grpc"}'] == 1
    assert m['meshplan_calls_total{code="INVALID_ARGUMENT",method="Plan",transport="grpc"}'] == 1
    assert m['meshplan_calls_total{code="OK",method="ListCatalog",transport="grpc"}'] == 1
    assert m['meshplan_rejected_calls_total{method="Plan",transport="grpc"}'] == 1
    assert m['meshplan_plans_total{status="INFEASIBLE"}'] == 1  # the fake's answer
    assert m["meshplan_tree_processes"] >= 1 and m["meshplan_tree_resident_memory_bytes"] > 1e7
    assert m['meshplan_call_duration_seconds_count{method="Plan",transport="grpc"}'] == 5
    assert m['meshplan_solve_duration_seconds_count{method="Plan"}'] >= 2
    assert m["meshplan_solves_in_flight"] == 0 and m["meshplan_solves_queued"] == 0
    assert m["process_resident_memory_bytes"] > 0


def test_json_log_lines_carry_the_request_id(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="meshplan.server")
    with (
        running_server(plan_fn=lambda req, stop_event=None: no_plan("INFEASIBLE")) as (port, _),
        grpc.insecure_channel(f"{LOOPBACK}:{port}") as channel,
    ):
        stub = planner_pb2_grpc.PlannerStub(channel)
        stub.Plan(plan_message(small_request()), timeout=5, metadata=(("x-request-id", "run-7"),))
    record = next(r for r in caplog.records if "request_id=run-7" in r.getMessage())
    line = JsonFormatter().format(record)
    assert "\n" not in line
    obj = json.loads(line)
    assert obj["request_id"] == "run-7" and obj["method"] == "Plan" and obj["status"] == "OK"
    assert obj["level"] == "INFO" and obj["caller"] == f"ipv4:{LOOPBACK}" and "solve_s" in obj
    text = TextFormatter().format(record)
    assert text.count("request_id=run-7") == 1 and "caller=ipv4:127.0.0.1" in text


def test_every_setting_is_a_flag_and_an_environment_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    monkeypatch.setenv("MESHPLAN_MAX_CALLS_PER_CALLER", "5")
    monkeypatch.setenv("MESHPLAN_LOG_FORMAT", "json")
    args = parser.parse_args(["--max-deadline-s", "12", "--no-reflection", "--metrics-port", "0"])
    s = settings_from_args(args)
    assert (s.max_deadline_s, s.reflection, s.metrics_port) == (12.0, False, 0)
    assert (s.max_calls_per_caller, s.log_format) == (5, "json")  # from the environment
    args = parser.parse_args(["--max-calls-per-caller", "7"])
    assert settings_from_args(args).max_calls_per_caller == 7  # a flag wins


def test_serve_process_json_logs_metrics_flag_and_sighup(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("first-token-0123456789\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "meshplan.server", "--host", LOOPBACK, "--port", "0"]
    cmd += ["--log-format", "json", "--metrics-port", "0", "--auth-token-file", str(tokens)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    lines: list[dict] = []
    try:
        assert proc.stderr is not None
        first = json.loads(proc.stderr.readline())
        found = re.search(r"on [^ ]+:(\d+) .*metrics on :(\d+)", first["message"])
        assert found, first
        port, metrics = int(found.group(1)), int(found.group(2))
        tokens.write_text("second-token-0123456789\n")
        proc.send_signal(signal.SIGHUP)
        time.sleep(0.3)
        with PlannerClient(f"{LOOPBACK}:{port}", token="second-token-0123456789") as client:
            assert client.list_catalog(timeout=10).gpus
        assert (
            _scrape(metrics)[
                'meshplan_calls_total{code="OK",method="ListCatalog",transport="grpc"}'
            ]
            == 1
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        lines = [json.loads(line) for line in proc.stderr.read().splitlines()]
    finally:
        if proc.poll() is None:
            proc.kill()
    calls = [obj for obj in lines if obj.get("method") == "ListCatalog"]
    assert len(calls) == 1 and calls[0]["status"] == "OK" and len(calls[0]["request_id"]) == 16
    assert any("tokens reloaded" in obj["message"] for obj in lines)


def test_bad_settings_exit_2_with_one_line(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    short = tmp_path / "tokens"
    short.write_text("too-short\n")
    for flags, word in (
        (["--auth-token-file", str(short)], "--auth-token-file"),
        (["--auth-token-file", str(tmp_path / "missing")], "--auth-token-file"),
        (["--tls-cert", "x.pem"], "tls_cert and tls_key go together"),
        (["--max-calls-per-caller", "0"], "--max-calls-per-caller"),
        (["--log-level", "CHATTY"], "--log-level"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "meshplan.server", "--port", "0", *flags],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert word in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_refusals_for_a_token_are_counted_all_and_logged_at_most_ten_a_second(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from meshplan.server.metrics import Metrics
    from meshplan.server.runtime import REFUSED_LINES_PER_S, Runtime
    from meshplan.server.settings import Settings

    metrics = Metrics()
    rt = Runtime(Settings(solver_processes=0, max_concurrent_solves=1), metrics)
    try:
        with caplog.at_level(logging.INFO, logger="meshplan.server"):
            for _ in range(25):
                rt.refused("/meshplan.v1.Planner/Plan", "ipv4:10.0.0.9:5555")
            assert len(caplog.records) == REFUSED_LINES_PER_S
            rt._refused_window -= 1.0  # a second later
            rt.refused("/meshplan.v1.Planner/Plan", "ipv4:10.0.0.9:5555")
        assert caplog.records[-1].__dict__[FIELDS]["unlogged_before"] == 15
        assert metrics.calls.labels("Plan", "UNAUTHENTICATED", "grpc")._value.get() == 26
    finally:
        rt.runner.close()


def test_past_ten_refusals_a_second_from_one_address_each_refusal_waits() -> None:
    """A caller looping on made-up tokens is answered after REFUSAL_DELAY_S past the first
    FREE_REFUSALS_PER_S a second from its address; another address is not slowed by it."""
    from meshplan.server.metrics import Metrics
    from meshplan.server.runtime import FREE_REFUSALS_PER_S, REFUSAL_DELAY_S, Runtime
    from meshplan.server.settings import Settings

    rt = Runtime(Settings(solver_processes=0, max_concurrent_solves=1), Metrics())
    try:
        waits = [rt.refused("/meshplan.v1.Planner/Plan", f"ipv4:10.0.0.9:{p}") for p in range(15)]
        late = [REFUSAL_DELAY_S] * (15 - FREE_REFUSALS_PER_S)
        assert REFUSAL_DELAY_S > 0 and waits == [0.0] * FREE_REFUSALS_PER_S + late
        assert rt.refused("/meshplan.v1.Planner/Plan", "ipv4:10.0.0.7:5555") == 0.0
        rt._refused_window -= 1.0  # a second later: the count starts again
        assert rt.refused("/meshplan.v1.Planner/Plan", "ipv4:10.0.0.9:5555") == 0.0
    finally:
        rt.runner.close()


def test_a_refused_grpc_call_past_the_free_ones_is_answered_after_the_delay(
    tmp_path: Path,
) -> None:
    from meshplan.server.runtime import FREE_REFUSALS_PER_S

    tokens = tmp_path / "tokens"
    tokens.write_text("a-real-token-0123456789\n")
    with (
        running_server(auth_token_file=str(tokens)) as (port, server),
        grpc.insecure_channel(f"{LOOPBACK}:{port}") as channel,
    ):
        server.runtime.refusal_delay_s = 0.4
        stub = planner_pb2_grpc.PlannerStub(channel)
        took = []
        for _ in range(FREE_REFUSALS_PER_S + 2):
            began = time.monotonic()
            with pytest.raises(grpc.RpcError) as refused:
                stub.Plan(planner_pb2.PlanRequest(), timeout=10, metadata=_made_up)
            took.append(time.monotonic() - began)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert took[-1] >= 0.4 and took[-2] >= 0.4, took
    assert min(took[:3]) < 0.4, took  # (at least the first ones are answered at once)


_made_up = (("authorization", "Bearer made-up-token-0123456789"),)


def test_the_event_loops_lag_is_observed_and_a_blocked_loop_shows() -> None:
    import asyncio

    from meshplan.server.metrics import Metrics, watch_loop_lag

    metrics = Metrics()

    async def go() -> None:
        watcher = asyncio.create_task(watch_loop_lag(metrics, every_s=0.01))
        await asyncio.sleep(0.05)
        time.sleep(0.3)  # the loop blocked: the next wake-up is ~0.3 s late
        await asyncio.sleep(0.05)
        watcher.cancel()

    asyncio.run(go())
    registry = metrics.registry
    count = registry.get_sample_value("meshplan_event_loop_lag_seconds_count")
    fast = registry.get_sample_value("meshplan_event_loop_lag_seconds_bucket", {"le": "0.1"})
    assert count is not None and fast is not None and count >= 5
    assert count - fast == 1  # the one sample the blocked loop delayed


def test_each_garbage_collection_is_timed_by_generation() -> None:
    import gc

    from meshplan.server.metrics import Metrics, watch_collections

    metrics = Metrics()
    stop = watch_collections(metrics)
    try:
        gc.collect()
    finally:
        stop()
    gc.collect()  # not observed any more
    count = metrics.registry.get_sample_value(
        "meshplan_gc_pause_seconds_count", {"generation": "2"}
    )
    assert count == 1
