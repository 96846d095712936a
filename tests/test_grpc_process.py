"""Servers as processes (`python -m meshplan.server`): SIGTERM drains; replicas behind one client target
survive one of them being killed mid-run."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from test_grpc_support import LOOPBACK, medium_request, small_request

from meshplan.client import PlannerClient, UnavailableError
from meshplan.solver.results import PlanResult, PlanStatus
from meshplan.solver.schema import PlanRequest

ROOT = Path(__file__).resolve().parent.parent
INFEASIBLE = PlanRequest.model_validate(
    {"model": {"preset": "llama3-405b"}, "cluster": {"num_gpus": 8}}
)
_LISTENING = re.compile(r"serving meshplan\.v1\.Planner on [^ ]+:(\d+)")


class ServerProcess:
    """`python -m meshplan.server` on a free loopback port, its stderr collected line by line."""

    def __init__(self, *flags: str) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "meshplan.server", "--host", LOOPBACK, "--port", "0", *flags],
            cwd=ROOT,
            env=env,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.log: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        self.port = 0

    def wait_ready(self, timeout: float = 60) -> None:
        self.port = self._wait_port(timeout)

    def _pump(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)
            self.lines.put(line)

    def _wait_port(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                assert self.proc.poll() is None, "".join(self.log)
                continue
            found = _LISTENING.search(line)
            if found:
                return int(found.group(1))
        raise AssertionError("server did not start:\n" + "".join(self.log))

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@contextmanager
def servers(count: int, *flags: str) -> Iterator[list[ServerProcess]]:
    with ExitStack() as stack:
        started: list[ServerProcess] = []
        for _ in range(count):  # started together: their imports overlap
            server = ServerProcess(*flags)
            stack.callback(server.stop)
            started.append(server)
        for server in started:
            server.wait_ready()
        yield started


def test_sigterm_drains_calls_in_flight_and_exits_0() -> None:
    with servers(1, "--grace-period-s", "20") as (server,):
        outcome: list[PlanResult | Exception] = []

        def long_call() -> None:
            try:
                with PlannerClient(server.address) as client:  # a solve that runs ~3 s
                    outcome.append(client.plan(medium_request(time_limit_s=3.0), timeout=30))
            except Exception as err:
                outcome.append(err)

        caller = threading.Thread(target=long_call)
        caller.start()
        channel = grpc.insecure_channel(server.address)
        watch = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service="meshplan.v1.Planner"), timeout=30
        )
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        time.sleep(1.0)  # the solve is under way
        server.proc.send_signal(signal.SIGTERM)
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
        watch.cancel()
        channel.close()
        with PlannerClient(server.address, max_attempts=2) as late, pytest.raises(UnavailableError):
            late.plan(small_request(), timeout=3)  # no new calls while draining
        caller.join(30)
        assert server.proc.wait(30) == 0
        assert len(outcome) == 1 and isinstance(outcome[0], PlanResult), outcome
        assert outcome[0].status in (PlanStatus.FEASIBLE, PlanStatus.OPTIMAL)
        log = "".join(server.log)
        assert "draining" in log and "method=Plan" in log and "status=OK" in log


def test_three_replicas_one_killed_mid_run() -> None:
    with servers(3, "--max-concurrent-solves", "2") as replicas:
        target = [r.address for r in replicas]
        results: list[PlanResult] = []
        errors: list[Exception] = []
        done = threading.Semaphore(0)

        def worker(calls: int) -> None:
            with PlannerClient(target, max_attempts=5) as client:
                for i in range(calls):  # one in five a feasible plan, the rest a fast answer
                    req = small_request(time_limit_s=10) if i % 5 == 0 else INFEASIBLE
                    try:
                        results.append(client.plan(req, timeout=60))
                    except Exception as err:
                        errors.append(err)
                    done.release()

        threads = [threading.Thread(target=worker, args=(50,)) for _ in range(4)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while not all("method=Plan" in "".join(r.log) for r in replicas):  # calls landed everywhere
            assert time.monotonic() < deadline, "round robin did not reach every replica"
            assert done.acquire(timeout=60)
        replicas[1].proc.kill()
        for t in threads:
            t.join(120)
        assert errors == [] and len(results) == 200
