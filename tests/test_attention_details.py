"""The attention details a model carries for its exports (RoPE base, learned positions, QK-norm,
multi-head latent attention): read from a Hugging Face config.json, set in a request, carried over
gRPC, and written by each framework's export; the cost model ignores them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError
from test_export import MEGATRON_FLAGS, one, shell_args

from meshplan.convert import from_proto, to_proto
from meshplan.solver.arch import resolve_model
from meshplan.solver.schema import ModelSpec, ParallelConfig, TrainingSpec
from meshplan.tools.export.emit import emit
from meshplan.tools.models.hf_config import HFConfigError, load_hf_config, modelspec_from_hf_dict
from meshplan.v1 import spec_pb2

DATA = Path(__file__).parent / "data" / "hf"
DP8 = ParallelConfig(tp=1, pp=1, dp=8, micro_batch_size=1, num_microbatches=1)


def _emit(kind: str, model: ModelSpec, c: ParallelConfig = DP8, **training: object) -> str:
    t = TrainingSpec(seq_len=4096, **training)
    return emit(kind, c, model, t, c.dp * c.micro_batch_size * c.num_microbatches * 4096)


def test_deepseek_config_keeps_its_latent_attention() -> None:
    spec = load_hf_config(DATA / "deepseek_v3.json")
    mla = spec.latent_attention
    assert mla is not None and (mla.q_lora_rank, mla.kv_lora_rank) == (1536, 512)
    assert (mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.v_head_dim) == (128, 64, 128)
    assert spec.rope_theta == 10_000.0 and not spec.qk_norm
    c = ParallelConfig(tp=1, pp=1, dp=64, ep=64, micro_batch_size=1, num_microbatches=1)
    a = shell_args(_emit("megatron", spec, c), MEGATRON_FLAGS)
    assert "--multi-latent-attention" in a and one(a, "--q-lora-rank") == "1536"
    assert one(a, "--qk-head-dim") == "128" and one(a, "--v-head-dim") == "128"
    assert "--group-query-attention" not in a  # MLA has no query groups


def test_qwen3_config_keeps_qk_norm_and_its_rope_base() -> None:
    spec = load_hf_config(DATA / "qwen3_8b.json")
    assert spec.qk_norm and spec.rope_theta == 1_000_000.0 and spec.latent_attention is None
    a = shell_args(_emit("megatron", spec), MEGATRON_FLAGS)
    assert "--qk-layernorm" in a and one(a, "--rotary-base") == "1000000"
    assert "take the framework's defaults" not in _emit("megatron", spec)
    fsdp = DP8.model_copy(update={"zero_stage": 3})
    foundry = yaml.safe_load(_emit("llm_foundry", spec, fsdp, framework="LLM_FOUNDRY"))
    attn = foundry["model"]["attn_config"]
    assert attn["qk_gn"] is True and attn["rope_theta"] == 1_000_000 and attn["rope"] is True


def test_rope_base_defaults_are_transformers_and_nanotron_gets_it() -> None:
    base = json.loads((DATA / "llama3_8b.json").read_text())
    assert modelspec_from_hf_dict(base).rope_theta == 500_000.0
    del base["rope_theta"]
    assert modelspec_from_hf_dict(base).rope_theta == 10_000.0  # LlamaConfig's default
    mixtral = json.loads((DATA / "mixtral_8x7b.json").read_text())
    del mixtral["rope_theta"]
    assert modelspec_from_hf_dict(mixtral).rope_theta == 1_000_000.0  # MixtralConfig's
    nested = {**base, "rope_parameters": {"rope_theta": 250_000.0, "rope_type": "default"}}
    assert modelspec_from_hf_dict(nested).rope_theta == 250_000.0  # transformers 5's form
    neox = load_hf_config(DATA / "gpt_neox_20b.json")
    assert neox.rope_theta == 10_000.0 and not neox.learned_positions  # rotary_emb_base
    spec = modelspec_from_hf_dict({**base, "rope_theta": 123_456.0})
    nano = yaml.safe_load(_emit("nanotron", spec, framework="NANOTRON"))
    assert nano["model"]["model_config"]["rope_theta"] == 123_456.0
    with pytest.raises(HFConfigError, match="rope_theta.*positive number.*'fast'"):
        modelspec_from_hf_dict({**base, "rope_theta": "fast"})


def test_gpt2_has_learned_positions_in_every_megatron_export() -> None:
    spec = load_hf_config(DATA / "gpt2.json")
    assert spec.learned_positions and spec.rope_theta is None
    a = shell_args(_emit("megatron", spec), MEGATRON_FLAGS)
    assert "--position-embedding-type" not in a and "--rotary-base" not in a  # learned_absolute
    # an ungated model that says it is rotary (GPT-NeoX) gets RoPE and its base
    a = shell_args(_emit("megatron", load_hf_config(DATA / "gpt_neox_20b.json")), MEGATRON_FLAGS)
    assert one(a, "--position-embedding-type") == "rope" and one(a, "--rotary-base") == "10000"


def test_request_overrides_the_presets_and_unknown_shapes_say_so() -> None:
    spec = ModelSpec(preset="llama3-70b", num_layers=40, rope_theta=1e6, qk_norm=True)
    att = resolve_model(spec).attention
    assert att is not None and (att.rope_theta, att.qk_norm) == (1e6, True)
    a = shell_args(_emit("megatron", spec), MEGATRON_FLAGS)
    assert one(a, "--rotary-base") == "1000000" and "--qk-layernorm" in a
    shape = ModelSpec(num_layers=4, hidden_size=1024, num_attention_heads=8, num_kv_heads=8,
                      ffn_hidden_size=4096, vocab_size=32000)  # fmt: skip
    assert resolve_model(shape).attention is None
    assert "config.json" in _emit("megatron", shape)  # the note says how to give them
    # GPT-3 told it is rotary: RoPE at the framework's base, no longer learned positions
    rope = resolve_model(ModelSpec(preset="gpt3-175b", learned_positions=False)).attention
    assert rope is not None and not rope.learned_positions and rope.rope_theta is None
    a = shell_args(_emit("megatron", ModelSpec(preset="gpt3-175b", learned_positions=False),
                         ParallelConfig(tp=8, pp=1, dp=8, micro_batch_size=1, num_microbatches=1)),
                   MEGATRON_FLAGS)  # fmt: skip
    assert one(a, "--position-embedding-type") == "rope" and "--rotary-base" not in a
    # attention details never change what the cost model sees
    assert resolve_model(ModelSpec(preset="llama3-70b", rope_theta=1.0)) == resolve_model(
        ModelSpec(preset="llama3-70b")
    )


def test_frameworks_refuse_attention_they_cannot_build() -> None:
    spec = load_hf_config(DATA / "deepseek_v3.json")
    c = ParallelConfig(tp=1, pp=1, dp=64, micro_batch_size=1, num_microbatches=1, zero_stage=3)
    with pytest.raises(ValueError, match="no multi-head latent attention"):
        _emit("kempnerforge", spec, c, framework="KEMPNERFORGE")
    qwen = load_hf_config(DATA / "qwen3_8b.json")
    with pytest.raises(ValueError, match="nanotron's Llama model has no QK-norm"):
        _emit("nanotron", qwen, framework="NANOTRON")


def test_learned_positions_with_a_rope_base_is_bad_input() -> None:
    with pytest.raises(ValidationError, match="rope_theta.*learned_positions"):
        ModelSpec(preset="gpt3-175b", learned_positions=True, rope_theta=1e4)
    with pytest.raises(ValidationError, match="rope_theta"):
        ModelSpec(preset="llama3-8b", rope_theta=0)


def test_attention_details_cross_grpc() -> None:
    spec = load_hf_config(DATA / "deepseek_v3.json")
    msg = to_proto(spec, spec_pb2.ModelSpec)
    assert msg.latent_attention.kv_lora_rank == 512 and msg.rope_theta == 10_000.0
    assert from_proto(msg, ModelSpec) == spec
