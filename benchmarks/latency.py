"""Latency of one plan: solver.plan in-process, Plan over gRPC on loopback, and the exhaustive
oracle on the same instance.

For every instance of the suite (benchmarks/suite.py): the wall time of `solver.plan(req)`; the
round trip of `PlannerClient.plan(req)` to an in-process server on 127.0.0.1 (proto conversion on
both sides included), and what gRPC adds: the round trip less the wall time of `solver.plan`
inside the server (timed around the call by a wrapper passed as the server's `plan_fn`); the
time of `solver.oracle.oracle(req)` in a worker process, cut off at `--oracle-cap` seconds (the
ratio is then a lower bound, shown as ">"); the ratio oracle / in-process plan time; whether the
oracle's optimum equals CP-SAT's objective; and whether CP-SAT proved its answer (status OPTIMAL
or INFEASIBLE) or stopped at the time limit. The in-process percentiles are also given apart
for the first plan of each instance and for its repeats, which find the space's tables cached
(solver/cache.py).

    python -m benchmarks latency [--quick] [--time-limit S] [--oracle-cap S] [--repeats N]
                                 [--no-oracle]
    python -m benchmarks latency --distinct [N] [--time-limit S]

`--distinct [N]` plans the distinct mix instead (benchmarks/distinct.py: the first N of its
2,400 requests that do not repeat, default all, in-process) and prints its percentiles against
the same targets and its slowest shapes.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field

from benchmarks.common import (
    OracleRunner,
    OracleTiming,
    SourceWatch,
    Summary,
    TimedPlan,
    arg_parser,
    fmt_s,
    header,
    loopback_server,
    table,
    timed,
    verdict,
    write_json,
)
from benchmarks.suite import Instance, latency_suite

# Targets of the design (plan latency) and of the service (gRPC overhead).
TARGET_P50_S = 0.005
TARGET_P99_S = 0.050
TARGET_GRPC_OVERHEAD_P50_S = 0.001  # gRPC on loopback adds ≤ 1 ms at p50
TARGET_ORACLE_RATIO = 20.0
ORACLE_RATIO_MIN_GPUS = 1024

DEFAULT_TIME_LIMIT_S = 10.0
DEFAULT_ORACLE_CAP_S = 20.0
QUICK_ORACLE_CAP_S = 10.0
QUICK_ORACLE_MAX_GPUS = 64  # --quick runs the oracle on instances up to this many GPUs only


@dataclass
class Row:
    """One instance's measurements (times in seconds; the lists hold one entry per repeat)."""

    name: str
    kind: str
    num_gpus: int
    moe: bool
    pins: str
    status: str  # OPTIMAL / FEASIBLE / INFEASIBLE, or the error's name
    solver_status: str  # CP-SAT's status (FALLBACK: the greedy plan, unproven)
    proven: bool  # CP-SAT proved its answer (optimal, or infeasible)
    objective: float | None
    inproc_s: list[float] = field(default_factory=list)
    grpc_s: list[float] = field(default_factory=list)
    grpc_overhead_s: list[float] = field(default_factory=list)
    grpc_status: str = ""
    num_variables: int = 0
    num_constraints: int = 0
    num_layouts: int = 0
    oracle: OracleTiming | None = None
    ratio: float | None = None  # oracle / CP-SAT (a lower bound when the oracle was capped)
    oracle_agrees: bool | None = None  # None: not compared (oracle capped or not run)

    @property
    def inproc_best(self) -> float:
        return min(self.inproc_s)


@dataclass
class Report:
    rows: list[Row]
    inproc: Summary
    # the first in-process plan of each instance (its space's tables not cached yet), and the
    # repeats (cached: solver/cache.py); None when there were no repeats
    inproc_first: Summary | None
    inproc_repeat: Summary | None
    grpc: Summary
    grpc_overhead: Summary | None  # None when no gRPC call returned a plan
    time_limit_s: float
    oracle_cap_s: float
    quick: bool
    source_warning: str = ""  # set when solver/ changed during the run

    def big(self) -> list[Row]:
        """Rows at >= 1,024 GPUs with an oracle time."""
        return [r for r in self.rows if r.num_gpus >= ORACLE_RATIO_MIN_GPUS and r.ratio is not None]


