"""ScalingCurve: every (GPU type, count) cell planned under one batch policy, the envelope, the
scale unit, the knee and the largest useful count per type (definitions in
docs/schedulers.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from meshplan.solver.planner import evaluate
from meshplan.solver.results import Wall
from meshplan.solver.scheduler.answers import (
    Cell,
    CellStatus,
    ClusterCurve,
    CurveResult,
    ObservationFit,
)
from meshplan.solver.scheduler.cache import AnswerCache
from meshplan.solver.scheduler.cells import Budget, CellOutcome, CellSolver, CellTask, solve_cells
from meshplan.solver.scheduler.key import cache_key, cost_model_version
from meshplan.solver.scheduler.observe import NOTE, Fit, fit, prior_error, split, tokens_band
from meshplan.solver.scheduler.requests import BatchPolicy, CurveRequest
from meshplan.solver.scheduler.validate import (
    SchedulerInputError,
    check_batch,
    check_cells,
    check_clusters,
    check_model,
    check_observations,
    check_pins_for_model,
    check_precision,
    grid_counts,
)
from meshplan.solver.schema import ClusterSpec, EvaluateRequest, ParallelConfig


def efficiency(batch: BatchPolicy, tokens: int) -> float:
    """Pollux's statistical efficiency (B_noise + B0) / (B_noise + B) (Qiao et al. OSDI'21 §3.1;
    adaptdl/goodput.py GoodputFunction.efficiency at petuum/adaptdl@542e123); 1 when unstated."""
    se = batch.statistical_efficiency
    if se is None:
        return 1.0
    return (se.noise_scale_tokens + se.reference_batch_tokens) / (se.noise_scale_tokens + tokens)


@dataclass
class Prepared:
    """A validated curve request: its cells and their tasks."""

    labels: list[str]
    gpus: list[str]
    gpn: list[int]
    counts: dict[str, list[int]]
    tasks: list[CellTask]
    index: list[tuple[str, int]]  # (label, count) of each task


def prepare(req: CurveRequest) -> Prepared:
    """Check the request (SchedulerInputError names the field) and list its cells."""
    arch = check_model(req.model)
    check_pins_for_model(arch, req.search)
    check_batch(req.batch, req.training)
    hws = check_clusters(req.clusters)
    check_precision(req.training, hws)
    counts = {
        c.label: grid_counts(req.grid, c, hw.gpn, "grid")
        for c, hw in zip(req.clusters, hws, strict=True)
    }
    check_cells(sum(len(v) for v in counts.values()))
    check_observations(req.observations, counts)
    tasks, index = [], []
    for c in req.clusters:
        for n in counts[c.label]:
            tasks.append(
                CellTask(
                    model=req.model,
                    training=req.training,
                    search=req.search,
                    cluster=c.spec(n),
                    batch=req.batch,
                    time_limit_s=req.options.cell_time_limit_s,
                )
            )
            index.append((c.label, n))
    return Prepared(
        labels=[c.label for c in req.clusters],
        gpus=[hw.name for hw in hws],
        gpn=[hw.gpn for hw in hws],
        counts=counts,
        tasks=tasks,
        index=index,
    )


def observed_fit(req: CurveRequest, budget: Budget, source: str = "") -> Fit | None:
    """The observations' fit of a curve (the curve an allocation or a front walks: their
    `curve_request`), the request checked first as the curve checks it; `source`: a digest of
    the observations, when the query will run without them (Fit.source)."""
    prepare(req)
    f = _fit(req, budget)
    return f if f is None or not source else replace(f, source=source)


def _fit(req: CurveRequest, budget: Budget | None = None) -> Fit | None:
    """The observations' correction: each observed layout scored by evaluate() on its cell,
    once per distinct (cluster, count, layout), the budget checked between two."""
    if not req.observations:
        return None
    budget = budget or Budget()
    by_label = {c.label: c for c in req.clusters}
    scored: dict[tuple[str, int, ParallelConfig], tuple[float, float]] = {}
    rows = []
    for i, ob in enumerate(req.observations):
        cfg = ob.config
        ident = (ob.cluster, ob.num_gpus, cfg)  # a frozen model: hashed by its values
        if ident not in scored:
            budget.check()
            scored[ident] = _observed(req, by_label[ob.cluster].spec(ob.num_gpus), cfg, i)
        rows.append((ob.cluster, ob.num_gpus, *scored[ident], ob.step_time_s))
    budget.check()
    return fit(rows)


def _observed(req: CurveRequest, cluster: ClusterSpec, cfg: ParallelConfig, i: int) -> tuple:
    """(compute-like, communication) seconds of observation i's layout on its cell."""
    tokens = cfg.dp * cfg.micro_batch_size * cfg.num_microbatches * req.training.seq_len
    training = req.training.model_copy(
        update={"global_batch_tokens": tokens, "critical_batch_tokens": 0}
    )
    ev = evaluate(
        EvaluateRequest(
            model=req.model,
            cluster=cluster,
            training=training,
            config=cfg,
            search=req.search.model_copy(update={"allow_fewer_gpus": True}),
        )
    )
    bad = [v for v in ev.violations if not v.startswith("memory:")]
    if bad or ev.performance is None:
        raise SchedulerInputError(f"observations[{i}].config", "; ".join(bad))
    return split(ev.performance.breakdown)


