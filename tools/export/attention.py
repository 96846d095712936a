"""The attention details an export carries beyond the shape the planner reads: the RoPE base,
QK-norm and multi-head latent attention (MLA). The planner's cost model needs none of them (MLA is
modelled as multi-head attention, solver/catalog/models.json says how), so they are not in the
request; the catalog presets' values come from their published configs, cited below. A model
given by its shape alone exports with the framework's defaults, and the snippet says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshplan.solver.arch import Arch, resolve_model
from meshplan.solver.schema import ModelSpec


@dataclass(frozen=True)
class LatentAttention:
    """DeepSeek-V2/V3's multi-head latent attention (DeepSeek-AI 2024, arXiv:2405.04434 §2.1)."""

    q_lora_rank: int  # query compression rank
    kv_lora_rank: int  # key/value compression rank
    qk_nope_head_dim: int  # per-head query/key width without rotary embedding
    qk_rope_head_dim: int  # per-head width of the decoupled rotary part
    v_head_dim: int  # per-head value width


@dataclass(frozen=True)
class Attention:
    """What a framework needs besides the shape to build the model's attention."""

    rope_theta: float | None  # RoPE base; None: learned absolute positions (GPT-3)
    qk_norm: bool = False  # RMSNorm on queries and keys per head (Qwen3)
    mla: LatentAttention | None = None


# Hugging Face config.json of each preset ("rope_theta", "q_lora_rank", ...); Llama 2 leaves
# rope_theta at the transformers default 10000; GPT-3 has learned positions (Brown et al. 2020).
_LLAMA2 = Attention(rope_theta=10_000.0)
_LLAMA3 = Attention(rope_theta=500_000.0)  # meta-llama/Meta-Llama-3-8B, -70B, Llama-3.1-405B
_MIXTRAL = Attention(rope_theta=1_000_000.0)  # mistralai/Mixtral-8x7B-v0.1, Mixtral-8x22B-v0.1
PRESETS: dict[str, Attention] = {
    "gpt3-175b": Attention(rope_theta=None),
    "llama2-7b": _LLAMA2,
    "llama2-13b": _LLAMA2,
    "llama2-70b": _LLAMA2,
    "llama3-8b": _LLAMA3,
    "llama3-70b": _LLAMA3,
    "llama3-405b": _LLAMA3,
    "mixtral-8x7b": _MIXTRAL,
    "mixtral-8x22b": _MIXTRAL,
    # deepseek-ai/DeepSeek-V3 config.json: rope_theta 10000, q_lora_rank 1536, kv_lora_rank 512,
    # qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128
    "deepseek-v3": Attention(
        rope_theta=10_000.0,
        mla=LatentAttention(
            q_lora_rank=1536,
            kv_lora_rank=512,
            qk_nope_head_dim=128,
            qk_rope_head_dim=64,
            v_head_dim=128,
        ),
    ),
    # Qwen/Qwen3-235B-A22B config.json: rope_theta 1000000; Qwen3 normalises q and k per head
    # (Qwen Team 2025, arXiv:2505.09388 §2)
    "qwen3-235b-a22b": Attention(rope_theta=1_000_000.0, qk_norm=True),
}


def attention_of(A: Arch) -> Attention | None:
    """The attention details of A when it is a catalog preset, shape and all (None: unknown, the
    framework's defaults apply)."""
    twin = catalog_twin(A)
    return PRESETS.get(twin) if twin else None


def unknown_note(A: Arch) -> str:
    """The header line of an export whose attention details are unknown."""
    return (
        f"note: the request gives {A.name or 'the model'}'s shape only: RoPE base, QK-norm and "
        "latent attention take the framework's defaults; set them to the model's"
    )


def catalog_twin(A: Arch) -> str | None:
    """The catalog name of A when A is exactly that preset."""
    try:
        return A.name if resolve_model(ModelSpec(preset=A.name)) == A else None
    except KeyError:
        return None
