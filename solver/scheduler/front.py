"""TrainingFront: for a token budget, the Pareto front of days against GPU-hours and against
cost over every (GPU type, count) cell of the curve, and where more GPUs stop helping."""

from __future__ import annotations

from collections.abc import Sequence

from meshplan.solver.results import Wall
from meshplan.solver.scheduler.answers import (
    CellStatus,
    CurveResult,
    FrontCluster,
    FrontPoint,
    FrontResult,
)
from meshplan.solver.scheduler.cache import AnswerCache
from meshplan.solver.scheduler.cells import Budget, CellSolver, solve_cells
from meshplan.solver.scheduler.curve import scaling_curve
from meshplan.solver.scheduler.key import cache_key, cost_model_version
from meshplan.solver.scheduler.observe import Fit
from meshplan.solver.scheduler.requests import CurveRequest, FrontRequest

DAY = 86400.0


def non_dominated(xy: Sequence[tuple[float, float]]) -> list[bool]:
    """For each point, True if no other point is <= in both and < in one (a sweep by x, then y;
    exact duplicates of a front point are on the front too)."""
    order = sorted(range(len(xy)), key=lambda i: xy[i])
    out = [False] * len(xy)
    best_y, best_x = float("inf"), None
    for i in order:
        x, y = xy[i]
        if y < best_y:
            out[i], best_y, best_x = True, y, x
        elif y == best_y and x == best_x:
            out[i] = True
    return out


def curve_request(req: FrontRequest) -> CurveRequest:
    return CurveRequest(
        model=req.model,
        training=req.training,
        search=req.search,
        options=req.options,
        clusters=req.clusters,
        grid=req.grid,
        batch=req.batch,
        observations=req.observations,
    )


def points(req: FrontRequest, curve: CurveResult) -> list[FrontPoint]:
    """One point per distinct (type, GPUs used, layout) among the planned cells."""
    price = {c.label: c.price_per_gpu_hour for c in req.clusters}
    seen, out = set(), []
    for c in curve.cells:
        if c.status is not CellStatus.PLANNED:
            continue
        ident = (c.cluster, c.num_gpus_used, c.config.model_dump_json())
        if ident in seen:
            continue
        seen.add(ident)
        secs = req.token_budget / c.goodput_tokens_per_s
        gh = c.num_gpus_used * secs / 3600
        # the band scales goodput as it scales tokens/s (the same statistical efficiency)
        fast, slow = (
            (secs * c.tokens_per_s / x / DAY if x > 0 else 0.0)
            for x in (c.band_high_tokens_per_s, c.band_low_tokens_per_s)
        )
        out.append(
            FrontPoint(
                cluster=c.cluster,
                num_gpus=c.num_gpus,
                num_gpus_used=c.num_gpus_used,
                config=c.config,
                days=secs / DAY,
                gpu_hours=gh,
                cost=gh * price[c.cluster],
                goodput_tokens_per_s=c.goodput_tokens_per_s,
                binding_wall=c.binding_wall,
                on_front_gpu_hours=False,
                on_front_cost=False,
                days_fast=fast,
                days_slow=slow,
            )
        )
    return out


def training_front(
    req: FrontRequest,
    budget: Budget | None = None,
    cache: AnswerCache[FrontResult] | None = None,
    curves: AnswerCache[CurveResult] | None = None,
    solver: CellSolver = solve_cells,
    fit: Fit | None = None,
) -> FrontResult:
    """The front of `req` (from `cache` when asked before); `fit`: its observations' fit when
    already computed (curve.observed_fit)."""
    key = cache_key("front", req, fit.source if fit is not None else "")
    if cache is not None and (hit := cache.get(key)) is not None:
        return hit
    curve = scaling_curve(curve_request(req), budget, curves, solver, fit)
    pts = points(req, curve)
    priced = all(c.price_per_gpu_hour > 0 for c in req.clusters)
    for p, on in zip(pts, non_dominated([(p.days, p.gpu_hours) for p in pts]), strict=True):
        p.on_front_gpu_hours = on
    if priced:
        for p, on in zip(pts, non_dominated([(p.days, p.cost) for p in pts]), strict=True):
            p.on_front_cost = on
    pts.sort(key=lambda p: (p.days, p.gpu_hours, p.cluster, p.num_gpus))
    clusters = []
    for s in curve.clusters:
        capped = [
            c.num_gpus
            for c in curve.cells
            if c.cluster == s.cluster
            and c.status is CellStatus.PLANNED
            and c.binding_wall is Wall.DP_CAP
        ]
        clusters.append(
            FrontCluster(
                cluster=s.cluster,
                largest_useful_gpus=s.largest_useful_gpus,
                reason=s.largest_useful_reason,
                critical_batch_gpus=min(capped, default=0),
            )
        )
    result = FrontResult(
        cache_key=key,
        cost_model_version=cost_model_version(),
        curve_cache_key=curve.cache_key,
        token_budget=req.token_budget,
        priced=priced,
        points=pts,
        clusters=clusters,
    )
    if cache is not None:
        cache.put(key, result)
    return result
