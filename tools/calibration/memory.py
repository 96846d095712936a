"""Every vendored run's memory under its framework profile: whether its published layout fits
(the run ran, so it must), and, where the source prints a peak, the predicted peak on the
source's basis against it.

A run fits when its layout obeys its profile's rules and, at the published layout with the
knobs the source does not print set to any setting its framework runs (tools/calibration/knobs.py),
the memory model's tenants fit the usable budget (HBM less the reserve, over 1 + fragmentation:
solver/costmodel/context.py). A printed peak is compared on the stage the source read it on,
`allocated` (max_memory_allocated) with the tenants, `reserved` (max_memory_reserved) with the
tenants and the fragmentation share (`predicted_peak_gib`, which tools/calibration/score.py
uses too).
"""

from __future__ import annotations

from dataclasses import replace

from pydantic import BaseModel, ConfigDict, Field

from meshplan.solver.arch import resolve_model
from meshplan.solver.costmodel import CostModel, Point
from meshplan.solver.costmodel.constants import Constants
from meshplan.solver.costmodel.context import recipe_of
from meshplan.solver.costmodel.model import MEMORY_UNIT
from meshplan.solver.hardware import GIB, resolve_cluster
from meshplan.solver.schema import ParallelConfig, SearchSpec
from meshplan.solver.space import Batch, violations
from meshplan.tools.calibration.runs import CalibrationRun


class MemoryResult(BaseModel):
    """One run's memory under its profile."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(description="Run identifier.")
    source: str = Field(description="Source group.")
    framework: str = Field(description="Framework profile the run is scored under.")
    hbm_gib: float = Field(description="HBM per GPU (GiB).")
    fits: bool = Field(description="The layout obeys the profile's rules and fits its budget.")
    why: str = Field(description="What it breaks, when it does not fit (empty otherwise).")
    config: ParallelConfig = Field(description="The setting scored (the fitting one if any).")
    used_gib: float = Field(description="The tenants on the fuller stage (GiB).")
    budget_gib: float = Field(description="Usable memory per GPU (GiB).")
    published_gib: float | None = Field(description="Printed peak (GiB), if any.")
    predicted_gib: float | None = Field(description="Predicted peak on the source's basis (GiB).")
    error: float | None = Field(description="predicted / published - 1 (< 0: under-predicted).")


def memory_cost_model(
    run: CalibrationRun, search: SearchSpec | None = None, constants: Constants | None = None
) -> CostModel:
    """The cost model a run's memory is scored with: its training at the precision its memory
    recipe is (`memory_precision`), the request's knobs applied (`recipe_of`), K,V as its
    attention holds them (`kv_repeated`)."""
    A, H = resolve_model(run.model), resolve_cluster(run.cluster)
    t = run.training.model_copy(update={"precision": run.memory_precision})
    rec = replace(recipe_of(t), kv_repeated=run.kv_repeated)
    return CostModel(A, H, t, search or run.search, constants, recipe=rec)


def predicted_peak_gib(run: CalibrationRun, cm: CostModel, config: ParallelConfig) -> float:
    """The peak the run's source prints, predicted at `config` (GiB): the tenants of the stage
    it was read on (`memory_stage`; else the fuller), with the caching allocator's
    fragmentation share where the source prints max_memory_reserved."""
    p = Point.from_config(config)
    if run.memory_stage == "first":
        peak = cm.stage_bytes(p, "first") * MEMORY_UNIT
    else:
        at = cm.memory_bill(p)
        peak = at.total - at.reserve
    if run.memory_basis == "reserved":  # the caching allocator's fragmentation share too
        peak = peak + cm.ctx.reserve_for(peak) - cm.ctx.reserve_bytes
    return peak / GIB


def memory_result(run: CalibrationRun, search: SearchSpec | None = None) -> MemoryResult:
    """The run's fit and predicted peak at `search`'s reserve (default: the defaults)."""
    from meshplan.tools.calibration.knobs import candidates  # noqa: PLC0415  (imports solver)

    search = search or SearchSpec()
    A, H = resolve_model(run.model), resolve_cluster(run.cluster)
    cm = memory_cost_model(run, search)
    t = run.training
    batch = Batch(t.global_batch_tokens // t.seq_len, t.critical_batch_tokens // t.seq_len)
    scored = []
    for c in candidates(run):
        p = Point.from_config(c)
        bad = violations(p, A, H, t, search, batch, check_pins=False)
        bill = cm.memory_bill(p)
        used = bill.total - bill.reserve
        if not cm.fits(p):
            bad.append(
                f"memory: {used / GIB:.1f} GiB on the {bill.stage} stage exceeds "
                f"{cm.ctx.budget / GIB:.1f} GiB usable"
            )
        scored.append((not bad, -used, c, bad, bill))
    ok, _, config, bad, bill = max(scored, key=lambda x: x[:2])
    pub = run.memory_gib
    pred = err = None
    if pub is not None:
        # the published setting's peak (the source printed the peak of the layout it ran)
        pred = predicted_peak_gib(run, cm, run.config)
        err = pred / pub - 1
    return MemoryResult(
        id=run.id,
        source=run.source,
        framework=run.framework.value,
        hbm_gib=H.hbm / GIB,
        fits=ok,
        why="; ".join(bad),
        config=config,
        used_gib=(bill.total - bill.reserve) / GIB,
        budget_gib=cm.ctx.budget / GIB,
        published_gib=pub,
        predicted_gib=pred,
        error=err,
    )
