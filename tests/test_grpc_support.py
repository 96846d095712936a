"""Helpers shared by the tests/test_grpc_*.py modules (no tests here).

Fakes replace the solver where a test needs a solve that lasts until it is stopped; every other
test goes through the real solver.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import grpc

from meshplan.server.app import PlannerServer, create_server
from meshplan.server.settings import Settings
from meshplan.solver.results import Explanation, NumParameters, PlanResult, PlanStatus, SolverInfo
from meshplan.solver.schema import ClusterSpec, ModelSpec, Options, PlanRequest
from meshplan.v1 import planner_pb2_grpc

LOOPBACK = "127.0.0.1"


def small_request(**options: object) -> PlanRequest:
    """llama3-8b on 8 H100s: solved in well under a second."""
    return PlanRequest(
        model=ModelSpec(preset="llama3-8b"),
        cluster=ClusterSpec(gpu="h100-sxm-80gb", num_gpus=8),
        options=Options(**options),
    )


def medium_request(time_limit_s: float = 60.0) -> PlanRequest:
    """llama3-70b on 64 GPUs in FP8: quick to build, long to prove (runs to its time limit)."""
    return PlanRequest.model_validate(
        {
            "model": {"preset": "llama3-70b"},
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 64},
            "training": {"precision": "FP8", "seq_len": 4096},
            "options": {"time_limit_s": time_limit_s},
        }
    )


def big_request(time_limit_s: float = 30.0) -> PlanRequest:
    """deepseek-v3 on up to 131072 GPUs with 32 alternatives: a search of ~8 s cold and ~4 s
    with its tables cached (measured 2026-11-25), so a test that stops or times it out within
    a second does not race the solver's speed."""
    return PlanRequest.model_validate(
        {
            "model": {"preset": "deepseek-v3"},
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 131072},
            "search": {"allow_fewer_gpus": True},
            "options": {"time_limit_s": time_limit_s, "top_k": 32},
        }
    )


def no_plan(status: str = "UNKNOWN") -> PlanResult:
    """What the solver returns when it found nothing (status UNKNOWN: not proven infeasible)."""
    return PlanResult(
        status=PlanStatus.INFEASIBLE,
        num_parameters=NumParameters(total=1, active=1),
        explanation=Explanation(reason="no layout found in time", min_gpus=0),
        solver=SolverInfo(
            status=status,
            objective=0.0,
            bound=0.0,
            gap=0.0,
            wall_time_s=0.0,
            solve_time_s=0.0,
            num_variables=0,
            num_constraints=0,
            num_layouts=0,
            used_fallback=False,
        ),
    )


@dataclass
class BlockingPlan:
    """A fake solve that runs until its stop event is set (or `max_s` passes)."""

    max_s: float = 20.0
    started: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    stopped_at: list[float] = field(default_factory=list)
    requests: list[PlanRequest] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, req: PlanRequest, stop_event: threading.Event | None = None) -> PlanResult:
        with self.lock:
            self.requests.append(req)
        self.started.release()
        assert stop_event is not None
        if stop_event.wait(min(self.max_s, req.options.time_limit_s)):
            with self.lock:
                self.stopped_at.append(time.monotonic())
        return no_plan()

    def wait_started(self, count: int = 1, timeout: float = 10.0) -> None:
        for _ in range(count):
            assert self.started.acquire(timeout=timeout), "the fake solve did not start"


@contextmanager
def running_server(**overrides: object) -> Iterator[tuple[int, PlannerServer]]:
    """A started in-process server on a free loopback port; stopped on exit. Solves run on
    threads unless `solver_processes` is given (worker processes take seconds to start)."""
    plan_fn = overrides.pop("plan_fn", None)
    evaluate_fn = overrides.pop("evaluate_fn", None)
    base = {"host": LOOPBACK, "port": 0, "grace_period_s": 0.0, "solver_processes": 0}
    settings = Settings(**{**base, **overrides})
    server, port = create_server(settings, plan_fn=plan_fn, evaluate_fn=evaluate_fn)
    server.start()
    try:
        yield port, server
    finally:
        server.stop(0).wait(10)


@contextmanager
def raw_stub(port: int) -> Iterator[planner_pb2_grpc.PlannerStub]:
    """A bare stub (no client-side validation) for sending malformed protos."""
    with grpc.insecure_channel(f"{LOOPBACK}:{port}") as channel:
        yield planner_pb2_grpc.PlannerStub(channel)
