"""Fit the time model's efficiency constants to every vendored published run.

    .venv/bin/python scripts/fit_constants.py [--out PATH] [--max-iter N] [--dry-run]

Reads tools/calibration/published/published_runs.json and megatron_h100_runs.json, the KempnerForge
scaling guide's measurements (tools/calibration/published/kempnerforge_runs.json) and the llm-foundry
and nanotron tables (tools/calibration/published/fsdp_runs.json), scores every run at its published
layout with the cost model (tools/calibration/score.py; the knobs a source does not state at their fastest
setting the framework runs, tools/calibration/knobs.py), and fits the constants of
solver/costmodel/constants.py that speed depends on (tools/calibration/fit.py: a maximum a
posteriori Levenberg-Marquardt fit of the pseudo-Huber log error of tokens/s, each source weighted
equally, each constant pulled weakly towards its physical prior). Prints the in-sample error per
source and per category before (priors) and after, the constants with their priors and bounds
(flagging any at a bound), and writes solver/costmodel/fitted.json, which every CostModel loads,
with the hashes of the data it was fitted on and the leave-one-source-out residuals' summaries
per category and kernel family (the error band every prediction carries,
solver/costmodel/band.py). The full out-of-sample report is `python -m benchmarks fidelity`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a plain script from a checkout
    sys.path.insert(0, str(ROOT))

from meshplan.solver.costmodel.constants import Constants  # noqa: E402
from meshplan.tools.calibration.fit import (  # noqa: E402
    PARAMS,
    fit,
    leave_one_source_out,
    prepare,
)
from meshplan.tools.calibration.loaders import DEFAULT_FSDP, load_all, load_fsdp  # noqa: E402
from meshplan.tools.calibration.routing import PAIRS as ROUTING_PAIRS  # noqa: E402
from meshplan.tools.calibration.routing import fit_load_cv  # noqa: E402
from meshplan.tools.calibration.score import (  # noqa: E402
    DEFAULT_MEGATRON,
    DEFAULT_PUBLISHED,
    ErrorSummary,
    evaluate_runs,
    loso_report,
    summarize_by_category,
    summarize_by_source,
)

DEFAULT_OUT = ROOT / "solver" / "costmodel" / "fitted.json"
KEMPNERFORGE = ROOT / "tools" / "calibration" / "published" / "kempnerforge_runs.json"


def _fmt(v: float | None, signed: bool = False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "   -  "
    return f"{v:+6.1%}" if signed else f"{v:6.1%}"


def table(before: dict[str, ErrorSummary], after: dict[str, ErrorSummary], label: str) -> str:
    head = f"{label:16s} {'runs':>4s}  {'median |err|':>17s}  {'p90 |err|':>17s}  {'signed median':>17s}"
    lines = [head, f"{'':16s} {'':>4s}  " + "  ".join(f"{'prior  fitted':>17s}" for _ in range(3))]
    for s, a in after.items():
        b = before[s]
        cells = [
            (_fmt(b.mfu_median), _fmt(a.mfu_median)),
            (_fmt(b.mfu_p90), _fmt(a.mfu_p90)),
            (_fmt(b.mfu_bias, True), _fmt(a.mfu_bias, True)),
        ]
        lines.append(f"{s:16s} {a.n_speed:4d}  " + "  ".join(f"{x} → {y}" for x, y in cells))
    return "\n".join(lines)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    ap.add_argument("--published", type=Path, default=DEFAULT_PUBLISHED, help="published_runs.json")
    ap.add_argument(
        "--megatron", type=Path, default=DEFAULT_MEGATRON, help="megatron_h100_runs.json"
    )
    ap.add_argument("--fsdp", type=Path, default=DEFAULT_FSDP, help="fsdp_runs.json")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write fitted.json")
    ap.add_argument("--max-iter", type=int, default=40, help="Levenberg-Marquardt iterations")
    ap.add_argument("--dry-run", action="store_true", help="print, do not write")
    ap.add_argument(
        "--jobs", type=int, default=2, help="processes for the leave-one-source-out fits"
    )
    ap.add_argument(
        "--no-tune",
        action="store_true",
        help="score runs at the sources' stated defaults, not at the best setting of the knobs "
        "a source does not state (tools/calibration/knobs.py)",
    )
    a = ap.parse_args(argv)
    for path in (a.published, a.megatron, a.fsdp):
        if not path.exists():
            print(f"error: {path} not found", file=sys.stderr)
            return 2
    t0 = time.perf_counter()
    runs = load_all(a.published, a.megatron) + load_fsdp(a.fsdp)
    prior = Constants()  # refit from the priors, never from an earlier fit
    tune = not a.no_tune
    prep = prepare(runs, tune)
    before = evaluate_runs(runs, prior, memory=False, tune=tune)
    result = fit(runs, prior, max_iter=a.max_iter, prep=prep)
    k = result.constants
    after = evaluate_runs(runs, k, memory=False, tune=tune)
    print(
        f"{len(runs)} runs; loss {result.loss:.5f} after {result.evaluations} evaluations in "
        f"{time.perf_counter() - t0:.1f} s (in-sample: the fit saw every run)\n"
    )
    print("tokens/s per GPU, predicted / published − 1, priors → fitted:")
    print(table(summarize_by_source(before), summarize_by_source(after), "source"))
    print()
    print(table(summarize_by_category(before), summarize_by_category(after), "category"))
    fitted = {p.name: p.get(k) for p in PARAMS}
    cv, pairs = fit_load_cv(k)
    k = replace(k, moe_load_cv=cv)
    fitted["moe_load_cv"] = cv
    print(
        f"\nmoe_load_cv {cv:.3f} from the MoE model zoo's forced / dropless pairs "
        "(tools/calibration/published/moezoo_dropless.json), dropless / forced step time:"
    )
    for measured, predicted in pairs:
        print(f"  measured {measured:.3f}  predicted {predicted:.3f}")
    print("\nfitted constants (prior; bounds):")
    for p in PARAMS:
        flag = "   AT BOUND" if p.name in result.at_bound else ""
        print(
            f"  {p.name:22s} {fitted[p.name]:<10.4g} ({p.get(prior):.4g}; {p.lo:g}..{p.hi:g}){flag}"
        )
    if result.at_bound:
        print(f"\nat a bound: {', '.join(result.at_bound)}")
    t1 = time.perf_counter()
    loso = leave_one_source_out(runs, jobs=a.jobs, max_iter=a.max_iter, tune=tune)
    report = loso_report(loso)
    print(
        f"\nleave-one-source-out ({time.perf_counter() - t1:.0f} s; each source scored by a fit "
        "on the others; the error band every prediction carries):"
    )
    for name, v in report["cells"].items():
        print(
            f"  {name:20s} {v['n_speed']:4d} runs  median {_fmt(v['mfu_median'])}  p90 "
            f"{_fmt(v['mfu_p90'])}  signed {_fmt(v['mfu_bias'], True)}"
        )
    if a.dry_run:
        return 0
    constants: dict[str, object] = {}
    for name, v in fitted.items():
        if ":" in name:
            field, key = name.split(":")
            constants.setdefault(field, {})[key] = round(v, 6)  # type: ignore[union-attr]
        else:
            constants[name] = round(v, 9 if v < 1e-3 else 6)
    doc = {
        "constants": constants,
        "fit": {
            "script": "scripts/fit_constants.py",
            "command": " ".join(["python scripts/fit_constants.py", *(argv or sys.argv[1:])]),
            "data": {
                "published_runs.json": _sha256(a.published),
                "megatron_h100_runs.json": _sha256(a.megatron),
                "kempnerforge_runs.json": _sha256(KEMPNERFORGE),
                "fsdp_runs.json": _sha256(a.fsdp),
                "moezoo_dropless.json": _sha256(ROUTING_PAIRS),
            },
            "runs": len(runs),
            "unstated_knobs_tuned": tune,
            "loss": result.loss,
            "evaluations": result.evaluations,
            "priors": {p.name: p.get(prior) for p in PARAMS},
            "moe_load_cv_pairs": [{"measured": m, "predicted": q} for m, q in pairs],
            "bounds": {p.name: [p.lo, p.hi] for p in PARAMS},
            "at_bound": list(result.at_bound),
            "in_sample_by_source": {
                s: v.model_dump() for s, v in summarize_by_source(after).items()
            },
            "in_sample_by_category": {
                s: v.model_dump() for s, v in summarize_by_category(after).items()
            },
            "loso": report,
        },
    }
    a.out.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\nwrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