def _cell(label: str, n: int, out: CellOutcome, batch: BatchPolicy, f: Fit | None) -> Cell:
    if out.status is not CellStatus.PLANNED:
        return Cell(cluster=label, num_gpus=n, status=out.status, reason=out.reason)
    res = out.result
    perf, mem = res.performance, res.memory
    model_t = perf.step_time_s
    if f is None:  # the cost model's own expected error for a plan of this kind
        own = perf.error_band.p90_error if perf.error_band else prior_error()
        step, (half, extrap) = model_t, (own or 0.0, False)
    else:
        step, (half, extrap) = f.time(*split(perf.breakdown)), f.band(label, n)
    tokens = perf.global_batch_tokens
    tps = tokens / step
    eff = efficiency(batch, tokens)
    low, high = tokens_band(tps, half)
    return Cell(
        cluster=label,
        num_gpus=n,
        status=CellStatus.PLANNED,
        config=res.config,
        num_gpus_used=perf.num_gpus_used,
        global_batch_tokens=tokens,
        step_time_s=step,
        tokens_per_s=tps,
        goodput_tokens_per_s=tps * eff,
        statistical_efficiency=eff,
        mfu=perf.mfu * model_t / step,
        model_step_time_s=model_t,
        memory_headroom_bytes=mem.hbm - mem.total,
        binding_wall=res.binding_wall,
        band_low_tokens_per_s=low,
        band_high_tokens_per_s=high,
        extrapolates=extrap,
    )


def _envelope(cells: list[Cell]) -> None:
    """Fill envelope, envelope_num_gpus and the speedups of one type's cells (count order)."""
    best: Cell | None = None
    base = next((c.goodput_tokens_per_s for c in cells if c.status is CellStatus.PLANNED), 0.0)
    for c in cells:
        if c.status is CellStatus.PLANNED and (
            best is None or c.goodput_tokens_per_s > best.goodput_tokens_per_s
        ):
            best = c
        if best is not None:
            c.envelope_goodput_tokens_per_s = best.goodput_tokens_per_s
            c.envelope_num_gpus = best.num_gpus_used
            c.envelope_speedup = best.goodput_tokens_per_s / base
        if c.status is CellStatus.PLANNED:
            c.speedup = c.goodput_tokens_per_s / base


def envelope_at(cells: list[Cell], x: float) -> float:
    """The envelope at any count x: best goodput over the cells with num_gpus <= x."""
    return max(
        (
            c.goodput_tokens_per_s
            for c in cells
            if c.num_gpus <= x and c.status is CellStatus.PLANNED
        ),
        default=0.0,
    )


def knee(cells: list[Cell], gain: float) -> int:
    """Smallest feasible count n from which every doubling within the grid gains < `gain`."""
    top = max((c.num_gpus for c in cells), default=0)
    ns = [c.num_gpus for c in cells if c.status is CellStatus.PLANNED and 2 * c.num_gpus <= top]
    found = 0
    for n in reversed(ns):  # walk down while the condition keeps holding
        if envelope_at(cells, 2 * n) < (1 + gain) * envelope_at(cells, n):
            found = n
        else:
            break
    return found


