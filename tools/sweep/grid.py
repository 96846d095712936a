"""Grid specs for `meshplan sweep` and `meshplan ladder`: models, GPU counts, sequence lengths.

A model item is one of
- a catalog name: `llama3-70b`;
- a Hugging Face `config.json` (or its directory): `path/to/config.json`;
- a family's catalog members in a parameter range: `llama3:8b..405b` (inclusive, ±10%; the
  family is the catalog-name prefix before `-`; `llama3:*` takes them all);
- family-shaped models scaled to given sizes: `llama3:3b` (one) or `llama3:1b..64b:x2`
  (geometric steps from LO by the factor, up to HI). See `scaled_model`.

A GPU list is comma-separated counts and ranges: `8,64,512` or `8..16384` (LO, 2·LO, 4·LO, ... up
to HI). Sizes take a suffix `m`, `b` or `t` (millions, billions, trillions of parameters).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from meshplan.solver.arch import resolve_model
from meshplan.solver.schema import ModelSpec, MoESpec
from meshplan.tools.cli.inputs import model_label

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([mbt])\s*$", re.IGNORECASE)
_SCALE = {"m": 1e6, "b": 1e9, "t": 1e12}
RANGE_TOLERANCE = 1.10  # a catalog member "8b" (8.03B) or "70b" (70.6B) counts as in range


@dataclass(frozen=True)
class ModelItem:
    """One model of a grid: its label and the request's `model` object, or why it has none."""

    label: str
    spec: dict[str, Any] | None = None
    error: str | None = None
    params: float = field(default=0.0, compare=False)  # total parameters (count), 0 if unknown


