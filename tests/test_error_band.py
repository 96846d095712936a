"""Every prediction carries its expected error: the leave-one-source-out residuals of the
published runs of its kind (fitted.json `fit.loso`), in plan, evaluate, the curve (with no
observations too), the proto and the CLI's table."""

from __future__ import annotations

import json

import pytest

from meshplan.convert import from_proto, to_proto
from meshplan.solver import EvaluateRequest, PlanRequest, evaluate, plan
from meshplan.solver.costmodel import band
from meshplan.solver.results import PlanResult
from meshplan.solver.scheduler import CurveRequest, scaling_curve
from meshplan.solver.schema import Framework, Precision
from meshplan.v1 import planner_pb2

SMALL = {
    "num_layers": 4,
    "hidden_size": 512,
    "num_attention_heads": 8,
    "num_kv_heads": 4,
    "ffn_hidden_size": 1536,
    "vocab_size": 32000,
}
SMALL_MOE = SMALL | {"moe": {"num_experts": 8, "top_k": 2, "expert_ffn_hidden_size": 256}}


def test_the_shipped_fit_carries_leave_one_source_out_residuals() -> None:
    rep = band.loso_report()
    assert rep is not None, "fitted.json has no fit.loso: rerun scripts/fit_constants.py"
    for cat in ("BF16-dense", "FP8-dense", "MoE"):
        s = rep["categories"][cat]
        assert s["n_speed"] >= band.MIN_RUNS and 0 < s["mfu_median"] <= s["mfu_p90"] < 1
    assert rep["all"]["n_speed"] == sum(v["n_speed"] for v in rep["categories"].values())


def _plan(model: dict, **training: object) -> PlanResult:
    req = PlanRequest.model_validate(
        {
            "model": model,
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
            "training": {"seq_len": 2048, "global_batch_tokens": 2048 * 32, **training},
            "options": {"explain": False},
        }
    )
    return plan(req)


@pytest.mark.parametrize(
    ("model", "training", "category"),
    [
        (SMALL, {}, "BF16-dense"),
        (SMALL, {"precision": "FP8"}, "FP8-dense"),
        (SMALL_MOE, {}, "MoE"),
    ],
)
def test_a_plan_and_its_alternatives_carry_the_band_of_their_category(
    model: dict, training: dict, category: str
) -> None:
    res = _plan(model, **training)
    p = res.performance
    assert p is not None and p.error_band is not None
    e = p.error_band
    assert e.category.startswith(category)
    assert 0 < e.median_error <= e.p90_error < 1
    assert e.low_tokens_per_s == pytest.approx(p.tokens_per_s / (1 + e.p90_error))
    assert e.high_tokens_per_s == pytest.approx(p.tokens_per_s / (1 - e.p90_error))
    assert e.low_tokens_per_s < p.tokens_per_s < e.high_tokens_per_s
    rep = band.loso_report()
    assert rep is not None
    want = rep["cells"].get(band.cell_key(category, "TE"))
    if want is None or want["n_speed"] < band.MIN_RUNS:
        want = rep["categories"][category]
    assert e.p90_error == pytest.approx(min(want["mfu_p90"], band.MAX_ERROR))
    for alt in res.alternatives:
        assert alt.performance.error_band is not None


def test_evaluate_carries_the_band() -> None:
    res = _plan(SMALL)
    ev = evaluate(
        EvaluateRequest.model_validate(
            {
                "model": SMALL,
                "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
                "training": {"seq_len": 2048, "global_batch_tokens": 2048 * 32},
                "config": res.config.model_dump(),
            }
        )
    )
    assert ev.performance is not None and ev.performance.error_band == res.performance.error_band


def test_a_thin_cell_falls_back_to_its_category(monkeypatch: pytest.MonkeyPatch) -> None:
    summary = {"n_speed": 20, "mfu_median": 0.05, "mfu_p90": 0.12, "mfu_bias": -0.01}
    thin = summary | {"n_speed": 2, "mfu_p90": 0.5}
    rep = {
        "cells": {"MoE|TORCH": thin, "MoE|TE": summary | {"mfu_p90": 0.2}},
        "categories": {"MoE": summary},
        "all": summary | {"mfu_p90": 0.3},
    }
    monkeypatch.setattr(band, "loso_report", lambda: rep)
    te = band.error_band(True, Precision.BF16, Framework.MEGATRON, 100.0)
    torch = band.error_band(True, Precision.BF16, Framework.TORCHTITAN, 100.0)
    dense = band.error_band(False, Precision.BF16, Framework.MEGATRON, 100.0)
    assert te is not None and te.scope == "cell" and te.p90_error == 0.2
    assert torch is not None and torch.scope == "category" and torch.p90_error == 0.12
    assert dense is not None and dense.scope == "all" and dense.p90_error == 0.3
    monkeypatch.setattr(band, "loso_report", lambda: None)
    assert band.error_band(True, Precision.BF16, Framework.MEGATRON, 100.0) is None


def test_the_curve_has_a_band_with_no_observations() -> None:
    req = CurveRequest.model_validate(
        {
            "model": SMALL,
            "training": {"seq_len": 2048},
            "clusters": [{"gpu": "h100-sxm-80gb"}],
            "grid": {"counts": [2, 4, 8]},
            "batch": {"kind": "FIXED_GLOBAL", "global_batch_tokens": 2048 * 64},
        }
    )
    res = scaling_curve(req)
    assert "none" not in res.band_source and "leave-one-source-out" in res.band_source
    planned = [c for c in res.cells if c.status.value == "PLANNED"]
    assert planned
    for c in planned:
        assert c.band_low_tokens_per_s < c.tokens_per_s < c.band_high_tokens_per_s


def test_the_band_goes_through_the_proto() -> None:
    res = _plan(SMALL)
    msg = to_proto(res, planner_pb2.PlanResponse)
    assert msg.performance.HasField("error_band")
    assert msg.performance.error_band.p90_error == pytest.approx(
        res.performance.error_band.p90_error
    )
    back = from_proto(msg, PlanResult, with_defaults=True)
    assert back.performance.error_band == res.performance.error_band
    json.dumps(res.model_dump(mode="json"))  # and the JSON


def test_the_cli_table_prints_the_band() -> None:
    from meshplan.tools.render.tables import render_plan

    req = PlanRequest.model_validate(
        {
            "model": SMALL,
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
            "training": {"seq_len": 2048, "global_batch_tokens": 2048 * 32},
        }
    )
    res = plan(req)
    text = render_plan(req, res)
    e = res.performance.error_band
    assert f"p90 {e.p90_error:.1%}" in text and "published runs left out of the fit" in text


def test_the_front_carries_the_band_in_days() -> None:
    from meshplan.solver.scheduler import FrontRequest, training_front

    req = FrontRequest.model_validate(
        {
            "model": SMALL,
            "training": {"seq_len": 2048},
            "batch": {"kind": "FIXED_GLOBAL", "global_batch_tokens": 2048 * 64},
            "clusters": [{"gpu": "h100-sxm-80gb", "price_per_gpu_hour": 3.0}],
            "grid": {"counts": [2, 4, 8]},
            "token_budget": 10**9,
        }
    )
    res = training_front(req)
    assert res.points
    for p in res.points:
        assert 0 < p.days_fast < p.days < p.days_slow
