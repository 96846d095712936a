"""What the user hands over, read: a request file, a model given by name or config.json, and
the flags written over the request."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from meshplan.tools.cli.flags import BOOL_RECIPE_FLAGS, PINS, RECIPE_FLAGS
from meshplan.tools.cli.messages import shorten


def read_json_file(path: str, what: str = "--request") -> Any:
    """A JSON document from a file ('-': stdin); ValueError naming the flag for anything wrong
    with it (unreadable, not JSON, nested deeper than the parser allows)."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{what}: cannot read {shorten(path)!r}: {_reason(e)}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{what}: {shorten(path)!r} is not JSON: {e}") from None
    except RecursionError:
        raise ValueError(f"{what}: {shorten(path)!r} is nested too deeply to read") from None


def _reason(e: Exception) -> str:
    return e.strerror if isinstance(e, OSError) and e.strerror else str(e)


def _section(req: dict[str, Any], key: str) -> dict[str, Any]:
    """The request's object `key`, created if absent; ValueError if it is not an object."""
    value = req.setdefault(key, {})
    if not isinstance(value, dict):
        raise ValueError(f"{key}: must be a JSON object, got {type(value).__name__}")
    return value


def model_spec(value: str) -> dict[str, Any]:
    """The request's `model` for --model: a catalog preset, or a Hugging Face config."""
    path = Path(value)
    if value.endswith(".json") or path.is_dir():
        from meshplan.tools.models.hf_config import load_hf_config

        return load_hf_config(path).model_dump(exclude_none=True)
    return {"preset": value}


def model_label(value: str | None, preset: str | None = None) -> str:
    """A model's name for people: the preset, or for a Hugging Face config its
    `_name_or_path`, else the directory that holds config.json, else the file's stem."""
    if preset:
        return preset
    if not value:
        return "custom model"
    path = Path(value)
    file = path / "config.json" if path.is_dir() else path
    try:
        name = json.loads(file.read_text(encoding="utf-8")).get("_name_or_path")
    except (OSError, ValueError, AttributeError, RecursionError):
        name = None
    if isinstance(name, str) and name.strip():
        return shorten(name.strip())
    if file.name == "config.json":
        return file.resolve().parent.name or str(file)
    return file.stem


def request_from_flags(a: argparse.Namespace, evaluate: bool) -> dict[str, Any]:
    """The request dict: --request's object (if any) with the flags given written over it."""
    req: Any = read_json_file(a.request) if a.request else {}
    if not isinstance(req, dict):
        kind = "an EvaluateRequest" if evaluate else "a PlanRequest"
        raise ValueError(
            f"--request: must hold one JSON object ({kind}), got a {type(req).__name__}"
        )
    origins: dict[str, str] = {}  # request field -> the flag that set it (errors name it)
    a.origins = origins
    if a.model:
        _section(req, "model").update(model_spec(a.model))
        origins["model"] = "--model"
    cluster = {
        key: getattr(a, flag)
        for flag, key in (
            ("gpu", "gpu"),
            ("gpus", "num_gpus"),
            ("gpus_per_node", "gpus_per_node"),
            ("hbm_gib", "hbm_gib"),
        )
        if getattr(a, flag, None) is not None
    }
    if cluster:
        _section(req, "cluster").update(cluster)
        flag = {"num_gpus": "--gpus", "gpu": "--gpu"}
        origins |= {f"cluster.{k}": flag.get(k, _flag(k)) for k in cluster}
    keys = ("seq_len", "global_batch_tokens", "critical_batch_tokens", "train_tokens")
    training = {k: getattr(a, k) for k in (*keys, "precision") if getattr(a, k, None) is not None}
    if getattr(a, "framework", None):
        training["framework"] = a.framework
    for k in RECIPE_FLAGS:  # the memory recipe's knobs
        if getattr(a, k, None) is not None:
            v = getattr(a, k)
            training[k] = v == "true" if k in BOOL_RECIPE_FLAGS else v
    if training:
        _section(req, "training").update(training)
        origins |= {f"training.{k}": _flag(k) for k in training}
    pins = {
        k: getattr(a, k) for k in (*PINS, "zero_stage", "recompute") if getattr(a, k) is not None
    }
    if a.sequence_parallel is not None:
        pins["sequence_parallel"] = a.sequence_parallel == "true"
    section = "config" if evaluate else "search"
    origins |= {f"{section}.{k}": _flag(k) for k in pins}
    if evaluate:
        if pins:
            _section(req, "config").update(pins)
        return req
    search = {**pins, **({"allow_fewer_gpus": True} if a.allow_fewer_gpus else {})}
    if search:
        _section(req, "search").update(search)
    opts = {k: v for k, v in (("top_k", a.top_k), ("time_limit_s", a.time_limit)) if v is not None}
    if opts:
        _section(req, "options").update(opts)
        names = {"top_k": "--top-k", "time_limit_s": "--time-limit"}
        origins |= {f"options.{k}": names[k] for k in opts}
    return req


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")
