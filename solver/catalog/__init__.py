"""The catalog of GPUs and model presets, kept as data with a source for every number.

`gpus.json` and `models.json` (next to this module) are loaded once, validated into frozen
pydantic models and looked up by name, case-insensitively. Research notes behind the numbers,
including the KempnerForge training settings behind its scaling guide, are in `NOTES.md`.
"""

# No `from __future__ import annotations`: pydantic would evaluate every field's annotation
# string when the class is made (typing.ForwardRef compiles each one).
import json
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from meshplan.solver.schema import LatentAttentionSpec, MoESpec

__all__ = [
    "GpuFamily",
    "GpuSpec",
    "ModelPreset",
    "get_gpu",
    "get_model",
    "gpu_names",
    "model_names",
]

GpuFamily = Literal["A100", "H100", "H200", "B200", "MI300X"]


class GpuSpec(BaseModel):
    """One accelerator as the planner sees it, with the system it usually ships in."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Catalog name, lower case, e.g. h100-sxm-80gb.", min_length=1)
    family: GpuFamily = Field(
        description="Architecture family (H800 and the 96 GB H100 count as H100)."
    )
    hbm_gib: float = Field(
        description="HBM per GPU (GiB; the marketed GB value is taken as GiB).", gt=0
    )
    peak_bf16_tflops: float = Field(
        description="Dense (no sparsity) BF16 tensor peak per GPU (TFLOP/s).", gt=0
    )
    peak_fp8_tflops: float = Field(
        description="Dense FP8 tensor peak per GPU (TFLOP/s; equals BF16 where there is no FP8).",
        gt=0,
    )
    fp8_tensor_cores: bool = Field(
        description="The GPU has FP8 tensor cores (Hopper and later); FP8 training needs them."
    )
    hbm_tbps: float = Field(description="HBM bandwidth per GPU (TB/s).", gt=0)
    intra_node_gbps: float = Field(
        description="In-node (NVLink / xGMI) bandwidth per GPU, one direction (GB/s).", gt=0
    )
    inter_node_gbps: float = Field(
        description="Inter-node network bandwidth per GPU, one direction (GB/s).", gt=0
    )
    gpus_per_node: int = Field(
        description="GPUs per node sharing the fast in-node link in the reference system (count).",
        ge=1,
    )
    source: str = Field(
        description="Where each number comes from (datasheet, whitepaper, paper).", min_length=1
    )

    @model_validator(mode="after")
    def _fp8_peak_agrees(self) -> "GpuSpec":
        if self.fp8_tensor_cores != (self.peak_fp8_tflops > self.peak_bf16_tflops):
            raise ValueError(
                f"{self.name}: fp8_tensor_cores ({self.fp8_tensor_cores}) disagrees with the FP8 "
                f"peak ({self.peak_fp8_tflops} vs BF16 {self.peak_bf16_tflops} TFLOP/s)"
            )
        return self


class ModelPreset(BaseModel):
    """A published transformer's shape, with its published parameter count and sources."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Catalog name, lower case, e.g. llama3-70b.", min_length=1)
    num_layers: int = Field(description="Transformer layers (count).", ge=1)
    hidden_size: int = Field(description="Model width d_model (elements).", ge=1)
    num_attention_heads: int = Field(description="Query heads (count).", ge=1)
    num_kv_heads: int = Field(
        description="Key/value heads (count; fewer than query heads means GQA/MQA).", ge=1
    )
    head_dim: int | None = Field(
        default=None,
        description="Width of one attention head (elements; default hidden / heads).",
        ge=1,
    )
    ffn_hidden_size: int = Field(
        description="Dense FFN width (elements); unused when every layer is MoE.", ge=1
    )
    vocab_size: int = Field(description="Vocabulary size (tokens), unpadded.", ge=1)
    gated_mlp: bool = Field(description="SwiGLU-style gated MLP (3 matrices) rather than 2 (GPT).")
    tie_embeddings: bool = Field(description="Input embedding and output layer share one matrix.")
    moe: MoESpec | None = Field(description="MoE shape; null for a dense model.")
    rope_theta: float | None = Field(
        default=None, description="RoPE base theta from the model's config (null: not known).", gt=0
    )
    learned_positions: bool = Field(
        default=False, description="Learned absolute position embeddings instead of RoPE."
    )
    qk_norm: bool = Field(default=False, description="RMSNorm on queries and keys per head.")
    latent_attention: LatentAttentionSpec | None = Field(
        default=None, description="Multi-head latent attention ranks; null for other attention."
    )
    published_params_b: float = Field(
        description="Published total parameter count (billions).", gt=0
    )
    published_active_params_b: float | None = Field(
        description="Published parameters active per token (billions); MoE models only.", gt=0
    )
    source: str = Field(
        description="Citation for the shape and the counts (paper, model card, config.json path).",
        min_length=1,
    )
    notes: str = Field(
        default="",
        description="Caveats, e.g. approximations the planner's schema forces on this model.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> "ModelPreset":
        h, a, k = self.hidden_size, self.num_attention_heads, self.num_kv_heads
        if self.head_dim is None and h % a != 0:
            raise ValueError(f"{self.name}: hidden_size ({h}) must be divisible by heads ({a})")
        if a % k != 0:
            raise ValueError(f"{self.name}: heads ({a}) must be a multiple of kv heads ({k})")
        if (self.moe is None) != (self.published_active_params_b is None):
            raise ValueError(
                f"{self.name}: published_active_params_b is required for MoE models only"
            )
        if self.moe is not None and self.moe.num_dense_layers >= self.num_layers:
            raise ValueError(f"{self.name}: num_dense_layers must be below num_layers")
        return self


def _read(filename: str) -> dict[str, dict[str, Any]]:
    text = (Path(__file__).parent / filename).read_text(encoding="utf-8")
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{filename} must hold a JSON object keyed by catalog name")
    return data


@cache
def _gpus() -> dict[str, GpuSpec]:
    return {
        key.lower(): GpuSpec(name=key.lower(), **entry) for key, entry in _read("gpus.json").items()
    }


@cache
def _models() -> dict[str, ModelPreset]:
    return {
        key.lower(): ModelPreset(name=key.lower(), **entry)
        for key, entry in _read("models.json").items()
    }


def _lookup(kind: str, table: dict[str, Any], name: str) -> Any:
    key = name.strip().lower() if isinstance(name, str) else name
    try:
        return table[key]
    except (KeyError, TypeError):
        known = ", ".join(sorted(table))
        raise KeyError(f"unknown {kind} {name!r}: known: {known}") from None


def get_gpu(name: str) -> GpuSpec:
    """The GPU called `name` (case-insensitive); KeyError naming the known GPUs otherwise."""
    return _lookup("gpu", _gpus(), name)


def get_model(name: str) -> ModelPreset:
    """The model preset called `name` (case-insensitive); KeyError naming the known ones."""
    return _lookup("model", _models(), name)


def gpu_names() -> list[str]:
    """Every catalog GPU name, sorted."""
    return sorted(_gpus())


def model_names() -> list[str]:
    """Every catalog model name, sorted."""
    return sorted(_models())
