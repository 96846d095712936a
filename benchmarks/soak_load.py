"""The soak benchmark's load phase: asyncio clients with backoff, and a health prober process
per port (the gRPC port and the plaintext health port).

Callers: one polite caller (its own token, one small plan at a time, no burst); tenants that
share three tokens (plans, evaluations, batches, the catalog, and scheduler queries, among them
curves with 2,000 observations and requests of ~0.9 MB, near the 1 MiB cap); and callers with
tokens they made up (refused UNAUTHENTICATED before anything is parsed, counted apart)."""

from __future__ import annotations

import asyncio
import math
import multiprocessing as mp
import random
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import grpc

from benchmarks.common import Summary

if TYPE_CHECKING:
    from benchmarks.soak import Server


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


def _scheduler_requests() -> list[tuple[str, Any]]:
    """Curves as their wire bytes, made once (a 16,000-observation request takes the client
    ~0.75 s of CPU to convert: made at each call, the clients would load the machine more than
    the server)."""
    from benchmarks.soak_probe import observed_curve
    from meshplan.convert import to_proto
    from meshplan.v1 import scheduler_pb2

    def wire(observations: int, seed: int) -> bytes:
        req = observed_curve(observations, seed=seed)
        return to_proto(req, scheduler_pb2.ScalingCurveRequest).SerializeToString()

    return [
        ("curve", wire(2_000, 1)),
        ("curve", wire(16_000, 2)),  # ~0.9 MB on the wire
        ("curve", wire(40, 3)),
    ]


async def _client(
    target: str, token: str, until: float, seed: int, codes: Counter, mix: list | None = None
) -> None:
    from meshplan.client import AsyncPlannerClient, PlannerError
    from meshplan.client.exceptions import error_from_rpc

    rng, backoff = random.Random(seed), 0
    mix = mix if mix is not None else _requests()
    async with AsyncPlannerClient(target, token=token, default_timeout=120) as client:
        while time.monotonic() < until:
            kind, req = rng.choice(mix)
            try:
                if kind == "plan":
                    await client.plan(req, timeout=30)
                elif kind == "curve":  # raw bytes on the client's own channel
                    curve = client._channel.unary_unary("/meshplan.v1.Planner/ScalingCurve")
                    metadata = (("authorization", f"Bearer {token}"),)
                    try:
                        await curve(req, timeout=10, metadata=metadata)
                    except grpc.RpcError as err:
                        raise error_from_rpc(err, "") from None
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
    """In its own process and session (a kubelet's probe does not share the CPU share of the
    benchmark's 64 callers): Check every 50 ms for `seconds`; sends back the latencies."""
    import os

    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    os.setsid()
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


LAG = "meshplan_event_loop_lag_seconds"


def lag_buckets(
    url: str | None, name: str = LAG, labels: dict[str, str] | None = None
) -> dict[float, float] | None:
    """A histogram of the server's metrics (the event loop's lag unless named): cumulative
    count by bucket bound, of the series with `labels` (None: no such series yet)."""
    if url is None:
        return None
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as page:
        text = page.read().decode()
    out: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        for sample in family.samples:
            wanted = all(sample.labels.get(k) == v for k, v in (labels or {}).items())
            if sample.name == name + "_bucket" and wanted:
                out[float(sample.labels["le"])] = sample.value
    return out or None


def lag_between(
    before: dict[float, float] | None, after: dict[float, float] | None
) -> dict[str, Any] | None:
    """p50 / p99 (as the bucket bound that holds them) and the samples over 50 ms, between
    two readings of the histogram."""
    if not after:
        return None
    before = before or {}
    counts = {le: after[le] - before.get(le, 0.0) for le in sorted(after)}
    n = counts[math.inf]
    if n <= 0:
        return None

    def quantile(q: float) -> float:
        return next(le for le, c in counts.items() if c >= q * n)

    over = n - max((c for le, c in counts.items() if le <= 0.05), default=0.0)
    longest = next(le for le, c in counts.items() if c >= n)
    return {
        "n": int(n),
        "p50": quantile(0.5),
        "p99": quantile(0.99),
        "over_50ms": int(over),
        "max": longest,
    }


