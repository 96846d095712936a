"""SmallestAllocation: per GPU type, the fewest (or cheapest) GPUs that finish the work by the
deadline, found by walking the scaling curve; the overall pick by objective; and, when none can,
the earliest finish and why."""

from __future__ import annotations

import time
from collections.abc import Callable

from meshplan.solver.scheduler.answers import (
    AdmitResult,
    AdmitStatus,
    Allocation,
    Cell,
    CellStatus,
    ClusterCurve,
    CurveResult,
)
from meshplan.solver.scheduler.cache import AnswerCache
from meshplan.solver.scheduler.cells import Budget, CellSolver, solve_cells
from meshplan.solver.scheduler.curve import scaling_curve
from meshplan.solver.scheduler.key import cache_key, cost_model_version
from meshplan.solver.scheduler.observe import Fit
from meshplan.solver.scheduler.requests import (
    AdmitObjective,
    AdmitRequest,
    CountGrid,
    CurveRequest,
)
from meshplan.solver.scheduler.validate import (
    SchedulerInputError,
    check_clusters,
    check_precision,
    default_counts,
)

HOUR = 3600.0


def time_available(
    req: AdmitRequest, clock: Callable[[], float] = time.time
) -> tuple[float, float]:
    """(seconds from start to the deadline, the start as a Unix time)."""
    if req.deadline_s and req.deadline_unix_s:
        raise SchedulerInputError("deadline_unix_s", "set deadline_s or deadline_unix_s, not both")
    now = req.now_unix_s or clock()
    if req.deadline_unix_s:
        left = req.deadline_unix_s - now
        if left <= 0:
            raise SchedulerInputError(
                "deadline_unix_s",
                f"{req.deadline_unix_s:.0f} is in the past ({-left:.0f} s before the start, {now:.0f})",
            )
        return left, now
    if not req.deadline_s:
        raise SchedulerInputError("deadline_s", "set deadline_s (s from now) or deadline_unix_s")
    return req.deadline_s, now


def curve_request(req: AdmitRequest) -> CurveRequest:
    """The curve the walk reads: the given grid (or 1, 2, 4, ... then whole nodes), each type's
    counts clipped to what is available."""
    hws = check_clusters(req.clusters)
    check_precision(req.training, hws)
    for i, c in enumerate(req.clusters):
        if not c.max_gpus:
            raise SchedulerInputError(f"clusters[{i}].max_gpus", "set the GPUs available (count)")
    if req.grid is not None:
        grid = req.grid.model_copy(update={"clip_to_cap": True})
    else:
        counts = {
            n
            for c, hw in zip(req.clusters, hws, strict=True)
            for n in default_counts(hw.gpn, c.max_gpus)
        }
        grid = CountGrid(counts=sorted(counts), clip_to_cap=True)
    return CurveRequest(
        model=req.model,
        training=req.training,
        search=req.search,
        options=req.options,
        clusters=req.clusters,
        grid=grid,
        batch=req.batch,
        observations=req.observations,
    )


def finish_s(req: AdmitRequest, c: Cell) -> float:
    """Start-up, then the work at the cell's rate (its band's slow end if asked), stretched by
    the downtime fraction."""
    tps = c.band_low_tokens_per_s if req.use_band_upper else c.tokens_per_s
    if req.work.tokens:
        run = req.work.tokens / (tps * c.statistical_efficiency)  # tokens at goodput
    else:
        run = req.work.steps * c.global_batch_tokens / tps
    return req.startup_overhead_s + run / (1 - req.downtime_fraction)


def _key(objective: AdmitObjective, a: Allocation) -> tuple:
    if objective is AdmitObjective.CHEAPEST:
        return (a.cost, a.num_gpus, a.finish_s)
    if objective is AdmitObjective.FEWEST_GPU_HOURS:
        return (a.gpu_hours, a.num_gpus, a.finish_s)
    return (a.num_gpus, a.finish_s)


def _allocation(req: AdmitRequest, c: Cell, price: float) -> Allocation:
    fin = finish_s(req, c)
    rate = c.band_low_tokens_per_s if req.use_band_upper else c.tokens_per_s
    gh = c.num_gpus_used * fin / HOUR
    return Allocation(
        cluster=c.cluster,
        status=AdmitStatus.MEETS_DEADLINE,
        num_gpus=c.num_gpus_used,
        config=c.config,
        tokens_per_s=rate,
        finish_s=fin,
        gpu_hours=gh,
        cost=gh * price,
    )


def _hours(s: float) -> str:
    return f"{s / HOUR:,.1f} h"


