"""Multi-head latent attention (DeepSeek-AI 2024, arXiv:2405.04434 §2.1; DeepSeek-V3 report
arXiv:2412.19437 §2.1.1, eqs. 1-11): its weights and FLOPs per token, as Megatron-Core builds it.

Megatron-LM @ d98e8a6 megatron/core/transformer/multi_latent_attention.py (MLASelfAttention):
linear_q_down_proj h -> q_lora_rank, q_layernorm, linear_q_up_proj q_lora_rank -> a·(nope + rope)
(linear_q_proj h -> a·(nope + rope) when q_lora_rank is 0); linear_kv_down_proj h -> kv_lora_rank
+ rope (the shared rotary key), kv_layernorm, linear_kv_up_proj kv_lora_rank -> a·(nope + v);
core attention with key width nope + rope and value width v; linear_proj a·v -> h. The two down
projections are TELinear parallel_mode="duplicated": tensor parallelism does not split them;
with sequence parallelism each rank runs them on its s/tp tokens (then gathers the latents).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Latent:
    """The ranks and head widths of one model's latent attention (its config.json's)."""

    q_rank: int  # q_lora_rank (0: queries projected directly, DeepSeek-V2-Lite)
    kv_rank: int  # kv_lora_rank
    nope: int  # qk_nope_head_dim
    rope: int  # qk_rope_head_dim (the decoupled rotary part, one shared key per token)
    v: int  # v_head_dim

    @property
    def qk(self) -> int:
        """Per-head query/key width: the non-rotary and rotary parts."""
        return self.nope + self.rope

    def split_params(self, h: int, a: int) -> int:
        """Weights tensor parallelism splits: q up (or q), kv up and the output projection."""
        q = self.q_rank * a * self.qk if self.q_rank else h * a * self.qk
        return q + self.kv_rank * a * (self.nope + self.v) + a * self.v * h

    def down_params(self, h: int) -> int:
        """Weights of the two down projections (duplicated on every tensor-parallel rank)."""
        return h * self.q_rank + h * (self.kv_rank + self.rope)

    def matmul_params(self, h: int, a: int) -> int:
        """Every projection weight of the attention of one layer."""
        return self.split_params(h, a) + self.down_params(h)

    @property
    def norm_params(self) -> int:
        """q_layernorm and kv_layernorm (RMSNorm weights over the latents)."""
        return self.q_rank + self.kv_rank

    def core_fwd_flops(self, a: int, s: int) -> float:
        """QK^T over key width nope + rope and AV over value width v, forward, per token."""
        return 2.0 * a * s * (self.qk + self.v)

    def split_dims(self, a: int) -> int:
        """Output widths of the tensor-split GEMMs (q, kv up) plus the output projection's input
        width: the operand elements that shrink with tp (the rates' traffic)."""
        return a * self.qk + a * (self.nope + self.v) + a * self.v

    @property
    def down_dims(self) -> int:
        """Output widths of the down projections (not split by tp)."""
        return self.q_rank + self.kv_rank + self.rope
