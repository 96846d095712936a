"""Scaling series and the GPU-family ceiling of the fidelity benchmark.

A scaling series is a set of published runs of one source that differ only in the GPU count
(and the micro-batch count or data-parallel degree that follows it): the same model, precision,
framework, sequence length, tp, pp, virtual stages, cp, ep, micro-batch size, recomputation and
ZeRO stage. For adjacent counts n1 < n2 of a series, the ratio error is
(predicted tokens/s per GPU at n2 / at n1) / (published at n2 / at n1) − 1: what the model gets
wrong about what a job loses (or keeps) as it grows, with the level error divided out. A count
with two runs (a variant the record does not tell apart, e.g. torch.compile) is left out.

The ceiling: no A100 prediction (the runs scored out of sample, and the planner's optimum of
the A100 plans below) above the best published A100 MFU by more than 5%.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from benchmarks.common import table
from meshplan.solver import plan
from meshplan.solver.schema import PlanRequest
from meshplan.tools.calibration.loaders import CalibrationRun
from meshplan.tools.calibration.score import RunResult

RATIO_MEDIAN_TARGET, RATIO_MAX_TARGET = 0.02, 0.05
CEILING_MARGIN = 0.05
# The planner's free optimum on A100: the dense plan a new user runs first (llama2-70b on 64
# A100 80 GB at 2K, 4M tokens) and a larger one.
A100_PLANS = (
    {"model": "llama2-70b", "num_gpus": 64, "seq_len": 2048, "tokens": 4_194_304},
    {"model": "gpt3-175b", "num_gpus": 1024, "seq_len": 2048, "tokens": 3_145_728},
)


def _key(r: CalibrationRun) -> tuple:
    c, t = r.config, r.training
    return (
        r.source,
        r.model.model_dump_json(),
        r.cluster.gpu,
        t.precision,
        t.framework,
        t.seq_len,
        c.tp,
        c.pp,
        c.virtual_stages,
        c.cp,
        c.ep,
        c.micro_batch_size,
        c.recompute,
        c.zero_stage,
    )


def series(runs: Sequence[CalibrationRun]) -> list[list[int]]:
    """Positions of the runs of each scaling series, by GPU count (series of 2+ counts)."""
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(runs):
        groups.setdefault(_key(r), []).append(i)
    out = []
    for idx in groups.values():
        counts = [runs[i].cluster.num_gpus for i in idx]
        keep = sorted(
            (i for i in idx if counts.count(runs[i].cluster.num_gpus) == 1),
            key=lambda i: runs[i].cluster.num_gpus,
        )
        if len(keep) >= 2:
            out.append(keep)
    return out


def ratio_errors(
    runs: Sequence[CalibrationRun], results: Sequence[RunResult]
) -> list[tuple[str, str, float, float, float]]:
    """(run at n1, run at n2, published ratio, predicted ratio, ratio error) of adjacent counts."""
    out = []
    for idx in series(runs):
        for i, j in zip(idx, idx[1:], strict=False):
            a, b = results[i], results[j]
            pub = b.published_tokens_per_s_per_gpu / a.published_tokens_per_s_per_gpu
            pred = b.predicted_tokens_per_s_per_gpu / a.predicted_tokens_per_s_per_gpu
            out.append((runs[i].id, runs[j].id, pub, pred, pred / pub - 1))
    return out


def scaling_report(
    runs: Sequence[CalibrationRun], results: Sequence[RunResult]
) -> tuple[str, list[tuple[str, bool, str]], dict[str, object]]:
    """The adjacent-count table, its targets and a JSON summary (leave-one-source-out results)."""
    errs = ratio_errors(runs, results)
    rows = [
        [
            a,
            runs[[r.id for r in runs].index(b)].cluster.num_gpus,
            f"{p:.3f}",
            f"{q:.3f}",
            f"{e:+.1%}",
        ]
        for a, b, p, q, e in errs
    ]
    text = table(["from run", "to GPUs", "published ratio", "predicted", "ratio error"], rows)
    absval = [abs(e) for *_, e in errs]
    med = float(np.median(absval)) if absval else float("nan")
    worst = max(absval, default=float("nan"))
    targets = [
        (
            "scaling series: adjacent-count ratio |error| median <= 2%",
            med <= RATIO_MEDIAN_TARGET,
            f"{med:.1%}",
        ),
        (
            "scaling series: adjacent-count ratio |error| max <= 5%",
            worst <= RATIO_MAX_TARGET,
            f"{worst:.1%}",
        ),
    ]
    summary = {
        "pairs": len(errs),
        "median_abs": med,
        "max_abs": worst,
        "rows": [
            dict(zip(("from", "to", "published", "predicted", "error"), x, strict=True))
            for x in errs
        ],
    }
    return text, targets, summary


def a100_ceiling(
    runs: Sequence[CalibrationRun], results: Sequence[RunResult], time_limit: float = 10.0
) -> tuple[str, list[tuple[str, bool, str]], dict[str, object]]:
    """Every A100 prediction (left-out runs, and the A100 plans' optima) against the best
    published A100 MFU."""
    a100 = [(r, x) for r, x in zip(runs, results, strict=True) if r.cluster.gpu.startswith("a100")]
    if not a100:
        return "", [], {}
    best = max(x.published_mfu for _, x in a100)
    cap = best * (1 + CEILING_MARGIN)
    top_run = max(a100, key=lambda rx: rx[1].predicted_mfu)
    rows = [[top_run[0].id, f"{top_run[1].predicted_mfu:.1%}", "left-out score at its layout"]]
    preds = [top_run[1].predicted_mfu]
    for p in A100_PLANS:
        req = PlanRequest.model_validate(
            {
                "model": {"preset": p["model"]},
                "cluster": {"gpu": "a100-sxm-80gb", "num_gpus": p["num_gpus"]},
                "training": {"seq_len": p["seq_len"], "global_batch_tokens": p["tokens"]},
                "options": {"explain": False, "time_limit_s": time_limit},
            }
        )
        res = plan(req)
        if res.performance is not None:
            preds.append(res.performance.mfu)
            rows.append(
                [
                    f"plan {p['model']} on {p['num_gpus']} A100",
                    f"{res.performance.mfu:.1%}",
                    "the planner's optimum",
                ]
            )
    worst = max(preds)
    text = table(["prediction", "MFU", "what"], rows) + (
        f"\nbest published A100 MFU {best:.1%}; ceiling {cap:.1%}"
    )
    targets = [
        (
            f"A100: no prediction above the best A100 run ({best:.1%}) by more than 5%",
            worst <= cap,
            f"{worst:.1%}",
        )
    ]
    return text, targets, {"best_published": best, "worst_predicted": worst, "rows": rows}
