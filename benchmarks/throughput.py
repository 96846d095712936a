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
How each path runs and what it measures is benchmarks/throughput_paths.py; this module runs them
and reports.

    python -m benchmarks throughput [--quick] [-n N] [--processes 1,2] [--pool process,thread,ray]
    python -m benchmarks throughput --distinct [-n N]   # PlanBatch x2, process pool, Ray

With --distinct, the requests are the distinct mix (benchmarks/suite.py: 2,400 shuffled
requests, none twice; the first N) and the pools default to process,ray: Ray's start-up (ray.init,
then the actors' spawn and warm-up) is reported apart. Target: Ray within 15% of the process
pool.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from benchmarks.common import (
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
from benchmarks.throughput_paths import POOLS, PathResult, pool_server, run_batch

__all__ = ["POOLS", "PathResult", "Report", "main", "pool_server", "run", "run_batch"]

TARGET_PLANS = 1000
TARGET_SECONDS = 5.0  # 1,000 plans in <= 5 s
TARGET_SPEEDUP = 1.8  # plans/s with 2 processes over 1

DEFAULT_N, QUICK_N = 1000, 20
DEFAULT_WORKERS = 2
DEFAULT_PROCESSES = (1, 2)
DEFAULT_TIME_LIMIT_S = 10.0


@dataclass
class Report:
    results: list[PathResult]
    processes: list[int]
    workers: int
    time_limit_s: float
    quick: bool
    source_warning: str = ""  # set when solver/ changed during the run
    distinct: bool = False  # the distinct mix (suite.distinct_requests), not the sweep


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
