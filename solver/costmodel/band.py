"""The expected error of a prediction: how far the cost model's tokens/s fell from published runs
of the same kind that the fit never saw.

`scripts/fit_constants.py` scores every published run with constants fitted on every other
source (leave one source out) and stores the residuals' summaries in fitted.json (`fit.loso`),
per cell (category × kernel family), per category and per family. A prediction's band is its
cell's when at least MIN_RUNS runs fall in it, else its category's, else all runs': error e =
predicted / measured − 1, so with |e| ≤ the p90 the measured rate lies in
[predicted / (1 + p90), predicted / (1 − p90)].
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path
from typing import Any

from meshplan.solver.profiles import profile_of
from meshplan.solver.results import ErrorBand
from meshplan.solver.schema import Framework, Precision

MIN_RUNS = 5  # fewest left-out runs a cell's band is read from (else its category's)
MAX_ERROR = 0.9  # the band's slow end never reaches zero
FAMILY_WORDS = {"TE": "Transformer Engine kernels", "TORCH": "PyTorch-native kernels"}


def category_of(moe: bool, precision: Precision) -> str:
    """The calibration data's category: MoE, FP8-dense or BF16-dense."""
    if moe:
        return "MoE"
    return "FP8-dense" if precision is Precision.FP8 else "BF16-dense"


def family_of(framework: Framework) -> str:
    """The framework's kernel family (its profile's `timing.kernels`: TE or TORCH)."""
    return profile_of(framework).timing.kernels


def cell_key(category: str, family: str) -> str:
    return f"{category}|{family}"


@cache
def loso_report() -> dict[str, Any] | None:
    """fitted.json's `fit.loso` section, or None when the shipped fit carries none."""
    try:
        text = (Path(__file__).parent / "fitted.json").read_text(encoding="utf-8")
        got = json.loads(text)["fit"]["loso"]
    except (FileNotFoundError, KeyError, TypeError, ValueError):
        return None
    return got if isinstance(got, dict) else None


def _usable(s: object) -> bool:
    return (
        isinstance(s, dict)
        and int(s.get("n_speed", 0)) >= MIN_RUNS
        and all(math.isfinite(float(s.get(k, math.nan))) for k in ("mfu_median", "mfu_p90"))
    )


def error_band(
    moe: bool, precision: Precision, framework: Framework, tokens_per_s: float
) -> ErrorBand | None:
    """The band of a prediction of `tokens_per_s` for a plan of this kind (None: no report)."""
    rep = loso_report()
    if rep is None:
        return None
    cat, fam = category_of(moe, precision), family_of(framework)
    words = FAMILY_WORDS.get(fam, fam)
    choices = (
        ("cell", rep.get("cells", {}).get(cell_key(cat, fam)), f"{cat}, {words}"),
        ("category", rep.get("categories", {}).get(cat), f"{cat}, every framework"),
        ("all", rep.get("all"), "every published run"),
    )
    usable = [c for c in choices if _usable(c[1])]
    if not usable:
        return None
    scope, summary, label = usable[0]
    p90 = min(float(summary["mfu_p90"]), MAX_ERROR)
    bias = float(summary.get("mfu_bias", 0.0))
    n = int(summary["n_speed"])
    return ErrorBand(
        category=label,
        scope=scope,
        num_runs=n,
        median_error=float(summary["mfu_median"]),
        p90_error=p90,
        signed_median_error=bias,
        low_tokens_per_s=tokens_per_s / (1 + p90),
        high_tokens_per_s=tokens_per_s / (1 - p90),
        basis=(
            f"leave-one-source-out error of tokens/s over {n} published runs ({label}): each "
            "scored by constants fitted without its source; the range holds 90% of them"
        ),
    )
