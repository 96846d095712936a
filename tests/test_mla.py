"""Multi-head latent attention counted as itself (solver/costmodel/mla.py): DeepSeek-V3's
parameters against its report, the attention core over its own key and value widths, and the
down projections that tensor parallelism does not split."""

from __future__ import annotations

import pytest

from meshplan.solver.arch import resolve_model
from meshplan.solver.costmodel import CostModel
from meshplan.solver.costmodel.point import Layout
from meshplan.solver.hardware import resolve_cluster
from meshplan.solver.schema import ClusterSpec, ModelSpec, SearchSpec, TrainingSpec


def test_deepseek_v3_parameters_match_its_report() -> None:
    A = resolve_model(ModelSpec(preset="deepseek-v3"))
    assert A.mla is not None
    h, a = 7168, 128
    # config.json: q_lora 1536, kv_lora 512, nope 128, rope 64, v 128 (by hand, weight by weight)
    q = h * 1536 + 1536 * a * 192
    kv = h * (512 + 64) + 512 * a * (128 + 128)
    o = a * 128 * h
    assert A.attn_params == q + kv + o == 187_105_280
    assert A.attn_down_params == h * 1536 + h * 576
    # DeepSeek-V3 report (arXiv:2412.19437) §4.2: 671B total, 37B active (MTP module excluded)
    assert A.total_params / 1e9 == pytest.approx(671.0, rel=0.002)
    assert A.active_params / 1e9 == pytest.approx(37.0, rel=0.02)


def test_the_attention_core_reads_mla_key_and_value_widths() -> None:
    A = resolve_model(ModelSpec(preset="deepseek-v3"))
    s = 4096
    assert A.attention_core_fwd_flops_per_token(s) == 2.0 * 128 * s * (192 + 128)
    dense = 6 * (A.attn_params + A.mlp_params(A.f))
    assert A.layer_flops_per_token(s) > dense  # attention core on top, 6·a·s·(192 + 128)
    # a standard model keeps PaLM's 12·a·d_head·s
    B = resolve_model(ModelSpec(preset="llama3-70b"))
    assert B.mla is None and B.qk_dim == B.v_dim == B.head_dim
    want = 6 * (B.attn_params + B.mlp_params(B.f)) + 12 * B.a * B.head_dim * s
    assert B.layer_flops_per_token(s) == want


def _rates(model: str):  # noqa: ANN202
    A = resolve_model(ModelSpec(preset=model))
    H = resolve_cluster(ClusterSpec(gpu="h100-sxm-80gb", num_gpus=64))
    return CostModel(A, H, TrainingSpec(seq_len=4096), SearchSpec()).rates


def test_mla_down_projections_are_duplicated_over_tp_unless_sequence_parallel() -> None:
    R = _rates("deepseek-v3")
    no_sp, sp = R.gemm(Layout(8, 1, 1, 8, 64, False)), R.gemm(Layout(8, 1, 1, 8, 64, True))
    # without sp every tp rank runs the whole down projection: 7/8 of it more than with sp
    assert no_sp - sp == pytest.approx(R.F_down * (1 - 1 / 8) / R.rate_gemm, rel=1e-9)
    # a standard attention's projections are all split: sp changes nothing in its GEMMs
    L = _rates("llama3-70b")
    assert L.F_down == 0
    assert L.gemm(Layout(8, 1, 1, 8, 64, False)) == L.gemm(Layout(8, 1, 1, 8, 64, True))
