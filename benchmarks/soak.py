"""Soak: the service under many clients and under fuzzed calls, against issue 11's targets.

The server runs as its own process (`python -m meshplan.server`, default settings, a token per
client, JSON logs) so that its RSS is its own. Two phases:

1. load: `--clients` asyncio clients (each with its own token) call Plan, Evaluate, PlanBatch
   and ListCatalog for `--seconds`, backing off exponentially on RESOURCE_EXHAUSTED, while a
   separate process checks health every 50 ms. Targets: only OK and RESOURCE_EXHAUSTED, health
   Check p99 <= 50 ms, RSS growth <= 50 MB (after the load and a few seconds idle).
2. fuzz: `--fuzz` raw calls (benchmarks/soak_fuzz.py: the property tests' generated requests,
   the same with extreme fields, random layouts, batches, garbage bytes) with deadlines of
   0.05-1 s. Targets: no INTERNAL (status, batch item, or server log line) and no call the
   server ended later than its deadline + 100 ms (the `call_s` of its log line).

Then SIGTERM: the server must drain and exit 0.

    python -m benchmarks soak [--quick] [--clients N] [--seconds S] [--fuzz N] [--json PATH]
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.common import (
    LOOPBACK,
    Summary,
    arg_parser,
    fmt_s,
    header,
    table,
    verdict,
    write_json,
)
from benchmarks.soak_fuzz import BATCH, FuzzCall, fuzz_calls

ROOT = Path(__file__).resolve().parent.parent
HEALTH_P99_S, RSS_GROWTH_MB, LATE_S = 0.050, 50.0, 0.100
FULL = {"clients": 64, "seconds": 60.0, "fuzz": 20_000}
QUICK = {"clients": 8, "seconds": 3.0, "fuzz": 200}
FUZZ_THREADS = 32
_SERVING = re.compile(r"on [^ ]+:(\d+) \(")


class Server:
    """`python -m meshplan.server` on a free loopback port with JSON logs in a file."""

    def __init__(self, workdir: Path, tokens: list[str]) -> None:
        (workdir / "tokens").write_text("\n".join(tokens) + "\n")
        self.log = workdir / "server.log"
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        cmd = [sys.executable, "-m", "meshplan.server", "--host", LOOPBACK, "--port", "0"]
        cmd += ["--auth-token-file", str(workdir / "tokens"), "--log-format", "json"]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=self.log.open("w"))
        deadline = time.monotonic() + 120
        while (found := _SERVING.search(self.log.read_text())) is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start:\n" + self.log.read_text())
            time.sleep(0.05)
        self.target = f"{LOOPBACK}:{found.group(1)}"

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # gRPC core's own lines
        return out

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -9


# --- phase 1: load ----------------------------------------------------------------------------


def _requests() -> list[tuple[str, Any]]:
    from meshplan.solver.schema import EvaluateRequest, PlanRequest

    on_8 = {"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": 8}}
    small = {**on_8, "options": {"time_limit_s": 2}}
    infeasible = {"model": {"preset": "llama3-405b"}, "cluster": {"num_gpus": 8}}
    moe = {
        "model": {"preset": "mixtral-8x7b"},
        "cluster": {"num_gpus": 32},
        "options": {"time_limit_s": 2},
    }
    layout = {"tp": 8, "pp": 1, "dp": 1, "micro_batch_size": 1, "num_microbatches": 8}
    return [
        ("plan", PlanRequest.model_validate(small)),
        ("plan", PlanRequest.model_validate(infeasible)),
        ("plan", PlanRequest.model_validate(moe)),
        ("evaluate", EvaluateRequest.model_validate({**on_8, "config": layout})),
        ("batch", [PlanRequest.model_validate(small), PlanRequest.model_validate(infeasible)] * 2),
        ("catalog", None),
    ]


async def _client(target: str, token: str, until: float, seed: int, codes: Counter) -> None:
    from meshplan.client import AsyncPlannerClient, PlannerError

    rng, mix, backoff = random.Random(seed), _requests(), 0
    async with AsyncPlannerClient(target, token=token, default_timeout=120) as client:
        while time.monotonic() < until:
            kind, req = rng.choice(mix)
            try:
                if kind == "plan":
                    await client.plan(req)
                elif kind == "evaluate":
                    await client.evaluate(req)
                elif kind == "batch":
                    async for item in client.plan_batch(req):
                        if item.error is not None:
                            codes[f"item {item.error.code.name}"] += 1
                else:
                    await client.list_catalog()
                codes["OK"] += 1
                backoff = 0
            except PlannerError as err:
                codes[err.code.name] += 1
                if err.code.name == "RESOURCE_EXHAUSTED":
                    backoff += 1
                    await asyncio.sleep(min(2.0, 0.05 * 2**backoff) * rng.uniform(0.5, 1.5))


def _health_prober(target: str, seconds: float, conn: Any) -> None:
    """In its own process: Check every 50 ms for `seconds`; sends back the latencies."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    latencies, failures = [], 0
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        stub.Check(health_pb2.HealthCheckRequest(), timeout=10)  # connected before the clock
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            t0 = time.perf_counter()
            try:
                stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                latencies.append(time.perf_counter() - t0)
            except grpc.RpcError:
                failures += 1
                latencies.append(1.0)
            time.sleep(max(0.0, 0.05 - (time.perf_counter() - t0)))
    conn.send((latencies, failures))


