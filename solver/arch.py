"""The resolved model: shape, parameter counts and FLOPs per token.

Parameter counts follow the Megatron/Llama layer layout; FLOPs per token follow PaLM appendix B
(6N + 12·L·a·d_head·s, no causal halving), counting the output layer but not the input
embedding, as torchtitan does. The head width d_head is the model's own when given (Qwen3,
GPT-OSS: a·d_head != h), else h/a. Multi-head latent attention (DeepSeek-V2/V3) counts its own
projections and key/value widths (solver/costmodel/mla.py).
"""

from __future__ import annotations

from dataclasses import field
from functools import cached_property
from typing import TYPE_CHECKING

from meshplan.solver.record import record
from meshplan.solver.schema import LatentAttentionSpec, ModelSpec

if TYPE_CHECKING:  # costmodel imports this module: the class is imported where it is built
    from meshplan.solver.costmodel.mla import Latent

_FIELDS = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_kv_heads",
    "ffn_hidden_size",
    "vocab_size",
)


@record(frozen=True)
class Attention:
    """What a framework needs besides the shape to build the attention: exports carry it, the
    cost model reads none of it (it reads MLA's ranks from `Arch.mla`)."""

    rope_theta: float | None = None  # RoPE base; None: the framework's default (or learned)
    learned_positions: bool = False  # learned absolute position embeddings (GPT-2, GPT-3)
    qk_norm: bool = False  # RMSNorm on queries and keys per head (Qwen3)
    mla: LatentAttentionSpec | None = None  # multi-head latent attention (DeepSeek-V2/V3)


@record(frozen=True)
class Arch:
    """A transformer with every dimension known. Short names for the arithmetic."""

    name: str
    L: int  # layers
    h: int  # hidden size
    a: int  # query heads
    kv: int  # key/value heads
    f: int  # dense FFN width
    V: int  # vocabulary
    gated: bool
    tied: bool
    E: int = 0  # routed experts (0: dense)
    top_k: int = 0
    fe: int = 0  # expert FFN width
    shared: int = 0  # shared experts
    n_dense: int = 0  # leading dense layers of an MoE model
    hd: int = 0  # attention head width (0: h / a)
    mla: Latent | None = None  # multi-head latent attention's ranks (costmodel/mla.py)
    # the attention details an export needs (None: unknown); not part of the cost model's key
    attention: Attention | None = field(default=None, compare=False)

    @cached_property
    def is_moe(self) -> bool:
        return self.E > 0

    @cached_property
    def head_dim(self) -> int:
        return self.hd or self.h // self.a

    @cached_property
    def attn_width(self) -> int:
        """Query (and attention output) width a·d_head; h unless the model says otherwise."""
        return self.a * self.head_dim

    @cached_property
    def qk_dim(self) -> int:
        """Per-head query/key width of the attention core (MLA: non-rotary + rotary parts)."""
        return self.mla.qk if self.mla else self.head_dim

    @cached_property
    def v_dim(self) -> int:
        """Per-head value width of the attention core."""
        return self.mla.v if self.mla else self.head_dim

    @cached_property
    def n_moe_layers(self) -> int:
        return self.L - self.n_dense if self.is_moe else 0

    @cached_property
    def n_dense_layers(self) -> int:
        return self.n_dense if self.is_moe else self.L

    # --- parameters -------------------------------------------------------------------
    def mlp_params(self, width: int) -> int:
        return (3 if self.gated else 2) * self.h * width

    @cached_property
    def attn_params(self) -> int:
        """q and o (h x a·d_head each), k and v (h x kv·d_head each); MLA's projections."""
        if self.mla:
            return self.mla.matmul_params(self.h, self.a)
        return 2 * self.h * self.attn_width + 2 * self.h * self.kv * self.head_dim

    @cached_property
    def attn_down_params(self) -> int:
        """The attention weights tensor parallelism does not split (MLA's down projections)."""
        return self.mla.down_params(self.h) if self.mla else 0

    @cached_property
    def norm_params(self) -> int:
        """Norm weights of one layer: the two h-wide norms and MLA's latent norms."""
        return 2 * self.h + (self.mla.norm_params if self.mla else 0)

    @cached_property
    def dense_layer_params(self) -> int:
        return self.attn_params + self.mlp_params(self.f) + self.norm_params

    @cached_property
    def moe_layer_dense_params(self) -> int:
        """The part of an MoE layer that tp shards but ep does not: attention, shared, router."""
        if not self.is_moe:
            return 0
        return (
            self.attn_params
            + self.shared * self.mlp_params(self.fe)
            + self.h * self.E
            + self.norm_params
        )

    @cached_property
    def moe_layer_expert_params(self) -> int:
        return self.E * self.mlp_params(self.fe) if self.is_moe else 0

    @cached_property
    def embed_params(self) -> int:
        return self.V * self.h

    @cached_property
    def head_params(self) -> int:
        """Output layer (zero extra storage if tied and on the same stage) plus final norm."""
        return self.V * self.h + self.h

    @cached_property
    def total_params(self) -> int:
        layers = self.n_dense_layers * self.dense_layer_params + self.n_moe_layers * (
            self.moe_layer_dense_params + self.moe_layer_expert_params
        )
        out = self.h if self.tied else self.head_params
        return layers + self.embed_params + out

    @cached_property
    def active_params(self) -> int:
        if not self.is_moe:
            return self.total_params
        moe_active = self.moe_layer_dense_params + self.top_k * self.mlp_params(self.fe)
        out = self.h if self.tied else self.head_params
        return (
            self.n_dense_layers * self.dense_layer_params
            + self.n_moe_layers * moe_active
            + self.embed_params
            + out
        )

    # --- FLOPs (forward + backward = 3 x forward = 6 per MAC-param) ----------------------
    def layer_flops_per_token(self, s: int) -> float:
        """Mean model FLOPs per token per layer, incl. attention scores 12·h·s (PaLM app. B;
        MLA: 6·a·s·(d_qk + d_v), its key and value widths)."""
        dense = 6 * (self.attn_params + self.mlp_params(self.f))
        attn = 3 * self.attention_core_fwd_flops_per_token(s)
        if not self.is_moe:
            return dense + attn
        moe = 6 * (
            self.attn_params
            + (self.top_k + self.shared) * self.mlp_params(self.fe)
            + self.h * self.E
        )
        return (self.n_dense_layers * dense + self.n_moe_layers * moe) / self.L + attn

    @cached_property
    def head_flops_per_token(self) -> float:
        return 6.0 * self.V * self.h

    def model_flops_per_token(self, s: int) -> float:
        """6·N_active (without the input embedding) + 12·L·h·s; no causal halving."""
        return self.L * self.layer_flops_per_token(s) + self.head_flops_per_token

    def attention_core_fwd_flops_per_token(self, s: int) -> float:
        """QK^T and AV in the forward pass: what selective recomputation replays (Korthikanti)."""
        if self.mla:
            return self.mla.core_fwd_flops(self.a, s)
        return 2.0 * self.a * (self.qk_dim + self.v_dim) * s