def _largest_useful(cells: list[Cell]) -> tuple[int, str]:
    planned = [c for c in cells if c.status is CellStatus.PLANNED]
    if not planned:
        return 0, "no count of the grid plans"
    peak = max(planned, key=lambda c: (c.goodput_tokens_per_s, -c.num_gpus))
    later = [c for c in cells if c.num_gpus > peak.num_gpus]
    if not later:
        return peak.num_gpus_used, "still rising at the end of the grid"
    walls = [c.binding_wall for c in later if c.status is CellStatus.PLANNED]
    if peak.binding_wall is Wall.DP_CAP or Wall.DP_CAP in walls:
        return peak.num_gpus_used, "the critical batch caps data parallelism beyond it"
    if not walls:
        return peak.num_gpus_used, "no larger count of the grid can split the batch and the model"
    if all(c.num_gpus_used <= peak.num_gpus_used for c in later if c.status is CellStatus.PLANNED):
        return peak.num_gpus_used, "larger counts leave GPUs idle: divisibility caps the layout"
    common = max(set(walls), key=walls.count)
    return peak.num_gpus_used, f"larger counts are slower: their binding wall is {common.value}"


def _summary(label: str, gpu: str, gpn: int, cells: list[Cell], gain: float) -> ClusterCurve:
    planned = [c for c in cells if c.status is CellStatus.PLANNED]
    best = max(planned, key=lambda c: (c.goodput_tokens_per_s, -c.num_gpus), default=None)
    unit = best.config.tp * best.config.pp * best.config.cp if best else 0
    useful, why = _largest_useful(cells)
    return ClusterCurve(
        cluster=label,
        gpu=gpu,
        gpus_per_node=gpn,
        min_feasible_gpus=planned[0].num_gpus if planned else 0,
        scale_unit_gpus=unit,
        knee_gpus=knee(cells, gain),
        largest_useful_gpus=useful,
        largest_useful_reason=why,
        peak_goodput_tokens_per_s=best.goodput_tokens_per_s if best else 0.0,
    )


def _band_source(f: Fit | None) -> str:
    p = prior_error()
    prior = (
        "each cell's expected error: the p90 of the cost model's leave-one-source-out error of "
        "tokens/s over published runs of its category and kernel family (over all runs: "
        f"{p:.1%})"
        if p is not None
        else "none (the cost model's fit report carries no error)"
    )
    if f is None:
        return f"no observations: the band is {prior}"
    return NOTE


def scaling_curve(
    req: CurveRequest,
    budget: Budget | None = None,
    cache: AnswerCache[CurveResult] | None = None,
    solver: CellSolver = solve_cells,
    fit: Fit | None = None,
) -> CurveResult:
    """The curve of `req` (from `cache` when the same request was answered before); `fit`: the
    observations' fit when already computed (`observed_fit` of the same request)."""
    key = cache_key("curve", req, fit.source if fit is not None else "")
    if cache is not None and (hit := cache.get(key)) is not None:
        return hit
    prep = prepare(req)
    f = fit if fit is not None else _fit(req, budget)
    outcomes = solver(prep.tasks, budget or Budget())
    cells = [
        _cell(label, n, out, req.batch, f)
        for (label, n), out in zip(prep.index, outcomes, strict=True)
    ]
    gain = req.options.knee_gain
    summaries = []
    for label, gpu, gpn in zip(prep.labels, prep.gpus, prep.gpn, strict=True):
        mine = [c for c in cells if c.cluster == label]
        _envelope(mine)
        summaries.append(_summary(label, gpu, gpn, mine, gain))
    result = CurveResult(
        cache_key=key,
        cost_model_version=cost_model_version(),
        knee_gain=gain,
        cells=cells,
        clusters=summaries,
        fit=None
        if f is None
        else ObservationFit(
            num_observations=len(f.residuals),
            compute_factor=f.compute_factor,
            communication_factor=f.communication_factor,
            relative_error=f.relative_error,
            residuals=f.residuals,
            note=NOTE,
        ),
        band_source=_band_source(f),
    )
    assert all(math.isfinite(c.goodput_tokens_per_s) for c in cells)
    if cache is not None:
        cache.put(key, result)
    return result
