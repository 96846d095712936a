"""Published training runs against the cost model: scoring and error summaries.

The runs themselves (`CalibrationRun`, the loaders of the three vendored files, each source's
conventions and defaults) live in `tools/calibration/loaders.py` and are re-exported here. Speed
is compared as tokens/s per GPU, and as MFU in the planner's convention: (6·N_active without
the input embedding + 12·L·h·s) per token / (GPUs × dense BF16 peak), no causal halving
(solver/arch.py). Peak memory in GiB per GPU is compared with the tenants alone (`allocated`:
KempnerForge's max_memory_allocated) or with the tenants plus the fragmentation share of the
reserve (`reserved`: torchtitan's max_memory_reserved). `scripts/fit_constants.py` and
`benchmarks/fidelity.py` share this module.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from meshplan.solver.arch import resolve_model
from meshplan.solver.costmodel import CostModel, Point
from meshplan.solver.costmodel.band import cell_key, family_of
from meshplan.solver.costmodel.constants import Constants
from meshplan.solver.costmodel.context import recipe_of
from meshplan.solver.hardware import resolve_cluster
from meshplan.solver.schema import ParallelConfig
from meshplan.tools.calibration.knobs import candidates, setting
from meshplan.tools.calibration.loaders import (
    CATEGORIES,
    CONVERSIONS,
    DEFAULT_MEGATRON,
    DEFAULT_PUBLISHED,
    DEFAULTS,
    FRAMEWORKS,
    SOURCES,
    CalibrationRun,
    load_all,
    load_kempnerforge,
    load_megatron,
    load_published,
    megatron_flops_per_token,
)
from meshplan.tools.calibration.memory import memory_cost_model, predicted_peak_gib

__all__ = [
    "CATEGORIES",
    "CONVERSIONS",
    "DEFAULTS",
    "DEFAULT_MEGATRON",
    "DEFAULT_PUBLISHED",
    "FRAMEWORKS",
    "SOURCES",
    "CalibrationRun",
    "ErrorSummary",
    "RunResult",
    "evaluate_run",
    "evaluate_runs",
    "load_all",
    "load_kempnerforge",
    "load_megatron",
    "load_published",
    "megatron_flops_per_token",
    "summarize",
    "summarize_by_category",
    "summarize_by_family",
    "loso_report",
    "summarize_by_source",
    "with_constants",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunResult(_Strict):
    """Predicted against published, for one run."""

    id: str = Field(description="Run identifier.")
    source: str = Field(description="Source group.")
    category: str = Field(description="BF16-dense, FP8-dense or MoE.")
    family: str = Field(description="Kernel family of the run's framework profile: TE or TORCH.")
    published_mfu: float = Field(description="Published speed as MFU in our convention.")
    predicted_mfu: float = Field(description="Cost model's MFU at the published layout.")
    mfu_error: float = Field(description="predicted / published − 1 (same for tokens/s).")
    published_tokens_per_s_per_gpu: float = Field(description="Published tokens/s per GPU.")
    predicted_tokens_per_s_per_gpu: float = Field(description="Predicted tokens/s per GPU.")
    published_memory_gib: float | None = Field(description="Published peak memory (GiB).")
    predicted_memory_gib: float | None = Field(description="Predicted on the same basis (GiB).")
    memory_error: float | None = Field(description="predicted / published − 1 (< 0: under).")
    config: ParallelConfig = Field(description="The layout scored: the published one, tuned.")
    setting: dict[str, int | str] = Field(
        description="The chosen values of the knobs the source does not state (empty if none)."
    )


# ---- scoring -------------------------------------------------------------------------------


def evaluate_run(
    run: CalibrationRun,
    constants: Constants | None = None,
    memory: bool = True,
    tune: bool = True,
) -> RunResult:
    """Score one run with the cost model at its published layout (as Evaluate does), its
    unstated knobs at their fastest candidate setting (tools/calibration/knobs.py) unless
    `tune` is off (then at the source's stated default)."""
    A, H = resolve_model(run.model), resolve_cluster(run.cluster)
    cm = speed_model(run, constants)
    configs = candidates(run) if tune else (run.config,)
    scored = [(cm.performance(Point.from_config(c)), c) for c in configs]
    perf, config = max(scored, key=lambda x: x[0].tokens_per_s)
    p = Point.from_config(config)
    flops = A.model_flops_per_token(run.training.seq_len)
    pub_mfu = run.tokens_per_s_per_gpu * flops / H.peak_bf16
    pred_tps = perf.tokens_per_s / p.lay.gpus
    mem_pred = mem_err = None
    if memory and run.memory_gib is not None:
        # as benchmarks/memory.py scores it (tools/calibration/memory.py), at the scored layout
        mcm = memory_cost_model(run, constants=constants)
        mem_pred = predicted_peak_gib(run, mcm, config)
        mem_err = mem_pred / run.memory_gib - 1
    return RunResult(
        id=run.id,
        source=run.source,
        category=run.category,
        family=family_of(run.training.framework),
        published_mfu=pub_mfu,
        predicted_mfu=perf.mfu,
        mfu_error=perf.mfu / pub_mfu - 1,
        published_tokens_per_s_per_gpu=run.tokens_per_s_per_gpu,
        predicted_tokens_per_s_per_gpu=pred_tps,
        published_memory_gib=run.memory_gib,
        predicted_memory_gib=mem_pred,
        memory_error=mem_err,
        config=config,
        setting=setting(run, config),
    )


def speed_model(run: CalibrationRun, constants: Constants | None = None) -> CostModel:
    """The cost model that times a run: its request's, with what its framework version did
    that the profile does not say (K,V repeated before attention: what cp exchanges; whether
    its PyTorch stops recomputation early)."""
    A, H = resolve_model(run.model), resolve_cluster(run.cluster)
    if not run.kv_repeated and run.recompute_stops_early is None:
        return CostModel(A, H, run.training, run.search, constants)
    rec = recipe_of(run.training)
    if run.kv_repeated:
        rec = replace(rec, kv_repeated=True)
    if run.recompute_stops_early is not None:
        rec = replace(rec, recompute_stops_early=run.recompute_stops_early)
    return CostModel(A, H, run.training, run.search, constants, recipe=rec)


def evaluate_runs(
    runs: Iterable[CalibrationRun],
    constants: Constants | None = None,
    memory: bool = True,
    tune: bool = True,
) -> list[RunResult]:
    return [evaluate_run(r, constants, memory, tune) for r in runs]


class ErrorSummary(_Strict):
    """Error statistics of one group of runs."""

    n_speed: int = Field(description="Runs with a published speed (count).")
    mfu_median: float = Field(description="Median |relative error| of MFU (= of tokens/s).")
    mfu_p90: float = Field(description="90th percentile |relative error| of MFU.")
    mfu_bias: float = Field(description="Median signed error of MFU (> 0: too optimistic).")
    n_memory: int = Field(description="Runs with a published peak memory (count).")
    memory_median: float | None = Field(description="Median |relative error| of peak memory.")
    memory_worst_under: float | None = Field(
        description="Most negative relative memory error (0 if never under-predicted)."
    )


def _pct(xs: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs, dtype=float), q))


