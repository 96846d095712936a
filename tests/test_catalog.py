"""The GPU and model catalog: every entry loads, is sourced, and adds up to its published size."""

from __future__ import annotations

import json
from importlib.resources import files

import pytest
from pydantic import ValidationError

from meshplan.solver.arch import resolve_model
from meshplan.solver.catalog import (
    GpuSpec,
    ModelPreset,
    get_gpu,
    get_model,
    gpu_names,
    model_names,
)
from meshplan.solver.schema import ModelSpec, MoESpec

REQUIRED_GPUS = {
    "a100-sxm-40gb",
    "a100-sxm-80gb",
    "h100-sxm-80gb",
    "h100-sxm-96gb",
    "h800-sxm-80gb",
    "h200-141gb",
    "b200-192gb",
    "mi300x-192gb",
}
REQUIRED_MODELS = {
    "gpt3-175b",
    "llama2-7b",
    "llama2-13b",
    "llama2-70b",
    "llama3-8b",
    "llama3-70b",
    "llama3-405b",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "deepseek-v3",
    "qwen3-235b-a22b",
    "kempnerforge-7b",
    "kempnerforge-13b",
    "kempnerforge-70b",
}

TOTAL_TOLERANCE = 0.03
ACTIVE_TOLERANCE = 0.05


def parameter_counts(m: ModelPreset) -> tuple[int, int]:
    """(total, active) parameters by the catalog's counting rule (biases and positions ignored)."""
    h, layers, vocab = m.hidden_size, m.num_layers, m.vocab_size
    mats = 3 if m.gated_mlp else 2
    head = m.head_dim or h // m.num_attention_heads  # Qwen3: 128 with 64 heads on h = 4096
    attention = 2 * h * m.num_attention_heads * head + 2 * h * m.num_kv_heads * head
    norms = 2 * h
    dense_layer = attention + mats * h * m.ffn_hidden_size + norms
    embeddings = vocab * h + (0 if m.tie_embeddings else vocab * h) + h  # + final norm
    if m.moe is None:
        total = layers * dense_layer + embeddings
        return total, total
    e = m.moe
    moe_layers = layers - e.num_dense_layers
    expert = mats * h * e.expert_ffn_hidden_size
    router = h * e.num_experts
    moe_total = attention + (e.num_experts + e.num_shared_experts) * expert + router + norms
    moe_active = attention + (e.top_k + e.num_shared_experts) * expert + router + norms
    dense = e.num_dense_layers * dense_layer
    return (
        dense + moe_layers * moe_total + embeddings,
        dense + moe_layers * moe_active + embeddings,
    )


def _raw(filename: str) -> dict:
    return json.loads(
        files("meshplan.solver.catalog").joinpath(filename).read_text(encoding="utf-8")
    )


# --- loading ------------------------------------------------------------------------------


def test_required_entries_present() -> None:
    assert set(gpu_names()) >= REQUIRED_GPUS
    assert set(model_names()) >= REQUIRED_MODELS


def test_names_sorted_and_match_the_json() -> None:
    assert gpu_names() == sorted(_raw("gpus.json"))
    assert model_names() == sorted(_raw("models.json"))


@pytest.mark.parametrize("name", gpu_names())
def test_every_gpu_loads_positive_and_sourced(name: str) -> None:
    gpu = get_gpu(name)
    assert isinstance(gpu, GpuSpec)
    assert gpu.name == name
    for field in (
        "hbm_gib",
        "peak_bf16_tflops",
        "peak_fp8_tflops",
        "hbm_tbps",
        "intra_node_gbps",
        "inter_node_gbps",
        "gpus_per_node",
    ):
        assert getattr(gpu, field) > 0, field
    assert gpu.source.strip()
    # FP8 never slower than BF16; in-node link faster than the network.
    assert gpu.peak_fp8_tflops >= gpu.peak_bf16_tflops
    assert gpu.intra_node_gbps > gpu.inter_node_gbps


@pytest.mark.parametrize("name", model_names())
def test_every_model_loads_positive_and_sourced(name: str) -> None:
    m = get_model(name)
    assert isinstance(m, ModelPreset)
    assert m.name == name
    for field in (
        "num_layers",
        "hidden_size",
        "num_attention_heads",
        "num_kv_heads",
        "ffn_hidden_size",
        "vocab_size",
        "published_params_b",
    ):
        assert getattr(m, field) > 0, field
    assert m.source.strip()
    assert m.hidden_size % m.num_attention_heads == 0
    assert m.num_attention_heads % m.num_kv_heads == 0
    if m.moe is not None:
        assert isinstance(m.moe, MoESpec)
        assert m.published_active_params_b is not None and m.published_active_params_b > 0
        assert m.published_active_params_b < m.published_params_b
        for field in ("num_experts", "top_k", "expert_ffn_hidden_size"):
            assert getattr(m.moe, field) > 0, field
    else:
        assert m.published_active_params_b is None