def load_phase(server: Server, tokens: list[str], seconds: float, idle_s: float) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    prober = ctx.Process(target=_health_prober, args=(server.target, seconds, child), daemon=True)
    prober.start()
    codes: Counter = Counter()
    asyncio.run(_client(server.target, tokens[0], time.monotonic() + 1.0, -1, Counter()))  # warm
    rss_before = server.rss_mb()

    async def run() -> None:
        until = time.monotonic() + seconds
        await asyncio.gather(
            *(_client(server.target, t, until, i, codes) for i, t in enumerate(tokens))
        )

    t0 = time.monotonic()
    asyncio.run(run())
    wall = time.monotonic() - t0
    latencies, failures = parent.recv() if parent.poll(seconds + 120) else ([1.0], 1)
    prober.join(30)
    time.sleep(idle_s)  # the server returns freed memory every few seconds
    rss_after = server.rss_mb()
    return {
        "clients": len(tokens),
        "seconds": wall,
        "codes": dict(codes),
        "health": Summary.of(latencies).__dict__,
        "health_failures": failures,
        "rss_before_mb": rss_before,
        "rss_after_mb": rss_after,
    }


# --- phase 2: fuzz ----------------------------------------------------------------------------


def _fuzz_one(channel: Any, call: FuzzCall, index: int, token: str) -> tuple[str, int, float]:
    """(status, INTERNAL batch items, client-side seconds) of one raw call."""
    import grpc

    from meshplan.v1 import planner_pb2

    path = f"/meshplan.v1.Planner/{call.method}"
    metadata = (("authorization", f"Bearer {token}"), ("x-request-id", f"fz-{index}"))
    t0 = time.perf_counter()
    internal_items = 0
    try:
        if call.method == BATCH:
            for raw in channel.unary_stream(path)(
                call.body, timeout=call.deadline_s, metadata=metadata
            ):
                answer = planner_pb2.PlanBatchResponse.FromString(raw)
                internal_items += (
                    answer.WhichOneof("outcome") == "error" and answer.error.code == "INTERNAL"
                )
        else:
            channel.unary_unary(path)(call.body, timeout=call.deadline_s, metadata=metadata)
        status = "OK"
    except grpc.RpcError as err:
        status = err.code().name
    return status, internal_items, time.perf_counter() - t0


def fuzz_phase(server: Server, tokens: list[str], count: int) -> dict[str, Any]:
    import grpc

    calls = fuzz_calls(count)
    channels = [grpc.insecure_channel(server.target) for _ in range(FUZZ_THREADS)]
    t0 = time.monotonic()
    with ThreadPoolExecutor(FUZZ_THREADS) as pool:
        futures = [
            pool.submit(_fuzz_one, channels[i % FUZZ_THREADS], c, i, tokens[i % len(tokens)])
            for i, c in enumerate(calls)
        ]
        outcomes = [f.result() for f in futures]
    wall = time.monotonic() - t0
    for ch in channels:
        ch.close()
    by_id = {line.get("request_id"): line for line in server.lines() if line.get("method")}
    late, logged, internal_lines = [], 0, 0
    for i, call in enumerate(calls):
        line = by_id.get(f"fz-{i}")
        if line is None:
            continue  # refused by gRPC itself (e.g. a message over the size cap)
        logged += 1
        if line.get("call_s", 0.0) > call.deadline_s + LATE_S:
            late.append(
                {
                    "index": i,
                    "deadline_s": call.deadline_s,
                    "call_s": line["call_s"],
                    "kind": call.kind,
                }
            )
    internal_lines = sum(1 for line in server.lines() if line.get("status") == "INTERNAL")
    return {
        "calls": len(calls),
        "seconds": wall,
        "codes": dict(Counter(status for status, _, _ in outcomes)),
        "kinds": dict(Counter(c.kind for c in calls)),
        "internal": sum(s == "INTERNAL" for s, _, _ in outcomes),
        "internal_items": sum(items for _, items, _ in outcomes),
        "internal_log_lines": internal_lines,
        "logged": logged,
        "late": late[:20],
        "late_count": len(late),
        "client_s": Summary.of([s for _, _, s in outcomes]).__dict__,
    }


