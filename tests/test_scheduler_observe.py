"""Observations: the per-job fit recovers known compute and communication factors, corrects
every cell, and the band and the extrapolation flag follow the observed counts."""

from __future__ import annotations

import pytest

from meshplan.solver import EvaluateRequest, evaluate
from meshplan.solver.scheduler import CellStatus, CurveRequest, scaling_curve
from meshplan.solver.scheduler.observe import fit, prior_error, split

BASE = {
    "model": {"preset": "llama3-8b"},
    "training": {"seq_len": 4096},
    "clusters": [{"gpu": "h100-sxm-80gb"}, {"gpu": "a100-sxm-80gb"}],
    "grid": {"counts": [8, 16, 32, 64, 256]},
    "batch": {"kind": "FIXED_GLOBAL", "global_batch_tokens": 4096 * 256},
}
COMPUTE, COMM = 1.3, 2.0


def _measured(cluster: str, n: int, cfg: dict) -> float:
    """A synthetic measurement: the cost model's split with known factors."""
    tokens = cfg["dp"] * cfg["micro_batch_size"] * cfg["num_microbatches"] * 4096
    ev = evaluate(
        EvaluateRequest.model_validate(
            {"model": BASE["model"], "cluster": {"gpu": cluster, "num_gpus": n},
             "training": {"seq_len": 4096, "global_batch_tokens": tokens}, "config": cfg}
        )
    )  # fmt: skip
    comp, comm = split(ev.performance.breakdown)
    return COMPUTE * comp + COMM * comm


def test_the_fit_recovers_the_factors_and_corrects_the_cells() -> None:
    ran = [  # layouts the caller ran, with different shares of communication
        (16, {"tp": 1, "pp": 1, "dp": 8, "cp": 2, "micro_batch_size": 1, "num_microbatches": 32,
              "zero_stage": 3}),
        (32, {"tp": 2, "pp": 2, "dp": 4, "cp": 2, "micro_batch_size": 1, "num_microbatches": 64}),
        (64, {"tp": 1, "pp": 1, "dp": 16, "cp": 4, "micro_batch_size": 1, "num_microbatches": 16}),
    ]  # fmt: skip
    obs = [
        {"cluster": "h100-sxm-80gb", "num_gpus": n, "config": cfg,
         "step_time_s": _measured("h100-sxm-80gb", n, cfg)}
        for n, cfg in ran
    ]  # fmt: skip
    res = scaling_curve(CurveRequest.model_validate({**BASE, "observations": obs}))
    f = res.fit
    assert f is not None and f.num_observations == 3
    assert f.compute_factor == pytest.approx(COMPUTE, rel=2e-3)
    assert f.communication_factor == pytest.approx(COMM, rel=2e-2)
    assert max(abs(r) for r in f.residuals) < 2e-3
    by = {(c.cluster, c.num_gpus): c for c in res.cells}
    for o in obs:
        cell = by[(o["cluster"], o["num_gpus"])]
        assert not cell.extrapolates
        assert cell.band_low_tokens_per_s <= cell.tokens_per_s <= cell.band_high_tokens_per_s
        comp, comm = split(cell_breakdown(cell))  # the cell's own layout, corrected
        assert cell.step_time_s == pytest.approx(COMPUTE * comp + COMM * comm, rel=2e-2)
    # every other cell is corrected too, and the flag marks what is far from the observations
    for c in res.cells:
        if c.status is not CellStatus.PLANNED:
            continue
        assert c.step_time_s > c.model_step_time_s  # both factors > 1
        far = c.cluster == "a100-sxm-80gb" or c.num_gpus >= 256
        assert c.extrapolates == far, (c.cluster, c.num_gpus)
    near, far = by[("h100-sxm-80gb", 64)], by[("h100-sxm-80gb", 256)]
    width = lambda c: c.band_high_tokens_per_s / c.band_low_tokens_per_s  # noqa: E731
    assert width(far) >= width(near)


def cell_breakdown(c):  # noqa: ANN001, ANN201
    cfg = c.config
    tokens = cfg.dp * cfg.micro_batch_size * cfg.num_microbatches * 4096
    ev = evaluate(
        EvaluateRequest.model_validate(
            {"model": BASE["model"], "cluster": {"gpu": c.cluster, "num_gpus": c.num_gpus},
             "training": {"seq_len": 4096, "global_batch_tokens": tokens},
             "config": cfg.model_dump()}
        )
    )  # fmt: skip
    return ev.performance.breakdown


def test_one_observation_scales_the_curve_and_keeps_the_cost_models_own_error() -> None:
    f = fit([("x", 8, 2.0, 0.0, 3.0)])
    assert f.compute_factor == pytest.approx(1.5, rel=1e-2)
    assert f.communication_factor == pytest.approx(1.0, rel=1e-6)  # nothing observed: prior
    assert f.relative_error == pytest.approx(prior_error() or 0.0)
    half, extrap = f.band("x", 32)  # two doublings beyond the one observed count
    assert extrap and half == pytest.approx(f.relative_error * 3)
    assert f.band("x", 8) == (pytest.approx(f.relative_error), False)
    assert f.band("y", 8)[1]  # a type never observed extrapolates


def test_leave_one_out_error_grows_with_inconsistent_observations() -> None:
    good = fit([("x", 8, 2.0, 1.0, 2.0 * 1.2 + 1.0 * 1.5), ("x", 16, 1.0, 1.0, 1.2 + 1.5),
                ("x", 32, 0.5, 1.0, 0.6 + 1.5)])  # fmt: skip
    bad = fit([("x", 8, 2.0, 1.0, 3.9), ("x", 16, 1.0, 1.0, 1.5), ("x", 32, 0.5, 1.0, 3.0)])
    assert good.relative_error < 1e-3 < bad.relative_error


def _refit_each(rows: list[tuple[float, float, float]]) -> list[float]:
    """The leave-one-out errors the slow way: one least squares per row left out."""
    from meshplan.solver.scheduler.observe import _solve

    out = []
    for i, (c, k, t) in enumerate(rows):
        ci, mi = _solve(rows[:i] + rows[i + 1 :])
        out.append(abs((ci * c + mi * k) / t - 1))
    return out


@pytest.mark.parametrize("n", [2, 3, 7, 40])
def test_the_closed_form_leave_one_out_equals_refitting_each_row(n: int) -> None:
    import random

    from meshplan.solver.scheduler.observe import _leave_one_out

    rng = random.Random(n)
    rows = [
        (rng.uniform(0.1, 2), rng.choice([0.0, rng.uniform(0, 1)]), rng.uniform(0.5, 4))
        for _ in range(n)
    ]
    rows.append(rows[0])  # a repeated observation
    assert list(_leave_one_out(rows)) == pytest.approx(_refit_each(rows), rel=1e-6, abs=1e-9)
    no_comm = [(c, 0.0, t) for c, _, t in rows]  # the ridge alone decides m
    assert list(_leave_one_out(no_comm)) == pytest.approx(_refit_each(no_comm), abs=1e-6)


def test_twenty_thousand_observations_fit_in_linear_time() -> None:
    import time

    rows = [("h100", 8 * (1 + i % 4), 1.0 + i % 7, 0.5 + i % 3, 2.0 + i % 5) for i in range(20_000)]
    started = time.process_time()
    f = fit(rows)
    assert time.process_time() - started < 1.0  # the quadratic refit took ~6 s for 4,000
    assert 0 < f.relative_error < 1 and len(f.residuals) == 20_000
