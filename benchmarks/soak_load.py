"""The soak benchmark's load phase: asyncio clients with backoff, and a health prober process."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import random
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

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
