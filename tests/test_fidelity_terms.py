"""Terms read from the frameworks' code since the last fit, and the calibration data they are
scored on: Megatron's per-chunk dp overlap under interleaving, the output layer in BF16 under
FP8 training, K,V repeated before context-parallel attention, and the llm-foundry and nanotron
speeds in the fit, held out with the document they share."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from meshplan.solver import EvaluateRequest, evaluate
from meshplan.solver.arch import resolve_model
from meshplan.solver.costmodel import CostModel
from meshplan.solver.costmodel.constants import Constants
from meshplan.solver.costmodel.context import n_stage, recipe_of
from meshplan.solver.costmodel.point import Layout
from meshplan.solver.costmodel.timing_axes import _Axes
from meshplan.solver.hardware import resolve_cluster
from meshplan.solver.schema import ClusterSpec, ModelSpec, SearchSpec, TrainingSpec
from meshplan.tools.calibration.fit import leave_one_source_out
from meshplan.tools.calibration.loaders import load_calibration
from meshplan.tools.calibration.runs import fold_of


def cost_model(model: str = "llama3-70b", **training: object) -> CostModel:
    A = resolve_model(ModelSpec(preset=model))
    H = resolve_cluster(ClusterSpec(gpu="h100-sxm-80gb", num_gpus=64))
    return CostModel(A, H, TrainingSpec(seq_len=4096, **training), SearchSpec())


def test_megatron_reduces_each_chunk_behind_the_other_chunks() -> None:
    c = cost_model().ctx
    x, w = _Axes(c), c.K.omega
    assert c.overlaps.dp_per_chunk
    assert x.stage_dp((4, 1)) == x.stage((4, 1))  # one chunk: all of it at the step's end
    for v in (2, 4):
        want = n_stage(c.A.L, 4, v) * Fraction((1 + (v - 1) * (1 - w)) / v)
        assert float(x.stage_dp((4, v))) == pytest.approx(float(want), rel=1e-5)


def _dp_comm(framework: str, v: int) -> float:
    req = EvaluateRequest.model_validate(
        {
            "model": {"preset": "llama3-70b"},
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 256},
            "training": {"seq_len": 4096, "framework": framework},
            "config": {"tp": 8, "pp": 4, "dp": 8, "virtual_stages": v, "micro_batch_size": 1}
            | {"num_microbatches": 8, "zero_stage": 1, "recompute": "FULL"},
        }
    )
    perf = evaluate(req).performance
    assert perf is not None
    return perf.breakdown.dp_comm_s


def test_interleaving_hides_megatrons_dp_traffic_and_only_megatrons() -> None:
    assert _dp_comm("MEGATRON", 4) < 0.8 * _dp_comm("MEGATRON", 1)
    # torchtitan's FSDP under PP reduces once, at the step's end, whatever the chunks
    assert _dp_comm("TORCHTITAN", 2) == pytest.approx(_dp_comm("TORCHTITAN", 1), rel=0.02)


def test_the_output_layer_runs_in_bf16_under_fp8_training() -> None:
    bf16, fp8 = cost_model().rates, cost_model(precision="FP8").rates
    lay = Layout(8, 1, 1, 8, 64, True)
    assert fp8.rate_gemm > 1.5 * bf16.rate_gemm  # the layers' GEMMs run in FP8
    assert fp8.head(lay) == pytest.approx(bf16.head(lay))  # the output layer does not


def test_repeated_kv_heads_widen_the_context_parallel_exchange() -> None:
    cm = cost_model("llama3-8b")
    A = cm.arch
    rec = replace(recipe_of(cm.training), kv_repeated=True)
    rep = CostModel(A, cm.hw, cm.training, SearchSpec(), recipe=rec)
    lay = Layout(1, 1, 4, 16, 64, False)
    assert A.a == 4 * A.kv
    assert rep.rates.cp_hop(lay) == pytest.approx(A.a / A.kv * cm.rates.cp_hop(lay))


def test_the_fit_reads_llm_foundry_and_nanotron_and_holds_them_out_with_their_document() -> None:
    runs = load_calibration()
    sources = {r.source for r in runs}
    assert {"llmfoundry", "nanotron", "mosaicml"} <= sources
    assert fold_of("llmfoundry") == fold_of("mosaicml") == "mosaicml"
    pick = [next(r for r in runs if r.source == s) for s in ("llmfoundry", "mosaicml", "nanotron")]
    seen: list[frozenset[str]] = []

    def fit_fn(train) -> Constants:  # noqa: ANN001
        seen.append(frozenset(r.source for r in train))
        return Constants()

    out = leave_one_source_out(pick, fit_fn)
    assert sorted(seen, key=sorted) == [
        frozenset({"llmfoundry", "mosaicml"}),
        frozenset({"nanotron"}),
    ]
    assert [x.source for x in out] == ["llmfoundry", "mosaicml", "nanotron"]
