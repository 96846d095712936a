"""Observations: a per-job correction of the cost model, its band and the extrapolation flag.

The step time of a cell splits into compute-like time C (compute, recomputation, optimizer) and
communication time K (exposed tp/cp/ep/pp/dp traffic), the pipeline bubble shared between them
in proportion. The job's correction is T = c*C + m*K: (c, m) minimise the squared relative error
over the observations, with a small ridge towards (1, 1) that only decides what the observations
cannot tell apart (one observation, or no communication in any of them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np

from meshplan.solver.costmodel.band import loso_report
from meshplan.solver.results import TimeBreakdown

RIDGE = 1e-6  # weight of the prior (c, m) = (1, 1) against one observation's squared error
MIN_FACTOR = 0.05  # factors are kept positive
EXTRAPOLATION_DOUBLINGS = 1.0  # flag a cell more than 2x beyond the observed counts of its type
MAX_BAND = 0.9  # the band never reaches zero step time


def split(b: TimeBreakdown) -> tuple[float, float]:
    """(compute-like, communication) seconds of a step, the bubble shared in proportion."""
    comp = b.compute_s + b.recompute_s + b.optimizer_s
    comm = b.tp_comm_s + b.cp_comm_s + b.ep_comm_s + b.pp_comm_s + b.dp_comm_s
    total = comp + comm
    share = comp / total if total > 0 else 1.0
    return comp + b.bubble_s * share, comm + b.bubble_s * (1 - share)


@cache
def prior_error() -> float | None:
    """The cost model's p90 relative error of tokens/s over the published runs, each scored by
    constants fitted without its source (fitted.json's `fit.loso`), or None when the shipped fit
    carries no such report."""
    rep = loso_report()
    value = (rep or {}).get("all", {}).get("mfu_p90")
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _design(rows: list[tuple[float, float, float]]) -> np.ndarray:
    """Rows (C, K, T_measured) as the fit's design matrix (C/T, K/T); its target is 1."""
    return np.array([[c / t, k / t] for c, k, t in rows], dtype=float).reshape(-1, 2)


def _solve(rows: list[tuple[float, float, float]]) -> tuple[float, float]:
    """(c, m) for rows (C, K, T_measured)."""
    x = _design(rows)
    lhs = x.T @ x + RIDGE * np.eye(2)
    rhs = x.T @ np.ones(len(rows)) + RIDGE * np.ones(2)
    c, m = np.linalg.solve(lhs, rhs)
    return max(float(c), MIN_FACTOR), max(float(m), MIN_FACTOR)


def _leave_one_out(rows: list[tuple[float, float, float]]) -> np.ndarray:
    """|predicted / measured - 1| of each row under the fit of the other rows, in time linear in
    their number: removing row i from a ridge least squares moves its solution by
    -A^-1 x_i e_i / (1 - h_ii), with A = X'X + ridge*I, e_i the row's residual and h_ii =
    x_i' A^-1 x_i (the Sherman-Morrison formula; the residual e_i / (1 - h_ii) of Hastie,
    Tibshirani & Friedman, The Elements of Statistical Learning, 2nd ed., section 7.10.1). The factors are then kept positive as `_solve` keeps them."""
    x = _design(rows)
    a_inv = np.linalg.inv(x.T @ x + RIDGE * np.eye(2))
    beta = a_inv @ (x.T @ np.ones(len(rows)) + RIDGE * np.ones(2))
    spread = x @ a_inv  # row i: (A^-1 x_i)'
    leverage = np.einsum("ij,ij->i", spread, x)
    residual = 1.0 - x @ beta
    room = 1.0 - leverage
    safe = room > 1e-6  # a row that alone decides a factor: solved again, as before
    betas = beta - spread * np.where(safe, residual / np.where(safe, room, 1.0), 0.0)[:, None]
    for i in np.flatnonzero(~safe):
        betas[i] = _solve(rows[:i] + rows[i + 1 :])
    betas = np.maximum(betas, MIN_FACTOR)
    return np.abs(np.einsum("ij,ij->i", betas, x) - 1.0)


@dataclass(frozen=True)
class Fit:
    """The fitted correction and its error."""

    compute_factor: float
    communication_factor: float
    relative_error: float  # band half-width at an observed count (fraction)
    residuals: list[float]  # predicted / measured - 1 per observation, after the fit
    observed: dict[str, tuple[int, int]]  # per cluster label: (fewest, most) GPUs observed
    prior: float | None
    # a digest of the observations when they were fitted apart from the query that uses the fit
    # (then left out of its request: the digest keys its answers instead)
    source: str = ""

    def time(self, comp: float, comm: float) -> float:
        return self.compute_factor * comp + self.communication_factor * comm

    def band(self, cluster: str, num_gpus: int) -> tuple[float, bool]:
        """(relative half-width of the step time, extrapolates) of a cell."""
        if cluster not in self.observed:
            return max(self.relative_error, self.prior or 0.0), True
        lo, hi = self.observed[cluster]
        d = max(math.log2(num_gpus / hi), math.log2(lo / num_gpus), 0.0)
        return self.relative_error * (1 + d), d > EXTRAPOLATION_DOUBLINGS


def fit(rows: list[tuple[str, int, float, float, float]]) -> Fit:
    """Rows (cluster, num_gpus, C, K, T_measured): the correction, its leave-one-out error and
    residuals. With one observation the error is the cost model's own (prior_error)."""
    data = [(c, k, t) for _, _, c, k, t in rows]
    cf, mf = _solve(data)
    residuals = [(cf * c + mf * k) / t - 1 for c, k, t in data]
    err = float(np.max(_leave_one_out(data))) if len(data) >= 2 else prior_error() or 0.0
    observed: dict[str, tuple[int, int]] = {}
    for cluster, n, *_ in rows:
        lo, hi = observed.get(cluster, (n, n))
        observed[cluster] = (min(lo, n), max(hi, n))
    return Fit(cf, mf, min(err, MAX_BAND), residuals, observed, prior_error())


def tokens_band(tokens_per_s: float, half_width: float) -> tuple[float, float]:
    """(slow, fast) tokens/s for a step time within +-half_width."""
    e = min(half_width, MAX_BAND)
    return tokens_per_s / (1 + e), tokens_per_s / (1 - e)


NOTE = (
    "band: the step time within +-e, where e is the largest leave-one-out error of the fit "
    "(with one observation, the cost model's p90 error over its calibration runs), widened by "
    "(1 + d) for a cell d doublings beyond the counts observed on its GPU type; a cell more "
    f"than {2**EXTRAPOLATION_DOUBLINGS:g}x beyond them, or on a type never observed, "
    "extrapolates"
)
