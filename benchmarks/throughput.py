"""Throughput: many plans at once, through `PlanBatch` on one server against its number of solver
processes, and (optionally) through a local pool of workers.

The same requests (benchmarks/suite.py: the fleet-planning sweep, 1,000 distinct requests; 20
pinned small ones with --quick) go

- through one `PlanBatch` call to an in-process server on 127.0.0.1 with P solver processes,
  for each P of `--processes` (default 1,2; one CP-SAT worker per solve, and one caller allowed
  every process: `max_solves_per_caller` = P, a single-tenant server), and
- through `solver.plan` in a pool of `--workers` worker processes (`--pool process`) and/or
  threads of this process (`--pool thread`), with no gRPC (default: neither).

Plans per second = requests / wall time from the first submission to the last answer; worker
start-up and imports are paid before the clock starts. Every answer is counted by status. "main
CPU" is this process's CPU time per plan during the batch (the server's event loop, gRPC and
the client; not the solver processes): what competes with the solves for the cores; "worker
CPU" is the solver processes' CPU time per plan (from /proc). From both, the speedup that the
CPU a plan takes with 2 processes allows on 2 cores is printed beside the measured one.
Targets: 1,000 plans in <= 5 s through PlanBatch, and >= 1.8x the plans/s from 1 to 2 processes.

    python -m benchmarks throughput [--quick] [-n N] [--processes 1,2] [--pool process,thread,ray]
    python -m benchmarks throughput --distinct [-n N]   # PlanBatch x2, process pool, Ray

With --distinct, the requests are the distinct mix (benchmarks/suite.py: 2,400 shuffled
requests, none twice; the first N) and the pools default to process,ray: Ray's start-up (ray.init,
then the actors' spawn and warm-up) is reported apart. Target: Ray within 15% of the process
pool.
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
from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks.common import (
    LOOPBACK,
    SourceWatch,
    Summary,
    arg_parser,
    fmt_s,
    header,
    table,
    verdict,
    write_json,
)
from benchmarks.suite import distinct_requests, throughput_requests

TARGET_PLANS = 1000
TARGET_SECONDS = 5.0  # 1,000 plans in <= 5 s
TARGET_SPEEDUP = 1.8  # plans/s with 2 processes over 1

DEFAULT_N, QUICK_N = 1000, 20
DEFAULT_WORKERS = 2
DEFAULT_PROCESSES = (1, 2)
DEFAULT_TIME_LIMIT_S = 10.0


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


@dataclass
class Report:
    results: list[PathResult]
    processes: list[int]
    workers: int
    time_limit_s: float
    quick: bool
    source_warning: str = ""  # set when solver/ changed during the run
    distinct: bool = False  # the distinct mix (suite.distinct_requests), not the sweep


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


def _collect(
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
        return _collect(f"process pool x{workers}", reqs, answers, t0, progress)


def run_thread_pool(reqs: list[Any], workers: int, progress: bool = False) -> PathResult:
    """meshplan.solver.plan in `workers` threads of this process (CP-SAT releases the GIL as it solves)."""
    _plan_or_error(throughput_requests(1, quick=True)[0])  # warm: lazy imports
    with ThreadPoolExecutor(workers) as pool:
        t0 = time.perf_counter()
        answers = pool.map(_plan_or_error, reqs)
        return _collect(f"thread pool x{workers}", reqs, answers, t0, progress)


def run_ray_pool(reqs: list[Any], workers: int, progress: bool = False) -> PathResult:
    """The requests on a local Ray cluster's warm actors (benchmarks/ray_sweep.py)."""
    from benchmarks.ray_sweep import run_ray_pool as on_ray

    return on_ray(reqs, workers, progress)


POOLS: dict[str, Callable[[list[Any], int, bool], PathResult]] = {
    "process": run_process_pool,
    "thread": run_thread_pool,
    "ray": run_ray_pool,
}


def run(
    quick: bool = False,
    n: int | None = None,
    workers: int = DEFAULT_WORKERS,
    time_limit_s: float | None = None,
    pools: tuple[str, ...] = (),
    progress: bool = False,
    processes: tuple[int, ...] = DEFAULT_PROCESSES,
    distinct: bool = False,
) -> Report:
    """Run the same requests through PlanBatch per process count and each pool; see the module
    docstring."""
    watch = SourceWatch()
    limit = time_limit_s or DEFAULT_TIME_LIMIT_S
    count = n or (QUICK_N if quick else DEFAULT_N)
    if distinct:
        reqs = distinct_requests(count, time_limit_s=limit)
    else:
        reqs = throughput_requests(count, quick, time_limit_s=limit)
    results = [run_batch(reqs, p, limit, progress) for p in processes]
    results += [POOLS[p](reqs, workers, progress) for p in pools]
    return Report(results, list(processes), workers, limit, quick, watch.warning(), distinct)


def speedup(rep: Report) -> float | None:
    """PlanBatch plans/s with 2 processes over 1 (None unless both ran)."""
    by = {r.processes: r.plans_per_s for r in rep.results if r.processes}
    return by[2] / by[1] if 1 in by and 2 in by else None


def speedup_ceiling(rep: Report, cores: int) -> float | None:
    """The speedup from 1 to 2 processes that the CPU cost of a plan with 2 allows on `cores`
    cores: 2 workers at their CPU a plan, and every core over the worker and main CPU a plan,
    against the rate with 1 process."""
    by = {r.processes: r for r in rep.results if r.processes}
    one, two = by.get(1), by.get(2)
    if one is None or two is None or two.worker_cpu_s is None or two.worker_cpu_s <= 0:
        return None
    n = max(two.answered, 1)
    worker, main = two.worker_cpu_s / n, two.main_cpu_s / n
    return min(2 / worker, cores / (worker + main)) / one.plans_per_s