def parse_size(text: str) -> float:
    """'1.5b' -> 1.5e9 parameters; ValueError naming the text otherwise."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"size {text!r} must be a number with a suffix m, b or t (e.g. 7b)")
    return float(m.group(1)) * _SCALE[m.group(2).lower()]


def size_label(n: float) -> str:
    """1.5e9 -> '1.5b', 4e8 -> '400m'."""
    for suffix, scale in (("t", 1e12), ("b", 1e9), ("m", 1e6)):
        if n >= scale:
            return f"{n / scale:.3g}{suffix}"
    return f"{n:.3g}"


def parse_gpus(text: str, field_name: str = "--gpus") -> list[int]:
    """'8,64,512' or '8..16384' (doubling from LO) or a mix; ValueError naming the flag."""
    out: list[int] = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        try:
            if ".." in part:
                lo_s, hi_s = part.split("..", 1)
                lo, hi = int(lo_s), int(hi_s)
                if lo < 1 or hi < lo:
                    raise ValueError
                n = lo
                while n <= hi:
                    out.append(n)
                    n *= 2
            else:
                n = int(part)
                if n < 1:
                    raise ValueError
                out.append(n)
        except ValueError:
            raise ValueError(
                f"{field_name}: {part!r} is not a positive count or a range LO..HI"
            ) from None
    if not out:
        raise ValueError(f"{field_name}: no value in {text!r}")
    return sorted(set(out))


def parse_ints(text: str, field_name: str, unique: bool = True) -> list[int]:
    """'4096,8192' -> [4096, 8192] in the order given; ValueError naming the flag."""
    try:
        out = [int(p) for p in str(text).split(",") if p.strip()]
    except ValueError:
        raise ValueError(
            f"{field_name}: {text!r} is not a comma-separated list of integers"
        ) from None
    if not out or any(v < 1 for v in out):
        raise ValueError(f"{field_name}: {text!r} needs positive integers")
    return list(dict.fromkeys(out)) if unique else out


def family_members(family: str) -> list[Any]:
    """Catalog presets whose name starts with `family-`, smallest first."""
    from meshplan.solver.catalog import get_model, model_names

    members = [get_model(n) for n in model_names() if n.startswith(family.lower() + "-")]
    return sorted(members, key=lambda p: p.published_params_b)


def _params(spec: dict[str, Any]) -> int:
    return resolve_model(ModelSpec.model_validate(spec)).total_params


def scaled_model(family: str, target: float) -> dict[str, Any]:
    """A model of `family`'s shape with about `target` parameters.

    The template is the family's catalog member nearest in log-size; kept from it: head width,
    KV heads (GQA), FFN/hidden ratio, vocabulary, gating, tying, experts and top-k. For each
    width (heads in steps of 8) the layer count that hits the target is computed, and the width
    whose d_model / n_layers is nearest the template's is kept (Kaplan et al. 2020, sec. 3.1: at
    fixed N, loss barely depends on shape, so the family's aspect ratio is a fair rule).
    """
    members = family_members(family)
    if not members:
        raise ValueError(f"no catalog model in family {family!r}")
    t = min(members, key=lambda p: abs(math.log(p.published_params_b * 1e9 / target)))
    hd, aspect = t.hidden_size // t.num_attention_heads, t.hidden_size / t.num_layers
    step = 8 if t.num_attention_heads % 8 == 0 else 1  # heads in 8s keep tp up to 8 legal

    def shape(heads: int, layers: int) -> dict[str, Any]:
        h = heads * hd
        kv = t.num_kv_heads if heads % t.num_kv_heads == 0 else math.gcd(heads, t.num_kv_heads)
        if t.num_kv_heads == t.num_attention_heads:
            kv = heads
        spec: dict[str, Any] = {
            "num_layers": layers,
            "hidden_size": h,
            "num_attention_heads": heads,
            "num_kv_heads": kv,
            "ffn_hidden_size": max(256, round(t.ffn_hidden_size / t.hidden_size * h / 256) * 256),
            "vocab_size": t.vocab_size,
            "gated_mlp": t.gated_mlp,
            "tie_embeddings": t.tie_embeddings,
        }
        if t.moe is not None:
            fe = max(64, round(t.moe.expert_ffn_hidden_size / t.hidden_size * h / 64) * 64)
            moe = MoESpec(
                num_experts=t.moe.num_experts,
                top_k=t.moe.top_k,
                expert_ffn_hidden_size=fe,
                num_shared_experts=t.moe.num_shared_experts,
                num_dense_layers=t.moe.num_dense_layers,
            )
            spec["moe"] = moe.model_dump()
        return spec

    first = t.moe.num_dense_layers + 1 if t.moe is not None else 1  # fewest layers kept whole

    def layers_for(heads: int) -> int:
        one, two = _params(shape(heads, first)), _params(shape(heads, first + 1))
        return first + max(0, round((target - one) / (two - one)))

    def aspect_miss(heads: int) -> float:
        layers = layers_for(heads)
        size_miss = abs(math.log(_params(shape(heads, layers)) / target))
        return size_miss + abs(math.log(heads * hd / layers / aspect))

    heads = min(range(step, 1024 + step, step), key=aspect_miss)
    layers = layers_for(heads)
    return shape(heads, layers)


def expand_model(item: str) -> list[ModelItem]:
    """One model item of a grid as one or more ModelItems; a bad item is one item with an error."""
    item = item.strip()
    try:
        if item.endswith(".json") or Path(item).is_dir():
            from meshplan.tools.models.hf_config import load_hf_config

            spec = load_hf_config(Path(item)).model_dump(exclude_none=True)
            return [ModelItem(model_label(item), spec, params=_params(spec))]
        if ":" not in item:
            return [_preset(item)]
        family, _, sizes = item.partition(":")
        if sizes in ("", "*"):
            return [_preset(p.name) for p in family_members(family)] or [
                ModelItem(item, error=f"no catalog model in family {family!r}")
            ]
        lo_s, dots, rest = sizes.partition("..")
        if not dots:
            n = parse_size(sizes)
            spec = scaled_model(family, n)
            return [ModelItem(f"{family}:{size_label(n)}", spec, params=_params(spec))]
        hi_s, colon, factor_s = rest.partition(":")
        lo, hi = parse_size(lo_s), parse_size(hi_s)
        if hi < lo:
            raise ValueError(f"range {sizes!r} runs backwards")
        if colon:
            return _scaled_range(family, lo, hi, factor_s)
        members = [
            p
            for p in family_members(family)
            if lo / RANGE_TOLERANCE <= p.published_params_b * 1e9 <= hi * RANGE_TOLERANCE
        ]
        if not members:
            known = ", ".join(
                f"{p.name} ({p.published_params_b:g}b)" for p in family_members(family)
            )
            raise ValueError(
                f"no catalog model of family {family!r} between {lo_s} and {hi_s}"
                f" (members: {known or 'none'})"
            )
        return [_preset(p.name) for p in members]
    except (ValueError, KeyError, OSError) as err:
        msg = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
        return [ModelItem(item, error=msg if item in msg else f"model {item!r}: {msg}")]


def _scaled_range(family: str, lo: float, hi: float, factor_s: str) -> list[ModelItem]:
    if not factor_s.lower().startswith("x"):
        raise ValueError(f"step {factor_s!r} must be a factor such as x2")
    factor = float(factor_s[1:])
    if not factor > 1.05:
        raise ValueError(f"step {factor_s!r} must be above x1.05")
    out, n = [], lo
    while n <= hi * (1 + 1e-9):
        spec = scaled_model(family, n)
        out.append(ModelItem(f"{family}:{size_label(n)}", spec, params=_params(spec)))
        n *= factor
    return out


def _preset(name: str) -> ModelItem:
    from meshplan.solver.catalog import get_model

    try:
        p = get_model(name)
    except KeyError as err:
        return ModelItem(name, error=f"model {name!r}: {err.args[0]}")
    return ModelItem(p.name, {"preset": p.name}, params=_params({"preset": p.name}))


def expand_models(text: str) -> list[ModelItem]:
    """A comma-separated list of model items, expanded, duplicates (by label) dropped."""
    out: dict[str, ModelItem] = {}
    for part in str(text).split(","):
        if part.strip():
            for m in expand_model(part):
                if m.label in out and out[m.label].spec != m.spec:  # two configs, one name
                    m = replace(m, label=part.strip())
                out.setdefault(m.label, m)
    if not out:
        raise ValueError(f"--models: no model in {text!r}")
    return list(out.values())