def _plan_in_process(inst: Instance, time_limit_s: float) -> tuple[object, float]:
    from meshplan.server.memory import settle_heap
    from meshplan.solver import plan

    req = inst.request(time_limit_s=time_limit_s)
    t0 = time.perf_counter()
    try:
        return timed(plan, req)
    except TimeoutError as err:  # nothing found within the limit: report, do not hang
        return err, time.perf_counter() - t0
    finally:  # after the timing, as a solver process settles its heap after each answer
        settle_heap()


def run(
    quick: bool = False,
    time_limit_s: float | None = None,
    oracle_cap_s: float | None = None,
    repeats: int = 1,
    instances: list[Instance] | None = None,
    progress: bool = False,
    with_oracle: bool = True,
) -> Report:
    """Measure every instance; see the module docstring. `repeats` times each plan that many
    times in-process and over gRPC (the percentiles are over every run); the oracle runs once per
    instance unless `with_oracle` is False."""
    from meshplan.client import PlannerClient
    from meshplan.client.exceptions import PlannerError
    from meshplan.server.memory import freeze_startup_heap, keep_freed_heap
    from meshplan.solver.results import PlanResult, PlanStatus

    limit = time_limit_s or DEFAULT_TIME_LIMIT_S
    cap = oracle_cap_s or (QUICK_ORACLE_CAP_S if quick else DEFAULT_ORACLE_CAP_S)
    suite = instances if instances is not None else latency_suite(quick)
    rows: list[Row] = []
    watch = SourceWatch()
    served = TimedPlan()
    with (
        loopback_server(max_concurrent_solves=1, plan_fn=served) as target,
        PlannerClient(target, max_attempts=1) as client,
        OracleRunner() as oracle,
    ):
        warm = suite[0].request(time_limit_s=limit)  # first calls pay lazy imports: not timed
        _plan_in_process(suite[0], limit)
        client.plan(warm, timeout=2 * limit + 30)
        # As every solver process does after its start-up (server/pool.py, server/memory.py):
        # the heap so far stays out of full collections, which walk only what plans create, and
        # freed blocks stay in the heap for the next plan.
        freeze_startup_heap()
        keep_freed_heap()
        for inst in suite:
            req = inst.request(time_limit_s=limit)
            res, seconds = _plan_in_process(inst, limit)
            row = Row(
                name=inst.name,
                kind=inst.kind,
                num_gpus=inst.num_gpus,
                moe=req.model.preset in _moe_presets(),
                pins=inst.pins,
                status="TIMEOUT",
                solver_status="UNKNOWN",
                proven=False,
                objective=None,
            )
            row.inproc_s.append(seconds)
            if isinstance(res, PlanResult):
                s = res.solver
                row.status, row.solver_status = res.status.value, s.status
                row.proven = s.status in ("OPTIMAL", "INFEASIBLE")
                row.objective = s.objective if res.status is not PlanStatus.INFEASIBLE else None
                row.num_variables, row.num_constraints = s.num_variables, s.num_constraints
                row.num_layouts = s.num_layouts
            for i in range(repeats):
                if i:
                    row.inproc_s.append(_plan_in_process(inst, limit)[1])
                t0 = time.perf_counter()
                try:
                    got = client.plan(req, timeout=2 * limit + 30)
                    rtt = time.perf_counter() - t0
                    row.grpc_s.append(rtt)
                    row.grpc_overhead_s.append(max(rtt - served.last_s, 0.0))
                    row.grpc_status = got.status.value
                except PlannerError as err:  # e.g. DEADLINE_EXCEEDED: no plan within the limit
                    row.grpc_s.append(time.perf_counter() - t0)
                    row.grpc_status = err.code.name
            if with_oracle and (not quick or inst.num_gpus <= QUICK_ORACLE_MAX_GPUS):
                row.oracle = oracle.run(req.model_dump_json(), cap)
                row.ratio = row.oracle.seconds / row.inproc_best
                if not row.oracle.capped and row.status != "TIMEOUT":
                    if row.status == "INFEASIBLE":
                        row.oracle_agrees = row.oracle.objective is None
                    else:
                        row.oracle_agrees = row.oracle.objective == row.objective
            rows.append(row)
            if progress:
                print("  ".join(_cells(row)), file=sys.stderr, flush=True)
        for fingerprint in oracle.fingerprints:
            watch.note(fingerprint)
    inproc = [t for r in rows for t in r.inproc_s]
    first = [r.inproc_s[0] for r in rows if r.inproc_s]
    again = [t for r in rows for t in r.inproc_s[1:]]
    grpc = [t for r in rows for t in r.grpc_s]
    over = [t for r in rows for t in r.grpc_overhead_s]
    return Report(
        rows=rows,
        inproc=Summary.of(inproc),
        inproc_first=Summary.of(first) if first and again else None,
        inproc_repeat=Summary.of(again) if again else None,
        grpc=Summary.of(grpc),
        grpc_overhead=Summary.of(over) if over else None,
        time_limit_s=limit,
        oracle_cap_s=cap,
        quick=quick,
        source_warning=watch.warning(),
    )


