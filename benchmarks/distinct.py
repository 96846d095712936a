"""The distinct mix in-process: `solver.plan` over requests that do not repeat.

`benchmarks.suite.distinct_requests` (10 catalog models x 4 GPU types x 12 counts from 8 to
16,384 x 5 sequence lengths from 2K to 32K, shuffled with a fixed seed, none twice) planned one
after another in one process, as a solver process plans them: the caches start empty (after one
plan of another request that pays the lazy imports) and keep what they keep across requests,
the start-up heap is frozen, a young collection runs only past the solver process's threshold
of new objects (server/worker.py), and the heap is settled after each answer
(server/memory.py). Each plan's wall time, its status and whether CP-SAT proved it (OPTIMAL, or
proven INFEASIBLE); the percentiles over all of them, apart for dense and MoE models, and the
slowest shapes. Each plan's CPU time (this process's, around the call) too: on a machine shared
with other work the wall time counts the time slices others took, the CPU time only what the
plan cost, so runs under different loads compare by it (the targets are wall times, as a caller
waits them).

`python -m benchmarks latency --distinct [N]` prints it; `python -m benchmarks scaling` names
the slowest shapes.
"""

from __future__ import annotations

import gc
import sys
import time
from dataclasses import dataclass, field

from benchmarks.common import Summary, fmt_s, table, verdict

TARGET_P50_S = 0.005  # the distinct mix, in-process, on the 2-core machine RESULTS.md names
TARGET_P99_S = 0.050
SLOWEST = 10  # shapes listed


@dataclass
class Shape:
    """One request of the mix and its plan."""

    model: str
    gpu: str
    num_gpus: int
    seq_len: int
    moe: bool
    status: str  # OPTIMAL / FEASIBLE / INFEASIBLE, or TIMEOUT
    solver_status: str  # CP-SAT's (FALLBACK: the greedy plan, unproven)
    proven: bool
    seconds: float
    num_layouts: int
    cpu_s: float = 0.0  # this process's CPU time during the plan

    def name(self) -> str:
        return f"{self.model} on {self.num_gpus:,} {self.gpu} at {self.seq_len // 1024}K"


@dataclass
class Report:
    shapes: list[Shape]
    all: Summary
    dense: Summary | None
    moe: Summary | None
    time_limit_s: float
    wall_s: float  # the whole run
    slowest: list[Shape] = field(default_factory=list)
    cpu: Summary | None = None  # CPU time per plan (None when not measured)

    @property
    def proven(self) -> int:
        return sum(s.proven for s in self.shapes)


def run(
    n: int | None = None, time_limit_s: float = 10.0, progress: bool = False, slowest: int = SLOWEST
) -> Report:
    """Plan the first `n` requests of the mix (default all) in this process; see the module
    docstring."""
    from benchmarks.suite import distinct_requests, latency_suite
    from meshplan.server.memory import freeze_startup_heap, keep_freed_heap, settle_heap
    from meshplan.server.worker import YOUNG_PASS_OBJECTS
    from meshplan.solver import cache, plan
    from meshplan.solver.catalog import get_model
    from meshplan.solver.results import PlanStatus

    reqs = distinct_requests(n, time_limit_s=time_limit_s)
    plan(latency_suite(quick=True)[0].request(time_limit_s=time_limit_s))  # imports: untimed
    cache.clear()
    freeze_startup_heap()
    keep_freed_heap()
    young = gc.get_threshold()
    gc.set_threshold(YOUNG_PASS_OBJECTS, *young[1:])  # as server/worker.py sets it
    shapes: list[Shape] = []
    t_all = time.perf_counter()
    for req in reqs:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            res = plan(req)
        except TimeoutError:
            res = None
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        settle_heap()  # after the timing, as a solver process does after each answer
        m, c, t = req.model, req.cluster, req.training
        sh = Shape(
            model=m.preset or "custom",
            gpu=c.gpu,
            num_gpus=c.num_gpus,
            seq_len=t.seq_len,
            moe=m.preset is not None and get_model(m.preset).moe is not None,
            status="TIMEOUT" if res is None else res.status.value,
            solver_status="UNKNOWN" if res is None else res.solver.status,
            proven=res is not None and res.solver.status in ("OPTIMAL", "INFEASIBLE"),
            seconds=seconds,
            num_layouts=0 if res is None else res.solver.num_layouts,
            cpu_s=cpu,
        )
        if res is not None and res.status is PlanStatus.INFEASIBLE:
            sh.proven = res.solver.status == "INFEASIBLE"
        shapes.append(sh)
        if progress:
            print(f"{sh.name()}: {sh.status} {fmt_s(seconds)}", file=sys.stderr, flush=True)
    wall = time.perf_counter() - t_all
    gc.set_threshold(*young)
    dense = [s.seconds for s in shapes if not s.moe]
    moe = [s.seconds for s in shapes if s.moe]
    return Report(
        shapes=shapes,
        all=Summary.of([s.seconds for s in shapes]),
        dense=Summary.of(dense) if dense else None,
        moe=Summary.of(moe) if moe else None,
        time_limit_s=time_limit_s,
        wall_s=wall,
        slowest=sorted(shapes, key=lambda s: -s.seconds)[:slowest],
        cpu=Summary.of([s.cpu_s for s in shapes]),
    )


def slowest_table(rep: Report) -> str:
    """The slowest shapes of the mix, slowest first."""
    rows = [
        [
            s.model,
            s.gpu,
            f"{s.num_gpus:,}",
            f"{s.seq_len // 1024}K",
            s.status if s.status == s.solver_status else f"{s.status} ({s.solver_status})",
            f"{s.num_layouts:,}",
            fmt_s(s.seconds),
        ]
        for s in rep.slowest
    ]
    return table(["model", "GPU", "GPUs", "seq", "status", "layouts", "plan"], rows)


def render(rep: Report) -> str:
    out = [f"distinct mix, in-process: {len(rep.shapes):,} requests, none twice"]
    out.append(f"  all    {rep.all.line()}")
    if rep.dense is not None:
        out.append(f"  dense  {rep.dense.line()}")
    if rep.moe is not None:
        out.append(f"  MoE    {rep.moe.line()}")
    if rep.cpu is not None:
        out.append(f"  CPU    {rep.cpu.line()}  (this process's CPU time per plan)")
    out.append(f"  p50: {verdict(rep.all.p50, TARGET_P50_S)}")
    out.append(f"  p99: {verdict(rep.all.p99, TARGET_P99_S)}")
    out.append(f"  proven (OPTIMAL or INFEASIBLE): {rep.proven:,} of {len(rep.shapes):,}")
    out.append(f"the {len(rep.slowest)} slowest shapes:")
    out.append(slowest_table(rep))
    out.append(summary_line(rep))
    return "\n".join(out)


def summary_line(rep: Report) -> str:
    worst = rep.slowest[0] if rep.slowest else None
    return (
        f"summary: distinct mix of {len(rep.shapes):,} requests in-process: p50 "
        f"{fmt_s(rep.all.p50)} p99 {fmt_s(rep.all.p99)} max {fmt_s(rep.all.max)}"
        + (f" ({worst.name()})" if worst else "")
        + (f"; CPU p50 {fmt_s(rep.cpu.p50)} p99 {fmt_s(rep.cpu.p99)}" if rep.cpu else "")
        + f"; {rep.proven:,}/{len(rep.shapes):,} proven; {fmt_s(rep.wall_s)} in all"
    )