# --- report -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = arg_parser("soak", "The service under many clients and fuzzed calls (issue 11's targets).")
    p.add_argument("--clients", type=int, help=f"concurrent clients (default {FULL['clients']})")
    p.add_argument("--seconds", type=float, help=f"load duration (default {FULL['seconds']:.0f})")
    p.add_argument("--fuzz", type=int, help=f"fuzzed calls (default {FULL['fuzz']:,})")
    a = p.parse_args(argv)
    base = QUICK if a.quick else FULL
    clients, seconds, fuzz = (
        a.clients or base["clients"],
        a.seconds or base["seconds"],
        a.fuzz or base["fuzz"],
    )
    print(header("soak", clients=clients, seconds=seconds, fuzz=fuzz), flush=True)
    tokens = [
        f"soak-client-{i:03d}-{os.urandom(6).hex()}" for i in range(max(clients, FUZZ_THREADS))
    ]
    with tempfile.TemporaryDirectory(prefix="meshplan-soak-") as tmp:
        server = Server(Path(tmp), tokens)
        try:
            load = load_phase(server, tokens[:clients], seconds, idle_s=1.0 if a.quick else 6.0)
            fz = fuzz_phase(server, tokens, fuzz)
        finally:
            exit_code = server.stop()
    report = {"load": load, "fuzz": fz, "exit_code": exit_code}
    _print(report)
    write_json(a.json, {"report": report})
    return 0


def _print(r: dict[str, Any]) -> None:
    load, fz = r["load"], r["fuzz"]
    growth = load["rss_after_mb"] - load["rss_before_mb"]
    h = load["health"]
    print(table(["load", "value"], [
        ["clients x seconds", f"{load['clients']} x {load['seconds']:.1f} s"],
        ["answers", ", ".join(f"{k} {v}" for k, v in sorted(load["codes"].items()))],
        ["health Check", f"p50 {fmt_s(h['p50'])}  p99 {fmt_s(h['p99'])}  max {fmt_s(h['max'])}  (n={h['n']}, failed {load['health_failures']})"],
        ["server RSS", f"{load['rss_before_mb']:.0f} MB -> {load['rss_after_mb']:.0f} MB"],
    ]))  # fmt: skip
    print()
    print(table(["fuzz", "value"], [
        ["calls", f"{fz['calls']:,} in {fz['seconds']:.1f} s ({', '.join(f'{k} {v}' for k, v in sorted(fz['kinds'].items()))})"],
        ["answers", ", ".join(f"{k} {v}" for k, v in sorted(fz["codes"].items()))],
        ["INTERNAL", f"{fz['internal']} calls, {fz['internal_items']} batch items, {fz['internal_log_lines']} log lines"],
        ["past deadline + 100 ms", f"{fz['late_count']} of {fz['logged']} logged calls"],
    ]))  # fmt: skip
    only = set(load["codes"]) <= {"OK", "RESOURCE_EXHAUSTED"}
    internal = fz["internal"] + fz["internal_items"] + fz["internal_log_lines"]
    parts = [
        f"load answers only OK/RESOURCE_EXHAUSTED {'met' if only else 'MISSED: ' + str(sorted(load['codes']))}",
        f"health p99 {verdict(h['p99'], HEALTH_P99_S)}",
        f"RSS growth {verdict(max(growth, 0.0), RSS_GROWTH_MB, lambda x: f'{x:.0f} MB')}",
        f"fuzz INTERNAL {'met (0)' if internal == 0 else f'MISSED: {internal}'}",
        f"fuzz past deadline+100ms {'met (0)' if fz['late_count'] == 0 else 'MISSED: ' + str(fz['late_count'])}",
        f"drain {'met (exit 0)' if r['exit_code'] == 0 else 'MISSED: exit ' + str(r['exit_code'])}",
    ]
    print("\nsummary: " + "; ".join(parts))


if __name__ == "__main__":
    sys.exit(main())
