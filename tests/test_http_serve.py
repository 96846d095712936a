"""The HTTP port as a server's: `meshplan serve --http-port` answers with the page's tools
installed and drains on SIGTERM; a client that goes away stops its solve; a draining server
refuses new calls with 503."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from http_support import http_server, send
from test_grpc_support import LOOPBACK, big_request
from test_http_api import as_json

from meshplan.client.sync import plan_message
from meshplan.server.http.extras import PageTools, installed

ROOT = Path(__file__).resolve().parent.parent
_HTTP = re.compile(r"serving JSON over HTTP and the planner page on :(\d+)")


def test_meshplan_serve_answers_json_and_the_page_with_its_tools() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "meshplan", "serve", "--host", LOOPBACK, "--port", "0",
         "--http-port", "0", "--solver-processes", "0"],
        cwd=ROOT, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    log: list[str] = []

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            log.append(line)
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    try:
        port, deadline = 0, time.monotonic() + 60
        while not port and time.monotonic() < deadline:
            try:
                found = _HTTP.search(lines.get(timeout=0.2))
            except queue.Empty:
                assert proc.poll() is None, "".join(log)
                continue
            port = int(found.group(1)) if found else 0
        assert port, "".join(log)
        base = f"http://{LOOPBACK}:{port}"
        meta = send(f"{base}/page/meta").body
        assert meta["export_kinds"] and "gpt2" in meta["hf_model_types"] and meta["walls"]
        plan = send(f"{base}/v1/plan", {"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": 8}})  # fmt: skip
        assert plan.status == 200 and plan.body["status"] == "PLAN_STATUS_OPTIMAL"
        assert "meshplan planner" in send(f"{base}/").body
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, "".join(log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_a_server_started_without_the_tools_says_so() -> None:
    from meshplan.server.http.extras import install

    before = installed()
    with http_server() as (base, _, _server):
        install(PageTools())  # as `python -m meshplan.server` runs
        try:
            meta = send(f"{base}/page/meta").body
            assert meta["export_kinds"] == [] and meta["walls"] == {}
            export = send(f"{base}/page/export", {})
            assert export.status == 501 and "meshplan serve" in export.body["error"]["message"]
        finally:
            install(before)


def _metric(server: object, name: str, *labels: str) -> float:
    metric = getattr(server.metrics, name)  # type: ignore[attr-defined]
    return metric.labels(*labels)._value.get() if labels else metric._value.get()


def test_a_client_that_goes_away_stops_its_solve() -> None:
    with http_server() as (base, _, server):
        body = json.dumps(as_json(plan_message(big_request(time_limit_s=30))))
        conn = http.client.HTTPConnection(LOOPBACK, server.http_port, timeout=0.5)
        conn.request("POST", "/v1/plan", body=body, headers={"Content-Type": "application/json"})
        time.sleep(0.5)  # the solve has started
        assert _metric(server, "solves_in_flight") == 1
        conn.close()  # gone, without an answer
        deadline = time.monotonic() + 10
        while _metric(server, "calls", "Plan", "CANCELLED", "http") < 1 or _metric(server, "solves_in_flight"):  # fmt: skip
            assert time.monotonic() < deadline, "the solve did not stop"
            time.sleep(0.05)


def test_a_draining_server_refuses_new_calls_with_503() -> None:
    with http_server() as (base, _, server):

        async def drain() -> None:
            server.runtime.draining = True

        asyncio.run_coroutine_threadsafe(drain(), server.loop).result(5)
        refused = send(f"{base}/v1/plan", {"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": 8}})  # fmt: skip
        assert refused.status == 503 and refused.body["error"]["status"] == "UNAVAILABLE"
