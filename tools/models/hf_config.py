"""Read a local Hugging Face `config.json` into a `ModelSpec` (no network).

Supported `model_type`s: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe,
deepseek_v2, deepseek_v3, gpt_neox, gpt2. Field names are those of the matching
`transformers` configuration classes (`LlamaConfig`, `MixtralConfig`, `Qwen2MoeConfig`, ...).

An explicit `head_dim` (Qwen3, Qwen3-MoE, Mistral-style configs) is kept as `model.head_dim`
when heads * head_dim != hidden. The RoPE base (`rope_theta`, transformers' default when the
file leaves it out), learned positions (gpt2), QK-norm (qwen3, qwen3_moe) and MLA's ranks
(deepseek_v2/v3; the cost model counts and times MLA from them) are kept. Approximations (the
first is logged as a warning):
- `ModelSpec` knows only *leading* dense layers; dense layers elsewhere (decoder_sparse_step,
  mlp_only_layers, moe_layer_freq) are counted and moved to the front: totals stay exact.
- Biases (GPT-2, GPT-NeoX, Qwen2 qkv), the weights of learned position embeddings (GPT-2) and of
  QK-norm, RoPE scaling, GPT-NeoX's partial rotary and DeepSeek's multi-token-prediction module
  are not represented (the last three logged as warnings when present).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from meshplan.solver.schema import LatentAttentionSpec, ModelSpec, MoESpec

log = logging.getLogger(__name__)

# transformers' defaults for tie_word_embeddings (GPT2Config ties, the others do not).
_TIED_DEFAULT = {"gpt2": True}
_GATED = {
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
}  # SwiGLU: gate, up, down
SUPPORTED_MODEL_TYPES: tuple[str, ...] = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
    "gpt_neox",
    "gpt2",
)


class HFConfigError(ValueError):
    """A config.json meshplan cannot read: unknown model_type or a missing/invalid field."""


class _Reader:
    """Field access that names the file, the field and the supported types on failure."""

    def __init__(self, d: dict[str, Any], source: str) -> None:
        self.d, self.source = d, source
        self.model_type = d.get("model_type")

    def fail(self, what: str) -> HFConfigError:
        return HFConfigError(
            f"{self.source}: {what} (model_type {self.model_type!r}; supported model types: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)})"
        )

    def req(self, *names: str) -> Any:
        for n in names:
            if self.d.get(n) is not None:
                return self.d[n]
        raise self.fail(f"missing required field {' / '.join(repr(n) for n in names)}")

    def opt(self, name: str, default: Any) -> Any:
        v = self.d.get(name)
        return default if v is None else v

    def count(self, *names: str, minimum: int = 1) -> int:
        v = self.req(*names)
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise self.fail(f"field {names[0]!r} must be an integer >= {minimum}, got {v!r}")
        return v

    def opt_count(self, name: str, default: int, minimum: int = 1) -> int:
        return default if self.d.get(name) is None else self.count(name, minimum=minimum)


def load_hf_config(path: str | Path) -> ModelSpec:
    """Read a transformers `config.json` (a file, or a directory holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        d = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise HFConfigError(f"{p}: cannot read a JSON config ({e})") from e
    if not isinstance(d, dict):
        raise HFConfigError(f"{p}: expected a JSON object, got {type(d).__name__}")
    return modelspec_from_hf_dict(d, source=str(p))


def modelspec_from_hf_dict(d: dict[str, Any], source: str = "<dict>") -> ModelSpec:
    """Map a transformers config dict to a `ModelSpec` (see the module docstring)."""
    r = _Reader(d, source)
    mt = r.model_type
    if mt is None:
        raise r.fail("missing required field 'model_type'")
    if mt not in SUPPORTED_MODEL_TYPES:
        raise r.fail(f"unsupported model_type {mt!r}")

    if mt == "gpt2":
        layers, hidden = r.count("n_layer"), r.count("n_embd")
        heads = r.count("n_head")
        ffn = r.opt_count("n_inner", 4 * hidden)  # GPT2Block: n_inner None -> 4 * n_embd
    else:
        layers, hidden = r.count("num_hidden_layers"), r.count("hidden_size")
        heads = r.count("num_attention_heads")
        ffn = r.count("intermediate_size")
    kv = heads
    if mt not in ("gpt2", "gpt_neox") and d.get("num_key_value_heads") is not None:
        kv = r.count("num_key_value_heads")
    if mt in ("deepseek_v2", "deepseek_v3"):
        # kv heads = heads; the cost model reads MLA's own widths from latent_attention
        kv = heads
    head_dim = None if mt in ("deepseek_v2", "deepseek_v3") else _head_dim(r, hidden, heads, kv)
    try:
        return _spec(r, mt, layers, hidden, heads, kv, ffn, head_dim)
    except ValidationError as e:  # e.g. top_k > experts: a bad file, reported as one
        raise r.fail(f"inconsistent fields: {e.errors()[0]['msg']}") from e


def _spec(
    r: _Reader,
    mt: str,
    layers: int,
    hidden: int,
    heads: int,
    kv: int,
    ffn: int,
    head_dim: int | None,
) -> ModelSpec:
    return ModelSpec(
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv,
        head_dim=head_dim,
        ffn_hidden_size=ffn,
        vocab_size=r.count("vocab_size"),
        gated_mlp=mt in _GATED,
        tie_embeddings=bool(r.opt("tie_word_embeddings", _TIED_DEFAULT.get(mt, False))),
        moe=_moe(r, mt, layers, ffn),
        **_attention(r, mt),
    )


# transformers' default rope_theta per configuration class (MixtralConfig 1e6, the others 1e4)
_ROPE_DEFAULT = {"mixtral": 1_000_000.0}


def _attention(r: _Reader, mt: str) -> dict[str, Any]:
    """Positions, QK-norm and latent attention: what an export needs besides the shape."""
    if mt == "gpt2":  # GPT2Model: wpe, learned absolute positions
        return {"learned_positions": True}
    out: dict[str, Any] = {"rope_theta": _rope_theta(r, mt)}
    if mt == "gpt_neox" and r.opt("rotary_pct", 1.0) != 1.0:
        log.warning(
            "%s: rotary_pct %s (partial rotary) is not carried", r.source, r.d["rotary_pct"]
        )
    if r.d.get("rope_scaling"):
        log.warning("%s: rope_scaling %s is not carried", r.source, r.d["rope_scaling"])
    if mt in ("qwen3", "qwen3_moe"):  # Qwen3Attention: q_norm and k_norm over head_dim
        out["qk_norm"] = True
    if mt in ("deepseek_v2", "deepseek_v3"):  # DeepseekV3Attention's ranks and head widths
        out["latent_attention"] = LatentAttentionSpec(
            q_lora_rank=r.opt_count("q_lora_rank", 0, minimum=0),  # null: no query compression
            kv_lora_rank=r.count("kv_lora_rank"),
            qk_nope_head_dim=r.count("qk_nope_head_dim"),
            qk_rope_head_dim=r.count("qk_rope_head_dim"),
            v_head_dim=r.count("v_head_dim"),
        )
    return out


def _rope_theta(r: _Reader, mt: str) -> float:
    """rope_theta (transformers 5 nests it in rope_parameters; GPT-NeoX: rotary_emb_base)."""
    nested = r.d.get("rope_parameters")
    v = nested.get("rope_theta") if isinstance(nested, dict) else None
    if v is None:
        v = r.opt("rotary_emb_base" if mt == "gpt_neox" else "rope_theta", None)
    if v is None:
        return _ROPE_DEFAULT.get(mt, 10_000.0)
    if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
        raise r.fail(f"field 'rope_theta' must be a positive number, got {v!r}")
    return float(v)


def _head_dim(r: _Reader, hidden: int, heads: int, kv: int) -> int | None:
    """The config's head_dim when it is not hidden / heads (None: the default holds)."""
    if heads % kv:
        raise r.fail(
            f"num_attention_heads ({heads}) is not a multiple of num_key_value_heads ({kv})"
        )
    head_dim = r.opt_count("head_dim", 0, minimum=0)
    if not head_dim or heads * head_dim == hidden:
        if hidden % heads:
            raise r.fail(
                f"hidden_size ({hidden}) is not divisible by num_attention_heads ({heads}) "
                "and the config gives no head_dim"
            )
        return None
    return head_dim


def _moe(r: _Reader, mt: str, layers: int, ffn: int) -> MoESpec | None:
    if mt == "mixtral":  # every layer sparse; each expert is a full-width SwiGLU MLP
        return MoESpec(
            num_experts=r.count("num_local_experts"),
            top_k=r.count("num_experts_per_tok"),
            expert_ffn_hidden_size=ffn,
        )
    if mt in ("qwen2_moe", "qwen3_moe"):
        width = r.count("moe_intermediate_size")
        shared_width = r.opt_count("shared_expert_intermediate_size", 0, minimum=0)
        # One shared MLP of width shared_expert_intermediate_size, stored as that many experts
        # of the routed width, rounded (Qwen1.5-MoE: 5632/1408 = 4, Qwen2-57B: 20480/2560 = 8).
        shared = round(shared_width / width)
        # Qwen2MoeDecoderLayer: layer i is sparse iff i not in mlp_only_layers, (i+1) % step == 0.
        step = r.opt_count("decoder_sparse_step", 1)
        only = r.opt("mlp_only_layers", [])
        if not isinstance(only, list) or not all(type(i) is int for i in only):
            raise r.fail(f"field 'mlp_only_layers' must be a list of layer indices, got {only!r}")
        dense = _dense_layers(r, layers, lambda i: i in only or (i + 1) % step)
        return _moe_spec(r, r.count("num_experts"), width, shared, dense, layers)
    if mt in ("deepseek_v2", "deepseek_v3"):
        first_k = r.count("first_k_dense_replace", minimum=0)
        # DeepseekV3DecoderLayer: layer i is sparse iff i >= first_k_dense_replace, i % freq == 0.
        freq = r.opt_count("moe_layer_freq", 1)
        dense = _dense_layers(r, layers, lambda i: i < first_k or i % freq)
        return _moe_spec(
            r,
            r.count("n_routed_experts"),
            r.count("moe_intermediate_size"),
            r.count("n_shared_experts", minimum=0),
            dense,
            layers,
        )
    return None


def _dense_layers(r: _Reader, layers: int, is_dense: Callable[[int], object]) -> int:
    """Count the dense layers; ModelSpec puts them first, so say when they are not."""
    idx = [i for i in range(layers) if is_dense(i)]
    if idx != list(range(len(idx))):
        log.warning("%s: dense layers %s counted as the first %d", r.source, idx, len(idx))
    return len(idx)


def _moe_spec(
    r: _Reader, experts: int, width: int, shared: int, dense: int, layers: int
) -> MoESpec:
    if dense >= layers:
        raise r.fail("no layer is sparse although the model_type is a mixture of experts")
    return MoESpec(
        num_experts=experts,
        top_k=r.count("num_experts_per_tok"),
        expert_ffn_hidden_size=width,
        num_shared_experts=shared,
        num_dense_layers=dense,
    )


def count_parameters(spec: ModelSpec) -> int:
    """Total weights of an explicit ModelSpec (no biases, no position embeddings).

    Per layer: attention 2h*heads*d + 2h*kv*d (q, o and k, v; d = head_dim or h/heads), two
    norms of h; a dense MLP
    (3 if gated else 2)*h*ffn; an MoE MLP (experts + shared)*(3|2)*h*expert_ffn plus an h x
    experts router. Plus embeddings V*h, the output layer V*h unless tied, the final norm h.
    """
    h, a, kv = spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads
    L, V, ffn = spec.num_layers, spec.vocab_size, spec.ffn_hidden_size
    if None in (h, a, kv, L, V, ffn, spec.gated_mlp, spec.tie_embeddings):
        raise ValueError("count_parameters needs an explicit ModelSpec (resolve the preset first)")
    mats = 3 if spec.gated_mlp else 2
    d = spec.head_dim or h // a
    attn = 2 * h * a * d + 2 * h * kv * d + 2 * h
    dense_layer = attn + mats * h * ffn
    total = V * h * (1 if spec.tie_embeddings else 2) + h
    if spec.moe is None:
        return total + L * dense_layer
    m = spec.moe
    moe_layer = attn + (m.num_experts + m.num_shared_experts) * mats * h * m.expert_ffn_hidden_size
    moe_layer += h * m.num_experts
    return total + m.num_dense_layers * dense_layer + (L - m.num_dense_layers) * moe_layer