def resolve_model(spec: ModelSpec) -> Arch:
    """A preset, an explicit shape, or a preset with explicit overrides -> Arch."""
    base: dict = {}
    name = "custom"
    preset = None
    if spec.preset:
        from meshplan.solver.catalog import get_model

        p = preset = get_model(spec.preset)
        name = p.name
        base = {k: getattr(p, k) for k in _FIELDS}
        base["gated_mlp"], base["tie_embeddings"], base["moe"] = (
            p.gated_mlp,
            p.tie_embeddings,
            p.moe,
        )
        base["head_dim"] = p.head_dim
    for k in (*_FIELDS, "head_dim", "gated_mlp", "tie_embeddings", "moe"):
        v = getattr(spec, k)
        if v is not None:
            base[k] = v
    missing = [k for k in _FIELDS if k not in base and k != "num_kv_heads"]
    if missing:
        raise ValueError(f"model.{missing[0]} is required when model.preset is not given")
    base.setdefault("num_kv_heads", base["num_attention_heads"])
    h, a, kv = base["hidden_size"], base["num_attention_heads"], base["num_kv_heads"]
    hd = base.get("head_dim") or 0
    if not hd and h % a:
        raise ValueError(
            f"model.hidden_size ({h}) must be divisible by num_attention_heads ({a}) "
            "unless model.head_dim is given"
        )
    if a % kv:
        raise ValueError(
            f"model.num_attention_heads ({a}) must be a multiple of num_kv_heads ({kv})"
        )
    moe = base.get("moe")
    if moe is not None and moe.num_dense_layers >= base["num_layers"]:
        raise ValueError(
            f"model.moe.num_dense_layers ({moe.num_dense_layers}) must be below num_layers "
            f"({base['num_layers']})"
        )
    att = _attention(spec, preset)
    return Arch(
        name=name,
        L=base["num_layers"],
        h=h,
        a=a,
        kv=kv,
        f=base["ffn_hidden_size"],
        V=base["vocab_size"],
        gated=base.get("gated_mlp") if base.get("gated_mlp") is not None else True,
        tied=bool(base.get("tie_embeddings")),
        E=moe.num_experts if moe else 0,
        top_k=moe.top_k if moe else 0,
        fe=moe.expert_ffn_hidden_size if moe else 0,
        shared=moe.num_shared_experts if moe else 0,
        n_dense=moe.num_dense_layers if moe else 0,
        hd=hd if hd and hd * a != h else 0,
        mla=_latent(att.mla if att else None),
        attention=att,
    )


def _latent(m: LatentAttentionSpec | None) -> Latent | None:
    """The cost model's view of the latent attention ranks (None: standard attention)."""
    if m is None:
        return None
    from meshplan.solver.costmodel.mla import Latent

    return Latent(
        m.q_lora_rank, m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim
    )


def _attention(spec: ModelSpec, preset: object | None) -> Attention | None:
    """The preset's attention details with the request's overrides; None when nothing is known."""
    keys = ("rope_theta", "learned_positions", "qk_norm", "latent_attention")
    got = {k: getattr(preset, k) for k in keys} if preset is not None else {}
    got |= {k: getattr(spec, k) for k in keys if getattr(spec, k) is not None}
    if got.get("rope_theta") is not None and spec.learned_positions is None:
        got["learned_positions"] = False  # a RoPE base given: rotary positions
    if not any(got.values()) and all(getattr(spec, k) is None for k in keys):
        return None  # nothing known (a request's explicit false is known: rotary, its default)
    return Attention(
        rope_theta=got.get("rope_theta"),
        learned_positions=bool(got.get("learned_positions")),
        qk_norm=bool(got.get("qk_norm")),
        mla=got.get("latent_attention"),
    )