def render(rep: Report) -> str:
    head = ["path", "plans", "answered", "wall", "plans/s", "per 1,000", "plan p50", "main CPU"]
    head += ["worker CPU", "statuses"]
    rows = []
    for r in rep.results:
        s = Summary.of(r.plan_wall_s) if r.plan_wall_s else None
        rows.append(
            [
                r.path,
                r.requests,
                r.answered,
                fmt_s(r.seconds),
                f"{r.plans_per_s:.2f}",
                fmt_s(r.seconds_per_1000),
                fmt_s(s.p50) if s else "-",
                f"{r.main_cpu_ms_per_plan:.2f} ms" if r.processes else "-",
                f"{w:.2f} ms" if (w := r.worker_cpu_ms_per_plan) is not None else "-",
                ", ".join(f"{k} {v}" for k, v in sorted(r.statuses.items())),
            ]
        )
    out = [table(head, rows), ""]
    if any(r.processes for r in rep.results):
        out.append(
            "main CPU: CPU time of the benchmark's own process per plan (server and client; "
            "the solver processes excluded); worker CPU: the solver processes' CPU time per plan"
        )
    for r in rep.results:
        v = verdict(r.seconds_per_1000, TARGET_SECONDS)
        out.append(f"{r.path}: time per {TARGET_PLANS:,} plans: {v}")
    if any(r.startup_s for r in rep.results):
        from benchmarks.ray_sweep import ray_lines

        out += ray_lines(rep)
    up = speedup(rep)
    if up is not None:
        v = "met" if up >= TARGET_SPEEDUP else "MISSED"
        out.append(f"PlanBatch plans/s, 2 processes over 1: {up:.2f}x: {v} (>= {TARGET_SPEEDUP}x)")
        cores = os.cpu_count() or 1
        ceiling = speedup_ceiling(rep, cores)
        if ceiling is not None:
            out.append(
                f"  on {cores} cores, the CPU a plan took with 2 processes (worker + main) "
                f"allows at most {ceiling:.2f}x the rate with 1"
            )
    if rep.source_warning:
        out.append(rep.source_warning)
    out.append(summary_line(rep))
    return "\n".join(out)


def summary_line(rep: Report) -> str:
    parts = [f"{r.path} {r.plans_per_s:.2f} plans/s" for r in rep.results]
    n = rep.results[0].requests
    timeouts = sum(
        v for r in rep.results for k, v in r.statuses.items() if k.startswith("FEASIBLE")
    )
    up = speedup(rep)
    return (
        f"summary: throughput of {n} plans: "
        + "; ".join(parts)
        + (f"; {up:.2f}x from 1 to 2 processes" if up is not None else "")
        + f"; {timeouts} answers stopped at the {fmt_s(rep.time_limit_s)} limit"
    )


def main(argv: list[str] | None = None) -> int:
    p = arg_parser("throughput", __doc__.split("\n\n")[0])
    p.add_argument(
        "-n", type=int, default=None, help=f"plans (default {DEFAULT_N}; quick {QUICK_N})"
    )
    p.add_argument(
        "--processes",
        default=",".join(map(str, DEFAULT_PROCESSES)),
        help="comma-separated solver process counts of the PlanBatch server (default 1,2)",
    )
    p.add_argument("--workers", type=int, default=DEFAULT_WORKERS, help="local pool size")
    p.add_argument(
        "--pool",
        default="",
        help="comma-separated local pools besides PlanBatch: process, thread (default: none)",
    )
    p.add_argument("--progress", action="store_true", help="a line per 100 answers on stderr")
    p.add_argument(
        "--distinct",
        action="store_true",
        help="the distinct mix (benchmarks/suite.py: no request twice) through PlanBatch with 2 "
        "processes, the process pool and a local Ray cluster (default pools: process,ray)",
    )
    a = p.parse_args(argv)
    if a.distinct and not a.pool:
        a.pool = "process,ray"
    if a.distinct and a.processes == ",".join(map(str, DEFAULT_PROCESSES)):
        a.processes = str(a.workers)  # one server of the pools' CPUs
    pools = tuple(x for x in a.pool.split(",") if x)
    bad = [x for x in pools if x not in POOLS]
    if bad:
        p.error(f"unknown pool {bad[0]!r}: choose from {', '.join(POOLS)}")
    try:
        procs = tuple(int(x) for x in a.processes.split(",") if x)
    except ValueError:
        p.error(f"--processes: not a comma-separated list of counts: {a.processes!r}")
    if not procs or min(procs) < 1:
        p.error(f"--processes: counts must be >= 1 (got {a.processes!r})")
    limit = a.time_limit or DEFAULT_TIME_LIMIT_S
    n = a.n or (QUICK_N if a.quick else DEFAULT_N)
    print(
        header(
            "throughput",
            quick=a.quick,
            plans=n,
            processes=a.processes,
            time_limit_s=limit,
            mix="distinct" if a.distinct else "sweep",
        ),
        flush=True,
    )
    rep = run(a.quick, n, a.workers, limit, pools, a.progress, procs, a.distinct)
    print(render(rep))
    write_json(a.json, {"benchmark": "throughput", "report": asdict(rep)})
    return 0
