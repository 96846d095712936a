"""Fit the cost model's efficiency constants to the published runs and seed 001.

    .venv/bin/python scripts/fit_constants.py [--published PATH] [--out PATH] [--max-evals N]

Reads tools/data/calibration/published_runs.json (or --published) and seed 001's measurements
(tools/data/seed001_runs.json), scores every run at its published layout with the cost model
(tools/calibration.py), and fits the constants of solver/costmodel/constants.py that speed
depends on: the achievable fraction of peak per GPU, the FP8 gain, the GEMM width penalty, the
exposed fractions of tp and cp traffic, the dp/FSDP overlap, the link efficiency and the fixed
cost per layer. The loss is a pseudo-Huber of log(predicted / published tokens/s), each source
weighted equally; the search is Nelder-Mead from the priors, over bounded parameters. Memory is
not fitted (it has no efficiency constant) but its error is printed. Writes
solver/costmodel/fitted.json, which constants.py loads, and prints the error per source before
(priors) and after.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a plain script from a checkout
    sys.path.insert(0, str(ROOT))

from meshplan.solver.costmodel.constants import Constants  # noqa: E402
from meshplan.tools.calibration import (  # noqa: E402
    DEFAULT_PUBLISHED,
    CalibrationRun,
    ErrorSummary,
    evaluate_runs,
    load_all,
    summarize_by_source,
    with_constants,
)

DEFAULT_OUT = ROOT / "solver" / "costmodel" / "fitted.json"
HUBER = 0.10  # pseudo-Huber scale of the log error: ~10% errors count quadratically


@dataclass(frozen=True)
class Param:
    """One fitted constant: a field of Constants (or one eta entry) within bounds."""

    name: str  # "eta:<gpu or family>" or a Constants field
    lo: float
    hi: float

    def get(self, k: Constants) -> float:
        if self.name.startswith("eta:"):
            return k.eta[self.name[4:]] if self.name[4:] in k.eta else min(k.eta.values())
        return float(getattr(k, self.name))


PARAMS = (
    Param("eta:A100", 0.30, 0.95),
    Param("eta:H100", 0.30, 0.95),
    Param("eta:h100-sxm-96gb", 0.20, 0.95),  # torchtitan's 500 W HBM2e H100s
    Param("eta:H200", 0.30, 0.95),
    Param("fp8_gain", 1.00, 2.00),
    Param("width0", 0.0, 2048.0),
    Param("eps_tp", 0.0, 1.0),
    Param("eps_cp", 0.0, 1.0),
    Param("omega", 0.0, 1.0),
    Param("link_eff", 0.30, 1.0),
    Param("kappa0", 0.0, 500e-6),
)


def constants_of(base: Constants, values: Sequence[float]) -> Constants:
    upd: dict[str, object] = {}
    eta: dict[str, float] = {}
    for p, v in zip(PARAMS, values, strict=True):
        if p.name.startswith("eta:"):
            eta[p.name[4:]] = float(v)
        else:
            upd[p.name] = float(v)
    if eta:
        upd["eta"] = eta
    return with_constants(base, upd)


def _to_unit(p: Param, v: float) -> float:  # bounded value -> unconstrained (logit)
    u = min(max((v - p.lo) / (p.hi - p.lo), 1e-6), 1 - 1e-6)
    return math.log(u / (1 - u))


def _from_unit(p: Param, x: float) -> float:
    return p.lo + (p.hi - p.lo) / (1 + math.exp(-x))


def loss(runs: Sequence[CalibrationRun], k: Constants) -> float:
    """Mean over sources of the mean pseudo-Huber log error of tokens/s."""
    by: dict[str, list[float]] = {}
    for r in evaluate_runs(runs, k, memory=False):
        e = math.log(r.predicted_mfu / r.published_mfu)
        by.setdefault(r.source, []).append(HUBER**2 * (math.sqrt(1 + (e / HUBER) ** 2) - 1))
    return sum(sum(v) / len(v) for v in by.values()) / len(by)


def nelder_mead(
    f: Callable[[np.ndarray], float], x0: np.ndarray, max_evals: int, step: float = 0.5
) -> tuple[np.ndarray, float, int]:
    """Plain Nelder-Mead (standard coefficients), deterministic; returns (x, f(x), evals)."""
    n = len(x0)
    simplex = [x0.copy()] + [x0 + step * np.eye(n)[i] for i in range(n)]
    values = [f(x) for x in simplex]
    evals = n + 1
    while evals < max_evals:
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if values[-1] - values[0] < 1e-10:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        xr = centroid + (centroid - simplex[-1])
        fr = f(xr)
        evals += 1
        if fr < values[0]:
            xe = centroid + 2 * (centroid - simplex[-1])
            fe = f(xe)
            evals += 1
            simplex[-1], values[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = xr, fr
        else:
            xc = centroid + 0.5 * (simplex[-1] - centroid)
            fc = f(xc)
            evals += 1
            if fc < values[-1]:
                simplex[-1], values[-1] = xc, fc
            else:  # shrink towards the best
                for i in range(1, n + 1):
                    simplex[i] = simplex[0] + 0.5 * (simplex[i] - simplex[0])
                    values[i] = f(simplex[i])
                evals += n
    best = int(np.argmin(values))
    return simplex[best], values[best], evals


def _values(x: np.ndarray) -> list[float]:
    return [_from_unit(p, v) for p, v in zip(PARAMS, x, strict=True)]


def fit(
    runs: Sequence[CalibrationRun], base: Constants, max_evals: int
) -> tuple[Constants, float, int]:
    """Nelder-Mead from `base` over PARAMS: (fitted constants, loss, evaluations used)."""
    x0 = np.array([_to_unit(p, p.get(base)) for p in PARAMS])

    def f(x: np.ndarray) -> float:
        return loss(runs, constants_of(base, _values(x)))

    x, fx, evals = x0, f(x0), 1
    for step in (1.0, 0.3):  # a restart from the best point with a smaller simplex
        if evals >= max_evals:
            break
        x, fx, used = nelder_mead(f, x, max_evals - evals, step)
        evals += used
    return constants_of(base, _values(x)), fx, evals


def _fmt(v: float | None) -> str:
    return "   -  " if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:6.1%}"


def table(before: dict[str, ErrorSummary], after: dict[str, ErrorSummary]) -> str:
    head = (
        f"{'source':16s} {'runs':>4s}  {'MFU median':>17s}  {'MFU p90':>17s}  "
        f"{'mem median':>17s}  {'mem worst under':>17s}"
    )
    lines = [head, f"{'':16s} {'':>4s}  " + "  ".join(f"{'before  after':>17s}" for _ in range(4))]
    for s, a in after.items():
        b = before[s]
        cells = [
            (b.mfu_median, a.mfu_median),
            (b.mfu_p90, a.mfu_p90),
            (b.memory_median, a.memory_median),
            (b.memory_worst_under, a.memory_worst_under),
        ]
        lines.append(
            f"{s:16s} {a.n_speed:4d}  " + "  ".join(f"{_fmt(x)} → {_fmt(y)}" for x, y in cells)
        )
    return "\n".join(lines)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _summary_json(s: dict[str, ErrorSummary]) -> dict[str, dict[str, float | int | None]]:
    return {k: v.model_dump() for k, v in s.items()}


def p_get(name: str, k: Constants) -> float:
    return next(p for p in PARAMS if p.name == name).get(k)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--published", type=Path, default=DEFAULT_PUBLISHED, help="published_runs.json")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write fitted.json")
    ap.add_argument("--max-evals", type=int, default=4000, help="loss evaluations (default 4000)")
    ap.add_argument("--dry-run", action="store_true", help="print, do not write")
    a = ap.parse_args(argv)
    if not a.published.exists():
        print(f"error: {a.published} not found (pass --published)", file=sys.stderr)
        return 2
    runs = load_all(a.published)
    prior = Constants()  # refit from the priors, never from an earlier fit
    before = summarize_by_source(evaluate_runs(runs, prior))
    k, fx, evals = fit(runs, prior, a.max_evals)
    after = summarize_by_source(evaluate_runs(runs, k))
    print(f"{len(runs)} runs; loss {loss(runs, prior):.5f} -> {fx:.5f} in {evals} evaluations\n")
    print("absolute relative error of MFU (= of tokens/s) and of peak memory, priors → fitted")
    print(table(before, after))
    fitted = {p.name: round(p.get(k), 6 if p.name != "kappa0" else 9) for p in PARAMS}
    print("\nfitted constants:")
    for name, v in fitted.items():
        print(f"  {name:20s} {v:.6g}   (prior {p_get(name, prior):.6g})")
    if a.dry_run:
        return 0
    seed_path = ROOT / "tools" / "data" / "seed001_runs.json"
    constants = {
        "eta": {n[4:]: v for n, v in fitted.items() if n.startswith("eta:")},
        **{n: v for n, v in fitted.items() if not n.startswith("eta:")},
    }
    doc = {
        "constants": constants,
        "fit": {
            "script": "scripts/fit_constants.py",
            "command": " ".join(["python scripts/fit_constants.py", *(argv or sys.argv[1:])]),
            "data": {
                "published_runs.json": _sha256(a.published),
                "seed001_runs.json": _sha256(seed_path),
            },
            "runs": len(runs),
            "loss": {"prior": loss(runs, prior), "fitted": fx, "evaluations": evals},
            "priors": {p.name: p_get(p.name, prior) for p in PARAMS},
            "errors_before": _summary_json(before),
            "errors_after": _summary_json(after),
            "unfitted": {
                k2: v
                for k2, v in asdict(k).items()
                if k2 not in constants and k2 != "eta" and not isinstance(v, dict)
            },
        },
    }
    a.out.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\nwrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