def test_documented_peaks() -> None:
    # The peaks the calibration README and the KempnerForge guide rely on (dense, no sparsity).
    assert get_gpu("a100-sxm-80gb").peak_bf16_tflops == 312
    assert get_gpu("a100-sxm-40gb").peak_fp8_tflops == 312  # no FP8 on A100
    for name in ("h100-sxm-80gb", "h100-sxm-96gb", "h800-sxm-80gb", "h200-141gb"):
        assert get_gpu(name).peak_bf16_tflops == 989
        assert get_gpu(name).peak_fp8_tflops == 1979
    assert get_gpu("h800-sxm-80gb").intra_node_gbps < get_gpu("h100-sxm-80gb").intra_node_gbps
    assert get_gpu("mi300x-192gb").peak_bf16_tflops == pytest.approx(1307.4)
    assert get_gpu("h200-141gb").hbm_gib == 141
    assert get_gpu("h100-sxm-96gb").hbm_gib == 96


# --- parameter counts ---------------------------------------------------------------------


@pytest.mark.parametrize("name", model_names())
def test_total_parameters_match_published(name: str) -> None:
    m = get_model(name)
    total, _ = parameter_counts(m)
    assert total / 1e9 == pytest.approx(m.published_params_b, rel=TOTAL_TOLERANCE), name


@pytest.mark.parametrize("name", [n for n in model_names() if get_model(n).moe is not None])
def test_active_parameters_match_published(name: str) -> None:
    m = get_model(name)
    _, active = parameter_counts(m)
    assert active / 1e9 == pytest.approx(m.published_active_params_b, rel=ACTIVE_TOLERANCE), name


def test_qwen3_head_dim_is_the_models_own() -> None:
    # config.json: head_dim 128 with 64 query heads on hidden 4096 (attention width 8192). Without
    # it, attention was half-counted and the active count came out 14% low.
    m = get_model("qwen3-235b-a22b")
    assert m.head_dim == 128 and m.head_dim * m.num_attention_heads == 2 * m.hidden_size
    total, active = parameter_counts(m)
    a = resolve_model(ModelSpec(preset="qwen3-235b-a22b"))
    assert (a.total_params, a.active_params) == (total, active)
    assert abs(active / 22.0e9 - 1) < 0.02 and abs(total / 235e9 - 1) < 0.01
    assert a.attn_params == 2 * 4096 * 8192 + 2 * 4096 * 4 * 128


def test_kempnerforge_shapes_match_the_guide_benchmarks() -> None:
    # mfu_scaling_2026-04-05.md: 7B = 8.03B, 13B = 14.84B, 70B = 70.55B (Llama-3 vocab, GQA 8).
    for name, billions in (
        ("kempnerforge-7b", 8.03),
        ("kempnerforge-13b", 14.84),
        ("kempnerforge-70b", 70.55),
    ):
        m = get_model(name)
        assert m.vocab_size == 128256 and m.num_kv_heads == 8
        assert parameter_counts(m)[0] / 1e9 == pytest.approx(billions, abs=0.005)


# --- lookup -------------------------------------------------------------------------------


def test_lookup_is_case_insensitive() -> None:
    assert get_gpu("H100-SXM-80GB") == get_gpu("h100-sxm-80gb")
    assert get_model("Llama3-70B") is get_model("llama3-70b")


def test_unknown_gpu_raises_key_error_naming_it() -> None:
    with pytest.raises(KeyError) as info:
        get_gpu("h999")
    message = info.value.args[0]
    assert "gpu" in message and "'h999'" in message
    assert "h100-sxm-80gb" in message


def test_unknown_model_raises_key_error_naming_it() -> None:
    with pytest.raises(KeyError) as info:
        get_model("llama9-1t")
    message = info.value.args[0]
    assert "model" in message and "'llama9-1t'" in message
    assert "llama3-70b" in message


def test_entries_are_frozen_and_strict() -> None:
    gpu = get_gpu("h100-sxm-80gb")
    with pytest.raises(ValidationError):
        gpu.hbm_gib = 1  # type: ignore[misc]
    data = gpu.model_dump() | {"surprise": 1}
    with pytest.raises(ValidationError):
        GpuSpec(**data)
    bad = get_model("llama2-7b").model_dump() | {"num_attention_heads": 3}
    with pytest.raises(ValidationError):
        ModelPreset(**bad)


def test_names_lists_are_copies() -> None:
    names = gpu_names()
    names.clear()
    assert gpu_names()