def _ceiling(summary: ClusterCurve, available: int) -> str:
    if summary.largest_useful_reason.startswith("still rising"):
        return f"the curve still rises at the {available} available: more of this type would help"
    knee = f", past the knee at {summary.knee_gpus}" if summary.knee_gpus else ""
    return (
        f"more GPUs stop helping at {summary.largest_useful_gpus} "
        f"({summary.largest_useful_reason}){knee}"
    )


def walk(req: AdmitRequest, curve: CurveResult, available_s: float) -> list[Allocation]:
    """Each type's answer from the curve's cells."""
    out = []
    for t in req.clusters:
        summary = next(s for s in curve.clusters if s.cluster == t.label)
        cells = [c for c in curve.cells if c.cluster == t.label and c.num_gpus <= t.max_gpus]
        options = [
            _allocation(req, c, t.price_per_gpu_hour)
            for c in cells
            if c.status is CellStatus.PLANNED
        ]
        fastest = min(options, key=lambda a: (a.finish_s, a.num_gpus), default=None)
        ok = [a for a in options if a.finish_s <= available_s]
        if ok:
            best = min(ok, key=lambda a: _key(req.objective, a))
        elif fastest is not None:
            best = Allocation(
                cluster=t.label,
                status=AdmitStatus.TOO_SLOW,
                reason=(
                    f"the fastest allocation, {fastest.num_gpus} GPUs, finishes in "
                    f"{_hours(fastest.finish_s)}, {_hours(fastest.finish_s - available_s)} after "
                    f"the deadline; {_ceiling(summary, t.max_gpus)}"
                ),
            )
        else:
            last = cells[-1] if cells else None
            why = (
                f"{last.num_gpus} GPUs: {last.reason}"
                if last
                else "no count of the grid is available"
            )
            best = Allocation(
                cluster=t.label,
                status=AdmitStatus.DOES_NOT_FIT,
                reason=f"no count up to the {t.max_gpus} available plans; at {why}",
            )
        if fastest is not None:
            best.earliest_finish_s, best.earliest_finish_gpus = fastest.finish_s, fastest.num_gpus
        out.append(best)
    return out


def smallest_allocation(
    req: AdmitRequest,
    budget: Budget | None = None,
    cache: AnswerCache[AdmitResult] | None = None,
    curves: AnswerCache[CurveResult] | None = None,
    solver: CellSolver = solve_cells,
    clock: Callable[[], float] = time.time,
    fit: Fit | None = None,
) -> AdmitResult:
    """The allocation of `req` (from `cache` when asked before with the same start time);
    `fit`: its observations' fit when already computed (curve.observed_fit)."""
    available, now = time_available(req, clock)
    if bool(req.work.tokens) == bool(req.work.steps):
        raise SchedulerInputError("work", "set exactly one of tokens and steps")
    if req.objective is AdmitObjective.CHEAPEST:
        for i, c in enumerate(req.clusters):
            if not c.price_per_gpu_hour:
                raise SchedulerInputError(
                    f"clusters[{i}].price_per_gpu_hour", "the CHEAPEST objective needs every price"
                )
    pinned = req.model_copy(update={"now_unix_s": now}) if req.deadline_unix_s else req
    key = cache_key("admit", pinned, fit.source if fit is not None else "")
    if cache is not None and (hit := cache.get(key)) is not None:
        return hit
    creq = curve_request(req)
    curve = scaling_curve(creq, budget, curves, solver, fit)
    allocs = walk(req, curve, available)
    ok = [a for a in allocs if a.status is AdmitStatus.MEETS_DEADLINE]
    pick = min(ok, key=lambda a: _key(req.objective, a)) if ok else None
    reason = "" if ok else _why_none(allocs, available)
    result = AdmitResult(
        cache_key=key,
        cost_model_version=cost_model_version(),
        curve_cache_key=curve.cache_key,
        time_available_s=available,
        objective=req.objective,
        feasible=bool(ok),
        pick=pick,
        allocations=allocs,
        reason=reason,
    )
    if cache is not None:
        cache.put(key, result)
    return result


def _why_none(allocs: list[Allocation], available_s: float) -> str:
    timed = [a for a in allocs if a.earliest_finish_s]
    head = f"no GPU type finishes by the deadline ({_hours(available_s)})"
    if timed:
        e = min(timed, key=lambda a: a.earliest_finish_s)
        head += f"; the earliest finish is {_hours(e.earliest_finish_s)} on {e.earliest_finish_gpus} x {e.cluster}"
    return head + ". " + "; ".join(f"{a.cluster}: {a.reason}" for a in allocs)
