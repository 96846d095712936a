"""Scaling: plan latency against the GPU count and against the size of the search space.

1. One model (`suite.SCALING_MODEL`, H100, seq 8K, defaults otherwise) on 8, 16, ... 131,072
   GPUs.
2. The same model on `suite.SCALING_SPACE_GPUS` GPUs, first with every axis pinned to the
   all-free plan's values, then freeing more axes step by step (`suite.SCALING_SPACE`) until all
   are free.

Each row: the in-process plan time, the status (OPTIMAL: proven), the CP-SAT model's size
(variables, constraints, layout rows) and the search space after pruning: `points`, the number
of complete configurations the model chooses among (layouts x (pp, v) x (dp, b, M) x (tp, ep) x
recomputation x ZeRO stage, counted, not enumerated).

    python -m benchmarks scaling [--quick] [--time-limit S] [--distinct N]
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.common import (
    SourceWatch,
    Summary,
    arg_parser,
    fmt_s,
    header,
    table,
    timed,
    write_json,
)
from benchmarks.suite import (
    H100,
    PINNABLE,
    SCALING_COUNTS,
    SCALING_MODEL,
    SCALING_QUICK_COUNTS,
    SCALING_SPACE,
    SCALING_SPACE_GPUS,
    SCALING_SPACE_QUICK_GPUS,
    Instance,
)

DEFAULT_TIME_LIMIT_S = 10.0
QUICK_MODEL = "llama3-8b"  # --quick: a model that fits on a few GPUs and solves fast


@dataclass
class Point:
    """One measured plan."""

    label: str
    num_gpus: int
    free: str
    status: str
    seconds: float
    num_variables: int
    num_constraints: int
    num_layouts: int
    points: int


@dataclass
class Report:
    model: str
    by_gpus: list[Point]
    by_space: list[Point]
    space_gpus: int
    time_limit_s: float
    quick: bool
    source_warning: str = ""  # set when solver/ changed during the run
    distinct: Any = None  # benchmarks.distinct.Report, or None when skipped


def space_points(req: Any) -> tuple[int, int]:
    """(layout rows, configurations) of the request's pruned search space (solver.space.Space)."""
    from meshplan.solver.arch import resolve_model
    from meshplan.solver.costmodel import CostModel
    from meshplan.solver.hardware import resolve_cluster
    from meshplan.solver.space import Space

    A, H = resolve_model(req.model), resolve_cluster(req.cluster)
    cm = CostModel(A, H, req.training, req.search)
    sp = Space.build(A, H, req.training, req.search, cm)
    nv: dict[int, int] = {}
    for p, _ in sp.pv:
        nv[p] = nv.get(p, 0) + 1
    ndb: dict[int, int] = {}
    for d, _, _ in sp.db:
        ndb[d] = ndb.get(d, 0) + 1
    total = 0
    for lay in sp.layouts:
        te = len(sp.compatible("te", lay))
        total += nv.get(lay.pp, 0) * ndb.get(lay.dp, 0) * te
    return len(sp.layouts), total * len(sp.rs) * len(sp.zs)


def measure(label: str, inst: Instance, free: str, time_limit_s: float) -> tuple[Point, Any]:
    """Plan `inst` in-process; the measured point and the PlanResult (None if none in time)."""
    from meshplan.solver import plan

    req = inst.request(time_limit_s=time_limit_s)
    _, points = space_points(req)
    try:
        res, seconds = timed(plan, req)
    except TimeoutError:
        return Point(label, inst.num_gpus, free, "TIMEOUT", time_limit_s, 0, 0, 0, points), None
    s = res.solver
    status = res.status.value if res.status.value == s.status else f"{res.status.value}/{s.status}"
    pt = Point(
        label,
        inst.num_gpus,
        free,
        status,
        seconds,
        s.num_variables,
        s.num_constraints,
        s.num_layouts,
        points,
    )
    return pt, res


def _pins(config: Any, free: tuple[str, ...], moe: bool) -> dict[str, Any]:
    pins: dict[str, Any] = {}
    for axis in PINNABLE:
        if axis in free or "*" in free or (axis == "ep" and not moe):
            continue
        value = getattr(config, axis)
        pins[axis] = value.value if hasattr(value, "value") else value
    return pins


QUICK_DISTINCT = 24  # --quick: requests of the distinct mix


