"""The attention details an export carries beyond the shape the cost model reads: the RoPE base,
learned positions, QK-norm and multi-head latent attention (MLA). They come with the model
(`model.rope_theta`, `learned_positions`, `qk_norm`, `latent_attention`; a catalog preset's from
its published config, solver/catalog/models.json; a Hugging Face config.json's as it gives
them). A model given by its shape alone exports with the framework's defaults, and the snippet
says so.
"""

from __future__ import annotations

from meshplan.solver.arch import Arch

# The frameworks whose model code cannot build an attention feature (at the commits
# solver/profiles/ cites): MLA is Megatron-Core's (multi_latent_attention.py) and torchtitan's
# deepseek_v3 model only; QK-norm is missing from Megatron-DeepSpeed's and nanotron's Llama.
_NO_MLA = ("deepspeed", "kempnerforge", "llm_foundry", "nanotron")
_NO_QK_NORM = {"deepspeed": "Megatron-DeepSpeed's model", "nanotron": "nanotron's Llama model"}


def attention_limits(kind: str, A: Arch) -> list[str]:
    """Attention a framework's model cannot build (QK-norm, latent attention)."""
    att, out = A.attention, []
    if att is None:
        return out
    if att.mla is not None and kind in _NO_MLA:
        out.append(f"{kind}'s model has no multi-head latent attention")
    if att.qk_norm and kind in _NO_QK_NORM:
        out.append(f"{_NO_QK_NORM[kind]} has no QK-norm")
    return out


def rotary(A: Arch) -> bool:
    """Rotary positions: the model says so, or (unknown) a Llama-style gated block implies it."""
    att = A.attention
    return A.gated if att is None else not att.learned_positions


def unknown_note(A: Arch) -> str:
    """The header line of an export whose attention details are unknown."""
    return (
        f"note: the request gives {A.name or 'the model'}'s shape only: RoPE base, QK-norm and "
        "latent attention take the framework's defaults; set them to the model's "
        "(model.rope_theta, model.qk_norm, model.latent_attention; or --model with its "
        "config.json)"
    )