def summarize(results: Sequence[RunResult]) -> ErrorSummary:
    e = [abs(r.mfu_error) for r in results]
    m = [r.memory_error for r in results if r.memory_error is not None]
    return ErrorSummary(
        n_speed=len(e),
        mfu_median=_pct(e, 50) if e else math.nan,
        mfu_p90=_pct(e, 90) if e else math.nan,
        mfu_bias=_pct([r.mfu_error for r in results], 50) if e else math.nan,
        n_memory=len(m),
        memory_median=_pct([abs(x) for x in m], 50) if m else None,
        memory_worst_under=min(0.0, *m) if m else None,
    )


def summarize_by_source(results: Sequence[RunResult]) -> dict[str, ErrorSummary]:
    """One summary per source (in SOURCES order) and one for all runs ('all')."""
    out = {
        s: summarize([r for r in results if r.source == s])
        for s in SOURCES
        if any(r.source == s for r in results)
    }
    out["all"] = summarize(results)
    return out


def summarize_by_category(results: Sequence[RunResult]) -> dict[str, ErrorSummary]:
    """One summary per category (BF16-dense, FP8-dense, MoE) and one for all runs ('all')."""
    out = {
        c: summarize([r for r in results if r.category == c])
        for c in CATEGORIES
        if any(r.category == c for r in results)
    }
    out["all"] = summarize(results)
    return out


def summarize_by_family(results: Sequence[RunResult]) -> dict[str, ErrorSummary]:
    """One summary per kernel family of the runs' frameworks (TE, TORCH) and one for all."""
    fams = sorted({r.family for r in results})
    out = {f: summarize([r for r in results if r.family == f]) for f in fams}
    out["all"] = summarize(results)
    return out


def loso_report(results: Sequence[RunResult]) -> dict[str, Any]:
    """The leave-one-source-out residuals' summaries that solver/costmodel/band.py reads: per
    cell (category × kernel family), per category, per family, and over all runs."""
    cells: dict[str, list[RunResult]] = {}
    for r in results:
        cells.setdefault(cell_key(r.category, r.family), []).append(r)
    cats = summarize_by_category(results)
    return {
        "cells": {k: summarize(v).model_dump() for k, v in sorted(cells.items())},
        "categories": {k: v.model_dump() for k, v in cats.items() if k != "all"},
        "families": {k: v.model_dump() for k, v in summarize_by_family(results).items()},
        "all": cats["all"].model_dump(),
    }


def with_constants(base: Constants, values: dict[str, Any]) -> Constants:
    """`base` with some fields replaced; dict fields (eta) are merged, not replaced."""
    upd = {}
    for k, v in values.items():
        cur = getattr(base, k)
        upd[k] = {**cur, **v} if isinstance(cur, dict) else v
    return replace(base, **upd)
