"""Fitting the time model's efficiency constants to published runs, and scoring it out of sample.

`fit` is a maximum a posteriori fit: the residual of each run is the pseudo-Huber of
log(predicted / published tokens/s), each source weighted equally, plus one residual per
constant pulling it (weakly) towards its physical prior, so that a constant the data do not
identify stays where the physics puts it instead of drifting to a bound. The search is
Levenberg-Marquardt over the constants mapped to (-inf, inf) through their bounds (numpy only).
`leave_one_source_out` fits on every source but one and scores the one left out: the figure
the fidelity benchmark reports, because accuracy is judged on runs the fit never saw.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from meshplan.solver.costmodel import CostModel, Point
from meshplan.solver.costmodel.constants import Constants
from meshplan.solver.costmodel.timing import Rates, dp_terms, objective_terms
from meshplan.tools.calibration.knobs import candidates
from meshplan.tools.calibration.loaders import CalibrationRun
from meshplan.tools.calibration.runs import fold_of
from meshplan.tools.calibration.score import RunResult, evaluate_runs, speed_model, with_constants

HUBER = 0.10  # pseudo-Huber scale of the log error: errors below ~10% count quadratically
PRIOR_WEIGHT = 0.01  # residual weight of one logit unit (one sigma) from a constant's prior


@dataclass(frozen=True)
class Param:
    """One fitted constant: a field of Constants or one entry of a dict field ("eta:H100"),
    its bounds, and how well its prior is known (sigma: width of the prior in logit units; a
    tighter prior pulls harder)."""

    name: str
    lo: float
    hi: float
    sigma: float = 1.0

    def get(self, k: Constants) -> float:
        if ":" in self.name:
            field, key = self.name.split(":")
            d = getattr(k, field)
            return float(d[key]) if key in d else float(min(d.values()))
        return float(getattr(k, self.name))


PARAMS = (
    Param("eta:A100", 0.40, 0.95),
    Param("eta:H100", 0.40, 0.95),  # H200 shares it (same GH100 die)
    Param("clock:h100-sxm-96gb", 0.60, 1.00, 0.3),  # the cube-root power law is a good prior
    Param("kernel_eff:TORCH", 0.50, 1.20, 0.5),
    Param("attn_eff:TE", 0.20, 1.00, 0.5),
    Param("attn_eff:TORCH", 0.10, 1.00, 0.5),
    Param("attn_eff:A100", 0.10, 1.00, 0.5),  # the A100 runs' attention (FlashAttention v1)
    Param("fp8_eff", 0.50, 1.00, 0.5),
    Param("gemm_h0", 0.0, 4096.0, 0.5),
    Param("mem_exposed", 0.0, 1.0),
    Param("eps_tp", 0.0, 1.0, 0.5),
    Param("eps_cp", 0.0, 1.0, 0.5),
    Param("eps_ep", 0.0, 1.0, 0.5),
    Param("omega", 0.0, 1.0, 0.5),
    Param("jitter", 0.0, 0.05, 0.5),  # identified by the scaling series (sqrt(2 ln n))
    Param("overlap_tax", 0.0, 0.5, 0.5),
    Param("link_eff", 0.40, 1.00, 0.3),  # NCCL bus bandwidth is well measured (~0.8 of links)
    Param("kappa0", 0.0, 300e-6),
    Param("alpha_inter", 1e-6, 30e-6, 0.5),
)


def constants_of(base: Constants, values: Sequence[float], params=PARAMS) -> Constants:  # noqa: ANN001
    upd: dict[str, object] = {}
    for p, v in zip(params, values, strict=True):
        if ":" in p.name:
            field, key = p.name.split(":")
            upd.setdefault(field, {})[key] = float(v)  # type: ignore[union-attr]
        else:
            upd[p.name] = float(v)
    return with_constants(base, upd)


def _to_unit(p: Param, v: float) -> float:
    u = min(max((v - p.lo) / (p.hi - p.lo), 1e-6), 1 - 1e-6)
    return math.log(u / (1 - u))


def _from_unit(p: Param, x: float) -> float:
    return p.lo + (p.hi - p.lo) / (1 + math.exp(-x))


# ---- a lean evaluator: the same terms as CostModel.time_per_token, built once per run -------


@dataclass
class Prepared:
    run: CalibrationRun
    model: CostModel
    points: list[Point]  # the run's candidate settings (tools/calibration/knobs.py)

    def tokens_per_s_per_gpu(self, k: Constants) -> float:
        """What evaluate_run predicts (the fastest candidate), without rebuilding the memory
        model."""
        ctx = replace(self.model.ctx, K=k)
        R = Rates(ctx)
        terms = objective_terms(ctx, R)
        best = 0.0
        for p in self.points:
            t = sum(term.float_value(p) for term in terms)
            comm, credit = dp_terms(ctx, R, p.z)
            t += max(
                0.0, sum(x.float_value(p) for x in comm) - sum(x.float_value(p) for x in credit)
            )
            best = max(best, 1.0 / (t * p.lay.gpus))
        return best


def prepare(runs: Sequence[CalibrationRun], tune: bool = True) -> list[Prepared]:
    out = []
    for r in runs:
        cm = speed_model(r)
        configs = candidates(r) if tune else (r.config,)
        out.append(Prepared(r, cm, [Point.from_config(c) for c in configs]))
    return out


def log_errors(prep: Sequence[Prepared], k: Constants) -> np.ndarray:
    return np.array(
        [math.log(p.tokens_per_s_per_gpu(k) / p.run.tokens_per_s_per_gpu) for p in prep]
    )


def _huber_root(e: np.ndarray) -> np.ndarray:
    """r with r² = 2·HUBER²·(sqrt(1 + (e/HUBER)²) − 1): least squares on r is pseudo-Huber."""
    return np.sign(e) * np.sqrt(2 * HUBER**2 * (np.sqrt(1 + (e / HUBER) ** 2) - 1))


@dataclass(frozen=True)
class FitResult:
    constants: Constants
    loss: float  # mean over sources of the mean pseudo-Huber loss, plus the prior penalty
    evaluations: int
    at_bound: tuple[str, ...]  # constants within 1% of the width of a bound


def fit(
    runs: Sequence[CalibrationRun],
    base: Constants | None = None,
    params: Sequence[Param] = PARAMS,
    max_iter: int = 40,
    prep: Sequence[Prepared] | None = None,
    tune: bool = True,
) -> FitResult:
    """Levenberg-Marquardt from the priors `base` over `params` (see the module docstring);
    `tune`: score each run at its fastest candidate setting of the knobs it does not state."""
    base = base or Constants()
    prep = list(prep) if prep is not None else prepare(runs, tune)
    sources = sorted({p.run.source for p in prep})
    n_src = {s: sum(p.run.source == s for p in prep) for s in sources}
    w = np.array([1.0 / math.sqrt(n_src[p.run.source] * len(sources)) for p in prep])
    x0 = np.array([_to_unit(p, p.get(base)) for p in params])
    inv_sigma = np.array([1.0 / p.sigma for p in params])
    evals = 0

    def residuals(x: np.ndarray) -> np.ndarray:
        nonlocal evals
        evals += 1
        k = constants_of(base, [_from_unit(p, v) for p, v in zip(params, x, strict=True)], params)
        e = log_errors(prep, k)
        return np.concatenate([w * _huber_root(e), PRIOR_WEIGHT * inv_sigma * (x - x0)])

    x, lam = x0.copy(), 1e-2
    r = residuals(x)
    cost = float(r @ r)
    for _ in range(max_iter):
        J = np.empty((len(r), len(x)))
        for i in range(len(x)):  # forward differences in the unconstrained space
            dx = np.zeros_like(x)
            dx[i] = 1e-4
            J[:, i] = (residuals(x + dx) - r) / 1e-4
        g, H = J.T @ r, J.T @ J
        improved = False
        while lam < 1e8:
            step = np.linalg.solve(H + lam * np.diag(np.diag(H) + 1e-9), -g)
            r_new = residuals(x + step)
            c_new = float(r_new @ r_new)
            if c_new < cost:
                x, r, lam, improved = x + step, r_new, max(lam / 3, 1e-7), True
                rel = (cost - c_new) / max(cost, 1e-12)
                cost = c_new
                break
            lam *= 4
        if not improved or rel < 1e-7:
            break
    values = [_from_unit(p, v) for p, v in zip(params, x, strict=True)]
    at = tuple(
        p.name
        for p, v in zip(params, values, strict=True)
        if min(v - p.lo, p.hi - v) < 0.01 * (p.hi - p.lo)
    )
    return FitResult(constants_of(base, values, params), cost, evals, at)


# ---- leave one source out ----------------------------------------------------------------------

FitFn = Callable[[Sequence[CalibrationRun]], Constants]


def _fit_constants(
    runs: Sequence[CalibrationRun], max_iter: int = 40, tune: bool = True
) -> Constants:
    return fit(runs, max_iter=max_iter, tune=tune).constants


def _fold(args: tuple[str, Sequence[CalibrationRun], FitFn, bool]) -> list[RunResult]:
    fold, runs, fit_fn, tune = args
    train = [r for r in runs if fold_of(r.source) != fold]
    test = [r for r in runs if fold_of(r.source) == fold]
    return evaluate_runs(test, fit_fn(train), memory=False, tune=tune)


def leave_one_source_out(
    runs: Sequence[CalibrationRun],
    fit_fn: FitFn | None = None,
    jobs: int = 1,
    max_iter: int = 40,
    tune: bool = True,
) -> list[RunResult]:
    """Each source scored by constants fitted on every other source (in the runs' order;
    sources of one document, runs.FOLDS, are held out together); `fit_fn` (runs -> Constants)
    defaults to `fit` from the priors; `tune` as in `fit`."""
    fit_fn = fit_fn or partial(_fit_constants, max_iter=max_iter, tune=tune)
    sources = list(dict.fromkeys(fold_of(r.source) for r in runs))
    args = [(s, list(runs), fit_fn, tune) for s in sources]
    if jobs > 1 and len(sources) > 1:
        with ProcessPoolExecutor(min(jobs, len(sources))) as pool:
            folds = list(pool.map(_fold, args))
    else:
        folds = [_fold(x) for x in args]
    by_id = {x.id: x for fold in folds for x in fold}
    return [by_id[r.id] for r in runs]
