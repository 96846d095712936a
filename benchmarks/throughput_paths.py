"""The throughput benchmark's paths (benchmarks/throughput.py): how a batch of plans runs through
`PlanBatch` on a loopback server of P solver processes, a local process pool, threads of this
process or a local Ray cluster (benchmarks/ray_sweep.py), and what each measures (`PathResult`:
answers by status, wall time, the main and the solver processes' CPU time).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from benchmarks.common import LOOPBACK, fmt_s
from benchmarks.suite import throughput_requests


@dataclass
class PathResult:
    """One way of running the batch."""

    path: str
    requests: int
    answered: int
    seconds: float
    statuses: dict[str, int]  # OPTIMAL / FEASIBLE / INFEASIBLE / TIMEOUT / error codes
    plan_wall_s: list[float] = field(default_factory=list)  # solver.wall_time_s per answer
    processes: int = 0  # the server's solver processes (0: not a PlanBatch path)
    # CPU time of this process (the server's loop, couriers and gRPC, and the client) while
    # the batch ran; the solver processes are not in it
    main_cpu_s: float = 0.0
    # CPU time of the solver processes while the batch ran (None where /proc is not readable)
    worker_cpu_s: float | None = None
    startup_s: float = 0.0  # Ray: ray.init of the local cluster (not in `seconds`)
    actors_s: float = 0.0  # Ray: the actors' spawn, imports and warm-up (not in `seconds`)

    @property
    def main_cpu_ms_per_plan(self) -> float:
        return self.main_cpu_s / max(self.answered, 1) * 1000

    @property
    def worker_cpu_ms_per_plan(self) -> float | None:
        if self.worker_cpu_s is None:
            return None
        return self.worker_cpu_s / max(self.answered, 1) * 1000

    @property
    def plans_per_s(self) -> float:
        return self.answered / self.seconds

    @property
    def seconds_per_1000(self) -> float:
        return 1000 / self.plans_per_s


def _tick(path: str, n: int, total: int, t0: float, progress: bool) -> None:
    if progress and (n % 100 == 0 or n == total):
        print(f"{path}: {n}/{total} in {fmt_s(time.perf_counter() - t0)}", file=sys.stderr)


def _outcome(res: Any) -> tuple[str, float | None]:
    """(status, plan wall time) of one answer: a PlanResult or an exception."""
    from meshplan.solver.results import PlanResult

    if isinstance(res, PlanResult):
        st = res.status.value
        if res.solver is not None and res.solver.status == "FALLBACK":
            st = "FEASIBLE (FALLBACK)"
        return st, res.solver.wall_time_s if res.solver is not None else None
    if isinstance(res, TimeoutError):
        return "TIMEOUT", None
    return type(res).__name__, None


def _plan_or_error(req: Any) -> Any:
    from meshplan.server.memory import settle_heap
    from meshplan.solver import plan

    try:
        return plan(req)
    except (TimeoutError, ValueError, KeyError) as err:
        return err
    finally:
        settle_heap()  # as the server's solver processes do after each call


def _warm_worker(barrier: Any) -> None:
    """Pool initializer: import the solver and solve one small plan, then wait for the others."""
    from meshplan.solver import plan

    plan(throughput_requests(1, quick=True)[0])
    barrier.wait()


def children_cpu_s() -> float | None:
    """CPU time (user + system) so far of this process's running child processes (the solver
    processes), from /proc; None where it cannot be read."""
    me, tick = os.getpid(), os.sysconf("SC_CLK_TCK")
    total = 0.0
    try:
        pids = [d for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # ended meanwhile, or not ours to read
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        if int(fields[1]) == me:  # ppid; utime and stime are fields 14 and 15 of proc(5)
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


@contextmanager
def pool_server(processes: int, max_time_limit_s: float = 3600.0) -> Iterator[str]:
    """A started loopback server with `processes` warmed solver processes, all of them open to
    one caller; yields its target."""
    from meshplan.server.app import create_server
    from meshplan.server.settings import Settings

    settings = Settings(
        host=LOOPBACK,
        port=0,
        grace_period_s=0.0,
        solver_processes=processes,
        max_solves_per_caller=processes,
        max_time_limit_s=max_time_limit_s,
        workers_per_solve=1,
    )
    server, port = create_server(settings)
    try:
        if server.wait_ready() != processes:
            raise RuntimeError(f"{processes} solver processes did not all start")
        server.start()
        yield f"{LOOPBACK}:{port}"
    finally:
        server.stop(0).wait(30)


def run_batch(
    reqs: list[Any], processes: int, time_limit_s: float, progress: bool = False
) -> PathResult:
    """All requests in one PlanBatch call to a loopback server with `processes` solver
    processes."""
    from meshplan.client import PlannerClient

    with (
        pool_server(processes) as target,
        PlannerClient(target, max_attempts=1) as client,
    ):
        warm = throughput_requests(processes, quick=True)  # every worker once: not timed
        list(client.plan_batch(warm, timeout=120))
        timeout = len(reqs) * (time_limit_s + 5) / processes + 60
        statuses: Counter[str] = Counter()
        walls: list[float] = []
        t0, cpu0, kids0 = time.perf_counter(), time.process_time(), children_cpu_s()
        n = 0
        path = f"PlanBatch (gRPC) x{processes}"
        for item in client.plan_batch(reqs, timeout=timeout):
            n += 1
            _tick(path, n, len(reqs), t0, progress)
            if item.result is not None:
                st, wall = _outcome(item.result)
                statuses[st] += 1
                if wall is not None:
                    walls.append(wall)
            else:
                statuses[item.error.code.name if item.error else "ERROR"] += 1
        seconds, cpu, kids = time.perf_counter() - t0, time.process_time() - cpu0, children_cpu_s()
    workers = kids - kids0 if kids is not None and kids0 is not None else None
    return PathResult(path, len(reqs), n, seconds, dict(statuses), walls, processes, cpu, workers)


def collect(
    path: str, reqs: list[Any], answers: Iterable[Any], t0: float, progress: bool
) -> PathResult:
    statuses: Counter[str] = Counter()
    walls: list[float] = []
    n = 0
    for res in answers:
        n += 1
        _tick(path, n, len(reqs), t0, progress)
        st, wall = _outcome(res)
        statuses[st] += 1
        if wall is not None:
            walls.append(wall)
    return PathResult(path, len(reqs), n, time.perf_counter() - t0, dict(statuses), walls)


def run_process_pool(reqs: list[Any], workers: int, progress: bool = False) -> PathResult:
    """meshplan.solver.plan in `workers` spawned processes (started and warmed before the clock)."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(workers + 1)
    with ctx.Pool(workers, initializer=_warm_worker, initargs=(barrier,)) as pool:
        barrier.wait(timeout=300)
        t0 = time.perf_counter()
        answers = pool.imap_unordered(_plan_or_error, reqs)
        return collect(f"process pool x{workers}", reqs, answers, t0, progress)


def run_thread_pool(reqs: list[Any], workers: int, progress: bool = False) -> PathResult:
    """meshplan.solver.plan in `workers` threads of this process (CP-SAT releases the GIL as it solves)."""
    _plan_or_error(throughput_requests(1, quick=True)[0])  # warm: lazy imports
    with ThreadPoolExecutor(workers) as pool:
        t0 = time.perf_counter()
        answers = pool.map(_plan_or_error, reqs)
        return collect(f"thread pool x{workers}", reqs, answers, t0, progress)


def run_ray_pool(reqs: list[Any], workers: int, progress: bool = False) -> PathResult:
    """The requests on a local Ray cluster's warm actors (benchmarks/ray_sweep.py)."""
    from benchmarks.ray_sweep import run_ray_pool as on_ray

    return on_ray(reqs, workers, progress)


POOLS: dict[str, Callable[[list[Any], int, bool], PathResult]] = {
    "process": run_process_pool,
    "thread": run_thread_pool,
    "ray": run_ray_pool,
}