def run(
    quick: bool = False,
    time_limit_s: float | None = None,
    progress: bool = False,
    distinct_n: int | None = None,
) -> Report:
    """The three parts; see the module docstring. `distinct_n`: requests of the distinct mix
    (None: all, or QUICK_DISTINCT with `quick`; 0: skipped)."""
    from meshplan.solver import plan
    from meshplan.solver.catalog import get_model

    watch = SourceWatch()
    limit = time_limit_s or DEFAULT_TIME_LIMIT_S
    model = QUICK_MODEL if quick else SCALING_MODEL
    counts = SCALING_QUICK_COUNTS if quick else SCALING_COUNTS
    space_gpus = SCALING_SPACE_QUICK_GPUS if quick else SCALING_SPACE_GPUS
    moe = get_model(model).moe is not None

    def log(pt: Point) -> None:
        if progress:
            print(f"{pt.label}: {pt.status} {fmt_s(pt.seconds)}", file=sys.stderr, flush=True)

    plan(Instance("warm", QUICK_MODEL, H100, 8, search={"tp": 1, "pp": 1}).request())  # imports
    by_gpus = []
    for n in counts:
        pt, _ = measure(f"{n:,} GPUs", Instance("scale", model, H100, n), "all", limit)
        by_gpus.append(pt)
        log(pt)

    base = Instance("space", model, H100, space_gpus)
    free_pt, free_res = measure("all free", base, "all", limit)
    log(free_pt)
    if free_res is None or free_res.config is None:
        raise RuntimeError(f"{model} on {space_gpus} GPUs has no plan: cannot derive the pins")
    by_space = []
    for label, free in SCALING_SPACE:
        if "*" in free:
            by_space.append(free_pt)
            continue
        pins = _pins(free_res.config, free, moe)
        inst = Instance("space", model, H100, space_gpus, search=pins)
        pt, _ = measure(label, inst, ",".join(free) or "-", limit)
        by_space.append(pt)
        log(pt)
    rep = Report(model, by_gpus, by_space, space_gpus, limit, quick, watch.warning())
    n = QUICK_DISTINCT if quick and distinct_n is None else distinct_n
    if n != 0:
        from benchmarks import distinct

        rep.distinct = distinct.run(n, limit, progress)
        rep.source_warning = watch.warning()
    return rep


def _rows(points: list[Point], first: str) -> list[list[str]]:
    return [
        [
            getattr(p, first) if first != "num_gpus" else f"{p.num_gpus:,}",
            p.status,
            fmt_s(p.seconds),
            f"{p.num_variables:,}",
            f"{p.num_constraints:,}",
            f"{p.num_layouts:,}",
            f"{p.points:,}",
        ]
        for p in points
    ]


def render(rep: Report) -> str:
    cols = ["status", "plan", "variables", "constraints", "layouts", "points"]
    out = [
        f"{rep.model} on H100, seq 8K, against the GPU count:",
        table(["GPUs", *cols], _rows(rep.by_gpus, "num_gpus")),
        "",
        f"{rep.model} on {rep.space_gpus:,} H100 against the free axes "
        "(the others pinned to the all-free plan):",
        table(["free axes", *cols], _rows(rep.by_space, "label")),
        "",
    ]
    if rep.distinct is not None:
        from benchmarks import distinct

        d = rep.distinct
        out += [
            f"the distinct mix ({len(d.shapes):,} requests, none twice), in-process: "
            f"{d.all.line()}; its {len(d.slowest)} slowest shapes:",
            distinct.slowest_table(d),
            "",
        ]
    if rep.source_warning:
        out.append(rep.source_warning)
    out.append(summary_line(rep))
    return "\n".join(out)


def summary_line(rep: Report) -> str:
    g, s = rep.by_gpus, rep.by_space
    worst = max(g, key=lambda p: p.seconds)
    st = Summary.of([p.seconds for p in g])
    proven = sum(p.status in ("OPTIMAL", "INFEASIBLE") for p in g + s)
    mix = ""
    if rep.distinct is not None and rep.distinct.slowest:
        d = rep.distinct
        mix = (
            f"; distinct mix p50 {fmt_s(d.all.p50)} p99 {fmt_s(d.all.p99)}, slowest "
            f"{d.slowest[0].name()} {fmt_s(d.slowest[0].seconds)}"
        )
    return (
        f"summary: scaling of {rep.model}: {g[0].num_gpus:,} GPUs {fmt_s(g[0].seconds)} -> "
        f"{g[-1].num_gpus:,} GPUs {fmt_s(g[-1].seconds)} (p50 {fmt_s(st.p50)}, max "
        f"{fmt_s(worst.seconds)} at {worst.num_gpus:,}); search space {s[0].points:,} points "
        f"{fmt_s(s[0].seconds)} -> {s[-1].points:,} points {fmt_s(s[-1].seconds)}; "
        f"{proven}/{len(g) + len(s)} proven within {fmt_s(rep.time_limit_s)}" + mix
    )


def main(argv: list[str] | None = None) -> int:
    p = arg_parser("scaling", __doc__.split("\n\n")[0])
    p.add_argument("--progress", action="store_true", help="one line per plan on stderr")
    p.add_argument(
        "--distinct",
        type=int,
        default=None,
        metavar="N",
        help=f"requests of the distinct mix (default all; --quick {QUICK_DISTINCT}; 0 skips it)",
    )
    a = p.parse_args(argv)
    limit = a.time_limit or DEFAULT_TIME_LIMIT_S
    print(header("scaling", quick=a.quick, time_limit_s=limit), flush=True)
    rep = run(a.quick, limit, a.progress, a.distinct)
    print(render(rep))
    write_json(a.json, {"benchmark": "scaling", "report": asdict(rep)})
    return 0
