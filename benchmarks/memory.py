"""Memory: the memory model against every calibration run (what fits, and the printed peaks).

    python -m benchmarks memory [--quick] [--json PATH]

Every vendored run (tools/calibration/published: published_runs.json, megatron_h100_runs.json,
kempnerforge_runs.json, fsdp_runs.json) ran, so its published layout must fit under its
framework's profile with the default reserve (the knobs the source does not print set to any
setting its framework runs: tools/calibration/knobs.py). The report lists the layouts that do
not (the target: none), then predicted against printed peak memory for every run that prints
one (torchtitan and nanotron print max_memory_reserved, KempnerForge max_memory_allocated), by
framework: median |error| and the worst under-prediction against the targets 5% and 3%. Last,
what the runs leave free, the evidence for the default reserve: per GPU, the run whose tenants
leave the least of its HBM, and the largest fixed reserve with which every run still fits,
each source left out in turn (the reserve that fits the others, then whether the left-out
source's runs fit under it).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from benchmarks.common import arg_parser, header, table, write_json
from meshplan.solver.schema import SearchSpec
from meshplan.tools.calibration.loaders import load_calibration
from meshplan.tools.calibration.memory import MemoryResult, memory_result

MEDIAN_TARGET, UNDER_TARGET = 0.05, 0.03
RESERVE_STEP = 0.5  # GiB: the default reserve is the largest every run allows, rounded down
QUICK_RUNS = 40  # --quick: the runs with a printed peak and the first of the others


def _pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:+.1%}" if signed else f"{x:.1%}"


def largest_reserve(results: Sequence[MemoryResult], fragmentation: float) -> float:
    """The largest fixed reserve (GiB) with which every one of these runs still fits: the least
    HBM - tenants·(1 + fragmentation) among them (the budget is (HBM - reserve)/(1 + f))."""
    return min(x.hbm_gib - x.used_gib * (1 + fragmentation) for x in results)


def default_rule(most: float) -> float:
    """The default reserve's rule: the largest fixed reserve every run fits with, rounded down
    to a half GiB (1.14 GiB -> the default 1 GiB)."""
    return math.floor(most / RESERVE_STEP) * RESERVE_STEP


def reserve_loso(results: Sequence[MemoryResult], fragmentation: float) -> list[list[object]]:
    """Per source: the largest reserve the other sources allow, the reserve the default's rule
    takes from it (`default_rule`), and whether the source's own runs fit under that (their
    least slack). A "NO" names the source whose runs set the default: without them the rule
    would pick a larger reserve, which refuses them."""
    rows: list[list[object]] = []
    for s in sorted({x.source for x in results}):
        rest = [x for x in results if x.source != s]
        own = [x for x in results if x.source == s]
        r = largest_reserve(rest, fragmentation)
        rule = default_rule(r)
        slack = largest_reserve(own, fragmentation) - rule
        fits = "yes" if slack >= 0 else "NO"
        rows.append([s, len(own), f"{r:.2f}", f"{rule:g}", f"{slack:+.2f}", fits])
    return rows


def summary(xs: Sequence[MemoryResult]) -> tuple[float, float]:
    """(median |error|, worst signed error, 0 if never under)."""
    errs = [x.error for x in xs if x.error is not None]
    return statistics.median(abs(e) for e in errs), min(0.0, *errs)


def run(quick: bool) -> dict[str, object]:
    runs = load_calibration()
    if quick:
        printed = [r for r in runs if r.memory_gib is not None]
        runs = printed + [r for r in runs if r.memory_gib is None][: QUICK_RUNS - len(printed)]
    search = SearchSpec()
    results = [memory_result(r, search) for r in runs]
    return {"search": search, "results": results}


def render(rep: dict[str, object]) -> tuple[str, bool]:
    search: SearchSpec = rep["search"]  # type: ignore[assignment]
    results: list[MemoryResult] = rep["results"]  # type: ignore[assignment]
    out: list[str] = []
    frag = search.memory_fragmentation
    out.append(
        f"{len(results)} runs; default reserve {search.memory_reserve_gib:g} GiB, fragmentation "
        f"{frag:.0%} (usable = (HBM - reserve) / (1 + fragmentation))"
    )
    bad = [x for x in results if not x.fits]
    out.append(f"\npublished layouts that do not fit under their profile: {len(bad)}")
    for x in bad:
        out.append(f"  {x.id} ({x.framework}): {x.why}")
    printed = [x for x in results if x.error is not None]
    out.append("\npeak memory per GPU, predicted on the source's basis against printed:")
    rows = [
        [
            x.id,
            x.framework,
            f"{x.published_gib:.1f}",
            f"{x.predicted_gib:.1f}",
            _pct(x.error, signed=True),
        ]
        for x in sorted(printed, key=lambda x: (x.framework, x.id))
    ]
    out.append(table(["run", "framework", "GiB pub", "GiB pred", "error"], rows))
    by: dict[str, list[MemoryResult]] = {}
    for x in printed:
        by.setdefault(x.framework, []).append(x)
    srows = []
    for fw, xs in sorted(by.items()):
        med, worst = summary(xs)
        srows.append([fw, len(xs), _pct(med), _pct(worst, signed=True)])
    med_all, worst_all = summary(printed) if printed else (0.0, 0.0)
    srows.append(["all", len(printed), _pct(med_all), _pct(worst_all, signed=True)])
    out.append("\n" + table(["framework", "runs", "median |err|", "worst under"], srows))
    out.append(
        "\nwhat the runs leave free (HBM - tenants x (1 + fragmentation)); the tightest per GPU:"
    )
    gpus: dict[float, MemoryResult] = {}
    for x in results:
        cur = gpus.get(x.hbm_gib)
        if cur is None or x.used_gib / x.hbm_gib > cur.used_gib / cur.hbm_gib:
            gpus[x.hbm_gib] = x
    rows = [
        [f"{h:.0f}", x.id, f"{x.used_gib:.1f}", f"{h - x.used_gib * (1 + frag):.2f}"]
        for h, x in sorted(gpus.items())
    ]
    out.append(table(["HBM GiB", "tightest run", "tenants GiB", "left GiB"], rows))
    most = largest_reserve(results, frag)
    out.append(f"largest fixed reserve every run fits with: {most:.2f} GiB")
    out.append(
        f"the default's rule (rounded down to {RESERVE_STEP:g} GiB): {default_rule(most):g} GiB"
    )
    out.append(
        "each source left out (the reserve the others allow, the rule's reserve from it, and "
        "its own runs' margin under that):"
    )
    loso = reserve_loso(results, frag)
    out.append(
        table(
            ["source left out", "runs", "others allow GiB", "rule GiB", "own margin GiB", "fits"],
            loso,
        )
    )
    for row in loso:
        if row[-1] == "NO":
            out.append(
                f"  NO: {row[0]}'s runs are the tightest; without them the rule would pick "
                f"{row[3]} GiB and refuse them (they set the default)"
            )
    verdicts = [
        ("every calibration layout fits", not bad, f"{len(bad)} do not"),
        (
            f"peak memory: median |error| <= {MEDIAN_TARGET:.0%}",
            med_all <= MEDIAN_TARGET,
            _pct(med_all),
        ),
        (
            f"peak memory: never under by > {UNDER_TARGET:.0%}",
            -worst_all <= UNDER_TARGET,
            _pct(worst_all, signed=True),
        ),
    ]
    out.append("\ntargets:")
    out += [f"  {'met   ' if ok else 'MISSED'}  {what}: {got}" for what, ok, got in verdicts]
    met = sum(ok for _, ok, _ in verdicts)
    out.append(
        f"\nsummary: {len(results)} runs, {len(bad)} published layouts refused; peak memory on "
        f"{len(printed)} runs: median |error| {_pct(med_all)}, worst {_pct(worst_all, True)}; "
        f"{met}/{len(verdicts)} targets met"
    )
    return "\n".join(out), not bad


def main(argv: list[str] | None = None) -> int:
    p = arg_parser("memory", __doc__.split("\n\n")[0])
    a = p.parse_args(argv)
    print(header("memory", quick=a.quick), flush=True)
    rep = run(a.quick)
    text, ok = render(rep)
    print(text)
    results: list[MemoryResult] = rep["results"]  # type: ignore[assignment]
    write_json(
        a.json,
        {"benchmark": "memory", "results": [x.model_dump(mode="json") for x in results]},
    )
    return 0 if ok else 1