def _moe_presets() -> set[str]:
    from meshplan.solver.catalog import get_model, model_names

    return {n for n in model_names() if get_model(n).moe is not None}


def _ratio(r: Row) -> str:
    if r.ratio is None:
        return "-"
    return f">{r.ratio:.1f}x" if r.oracle and r.oracle.capped else f"{r.ratio:.1f}x"


def _cells(r: Row) -> list[str]:
    med = sorted(r.inproc_s)[len(r.inproc_s) // 2]
    grpc = sorted(r.grpc_s)[len(r.grpc_s) // 2] if r.grpc_s else None
    over = sorted(r.grpc_overhead_s)[len(r.grpc_overhead_s) // 2] if r.grpc_overhead_s else None
    status = r.status if r.status == r.solver_status else f"{r.status} ({r.solver_status})"
    oracle = "-" if r.oracle is None else (">" if r.oracle.capped else "") + fmt_s(r.oracle.seconds)
    agrees = "-" if r.oracle_agrees is None else "yes" if r.oracle_agrees else "NO"
    if r.oracle_agrees is False and not r.proven:
        agrees = "not yet"  # stopped at the time limit with a worse plan than the optimum
    return [
        r.name,
        f"{r.num_gpus:,}",
        "MoE" if r.moe else "dense",
        r.pins,
        status,
        fmt_s(med),
        fmt_s(grpc),
        fmt_s(over),
        oracle,
        _ratio(r),
        agrees,
    ]


def render(rep: Report) -> str:
    """The table, the percentiles against the targets, and the one-line summary."""
    head = [
        "instance",
        "GPUs",
        "kind",
        "pins",
        "status",
        "in-proc",
        "gRPC",
        "+gRPC",
        "oracle",
        "oracle/CP-SAT",
        "same opt",
    ]
    out = [table(head, [_cells(r) for r in rep.rows]), ""]
    out.append(f"in-process plan   {rep.inproc.line()}")
    out.append(f"  p50: {verdict(rep.inproc.p50, TARGET_P50_S)}")
    out.append(f"  p99: {verdict(rep.inproc.p99, TARGET_P99_S)}")
    if rep.inproc_first is not None and rep.inproc_repeat is not None:
        out.append(f"  first per instance {rep.inproc_first.line()}")
        out.append(f"  repeats (cached)   {rep.inproc_repeat.line()}")
    out.append(f"gRPC Plan         {rep.grpc.line()}")
    if rep.grpc_overhead is not None:
        out.append(f"gRPC adds         {rep.grpc_overhead.line()}")
        out.append(f"  p50: {verdict(rep.grpc_overhead.p50, TARGET_GRPC_OVERHEAD_P50_S)}")
    big = rep.big()
    if big:
        low = min(big, key=lambda r: r.ratio or 0.0)
        shown = sum(1 for r in big if (r.ratio or 0) >= TARGET_ORACLE_RATIO)
        out.append(
            f"oracle/CP-SAT at >= {ORACLE_RATIO_MIN_GPUS:,} GPUs: {shown} of {len(big)} "
            f"instances shown >= {TARGET_ORACLE_RATIO:.0f}x; lowest {_ratio(low)} ({low.name}); "
            f"'>' = oracle cut off at {fmt_s(rep.oracle_cap_s)}"
        )
    if rep.source_warning:
        out.append(rep.source_warning)
    out.append(summary_line(rep))
    return "\n".join(out)


def summary_line(rep: Report) -> str:
    rows = rep.rows
    proven = sum(r.proven for r in rows)
    limit_hit = sum(not r.proven for r in rows)
    compared = [r for r in rows if r.oracle_agrees is not None and r.proven]
    agree = sum(bool(r.oracle_agrees) for r in compared)
    ratios = [r.ratio for r in rows if r.ratio is not None]
    big = rep.big()
    rtxt = "no oracle"
    if ratios:
        rtxt = f"oracle/CP-SAT min {min(ratios):.1f}x over all"
        if big:
            low = min(big, key=lambda r: r.ratio or 0.0)
            rtxt += f", {_ratio(low)} at >= {ORACLE_RATIO_MIN_GPUS:,} GPUs"
        rtxt += f" ('>': capped); oracle agrees on {agree}/{len(compared)} proven"
    adds = fmt_s(rep.grpc_overhead.p50 if rep.grpc_overhead else None)
    return (
        f"summary: latency over {len(rows)} instances: in-process p50 {fmt_s(rep.inproc.p50)} "
        f"p99 {fmt_s(rep.inproc.p99)} max {fmt_s(rep.inproc.max)}; gRPC p50 {fmt_s(rep.grpc.p50)} "
        f"(adds {adds}); {rtxt}; {proven} proven, {limit_hit} stopped at "
        f"the {fmt_s(rep.time_limit_s)} limit"
        + ("; SOLVER CHANGED DURING THE RUN" if rep.source_warning else "")
    )


def main(argv: list[str] | None = None) -> int:
    p = arg_parser("latency", __doc__.split("\n\n")[0])
    p.add_argument("--oracle-cap", type=float, default=None, metavar="S", help="oracle time cap")
    p.add_argument("--repeats", type=int, default=1, metavar="N", help="timed runs per instance")
    p.add_argument("--no-oracle", action="store_true", help="skip the oracle (plan timings only)")
    p.add_argument("--progress", action="store_true", help="one line per instance on stderr")
    p.add_argument(
        "--distinct",
        type=int,
        nargs="?",
        const=0,
        default=None,
        metavar="N",
        help="plan the distinct mix instead (its first N requests; default all 2,400)",
    )
    a = p.parse_args(argv)
    limit = a.time_limit or DEFAULT_TIME_LIMIT_S
    if a.distinct is not None:
        return _distinct(a.distinct or None, limit, a.progress, a.json)
    cap = a.oracle_cap or (QUICK_ORACLE_CAP_S if a.quick else DEFAULT_ORACLE_CAP_S)
    n = len(latency_suite(a.quick))
    print(
        header(
            "latency",
            quick=a.quick,
            time_limit_s=limit,
            oracle_cap_s=cap if not a.no_oracle else "no oracle",
            repeats=a.repeats,
            instances=n,
        ),
        flush=True,
    )
    rep = run(a.quick, limit, cap, a.repeats, progress=a.progress, with_oracle=not a.no_oracle)
    print(render(rep))
    write_json(a.json, {"benchmark": "latency", "report": asdict(rep)})
    return 0


def _distinct(n: int | None, limit: float, progress: bool, json_path: str | None) -> int:
    """`--distinct`: the distinct mix's percentiles and slowest shapes (benchmarks/distinct.py)."""
    from benchmarks import distinct
    from benchmarks.suite import DISTINCT_SEED

    size = n if n is not None else "all"
    print(header("latency --distinct", requests=size, seed=DISTINCT_SEED, time_limit_s=limit))
    rep = distinct.run(n, limit, progress)
    print(distinct.render(rep))
    write_json(json_path, {"benchmark": "latency-distinct", "report": asdict(rep)})
    return 0