def load_phase(
    server: Server, tokens: list[str], clients: int, seconds: float, idle_s: float
) -> dict[str, Any]:
    """`clients` callers for `seconds`: tokens[0] is the polite caller's, tokens[1:4] the
    tenants'; one caller in eight makes its token up."""
    from benchmarks.soak_probe import PeakRss, tree_rss_mb

    ctx = mp.get_context("spawn")

    def probe(seconds: float) -> list[tuple[Any, Any]]:  # one prober process per port
        probes = []
        for target in (server.target, server.health_target):
            parent, child = ctx.Pipe()
            prober = ctx.Process(target=_health_prober, args=(target, seconds, child), daemon=True)
            prober.start()
            probes.append((parent, prober))
        return probes

    def results(probes: list[tuple[Any, Any]], seconds: float) -> list[tuple[Any, int]]:
        out = []
        for parent, prober in probes:
            latencies, failures = parent.recv() if parent.poll(seconds + 120) else ([1.0], 1)
            prober.join(30)
            out.append((Summary.of(latencies).__dict__, failures))
        return out

    # the floor: health with no caller but the probers, on the machine as loaded now
    quiet_s = min(10.0, seconds / 4)
    quiet = results(probe(quiet_s), quiet_s)
    probes = probe(seconds)
    codes: Counter = Counter()
    polite: Counter = Counter()
    made_up: Counter = Counter()
    asyncio.run(_client(server.target, tokens[0], time.monotonic() + 1.0, -1, Counter()))  # warm
    rss_before = tree_rss_mb(server.proc.pid)
    heavy = _requests() + _scheduler_requests()
    polite_mix = [kv for kv in _requests() if kv[0] == "plan"][:1]

    async def run() -> None:
        until = time.monotonic() + seconds
        callers = [_client(server.target, tokens[0], until, 0, polite, polite_mix)]
        for i in range(1, clients):
            if i % 8 == 0:
                token, count = f"made-up-token-{i:04d}-0123456789", made_up
            else:
                token, count = tokens[1 + i % 3], codes  # three tenants share their tokens
            callers.append(_client(server.target, token, until, i, count, heavy))
        await asyncio.gather(*callers)

    t0 = time.monotonic()
    lag_before = lag_buckets(getattr(server, "metrics_url", None))
    sched_before = loop_schedstat(server.proc.pid)
    with PeakRss(server.proc.pid) as peak:
        asyncio.run(run())
    wall = time.monotonic() - t0
    sched_after = loop_schedstat(server.proc.pid)
    lag = lag_between(lag_before, lag_buckets(getattr(server, "metrics_url", None)))
    health = results(probes, seconds)
    time.sleep(idle_s)  # the server returns freed memory every few seconds
    return {
        "clients": clients,
        "seconds": wall,
        "codes": dict(codes),
        "polite": dict(polite),
        "made_up": dict(made_up),
        "health": health[0][0],
        "health_failures": health[0][1],
        "health_port": health[1][0],
        "health_port_failures": health[1][1],
        "health_quiet": quiet[0][0],
        "health_port_quiet": quiet[1][0],
        "rss_before_mb": rss_before,
        "rss_peak_mb": peak.peak,
        "rss_after_mb": tree_rss_mb(server.proc.pid),
        "loop_lag": lag,
        # the loop thread's CPU time and its wait on the CPU run queue over the load (s)
        "loop_sched": (
            None
            if sched_before is None or sched_after is None
            else {
                "cpu_s": sched_after[0] - sched_before[0],
                "run_queue_s": sched_after[1] - sched_before[1],
                "slices": sched_after[2] - sched_before[2],
            }
        ),
    }


def loop_schedstat(pid: int) -> tuple[float, float, int] | None:
    """The server's event-loop thread's (CPU time s, time waiting on a run queue s, time slices
    run) from Linux's /proc/PID/task/TID/schedstat (Documentation/scheduler/sched-stats.rst);
    None where there is none."""
    from pathlib import Path

    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            if (task / "comm").read_text().strip() == "meshplan-loop":
                run, wait, slices = (task / "schedstat").read_text().split()[:3]
                return int(run) / 1e9, int(wait) / 1e9, int(slices)
    except (OSError, ValueError):
        return None
    return None
