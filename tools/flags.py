"""Request flags shared by the commands: the contract's names with dashes, turned into a
request dict that the pydantic schema validates."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pydantic import ValidationError

from meshplan.tools.remote import add_connection_flags

PINS = ("tp", "pp", "dp", "cp", "ep", "virtual_stages", "micro_batch_size", "num_microbatches")


def add_request_flags(p: argparse.ArgumentParser, evaluate: bool) -> None:
    p.add_argument("--request", help="a full request as JSON (the contract's field names)")
    p.add_argument("--model", help="catalog name (e.g. llama3-70b) or a HF config.json path")
    p.add_argument("--gpu", help="catalog GPU (default h100-sxm-80gb)")
    p.add_argument("--gpus", type=int, help="number of GPUs")
    p.add_argument("--gpus-per-node", type=int)
    p.add_argument("--hbm-gib", type=float)
    p.add_argument("--seq-len", type=int)
    p.add_argument("--global-batch-tokens", type=int)
    p.add_argument("--critical-batch-tokens", type=int)
    p.add_argument("--precision", choices=["BF16", "FP8"])
    for name in PINS:
        p.add_argument("--" + name.replace("_", "-"), type=int, dest=name)
    p.add_argument("--zero-stage", type=int, choices=[0, 1, 2, 3])
    p.add_argument("--recompute", choices=["NONE", "SELECTIVE", "FULL"])
    p.add_argument("--sequence-parallel", choices=["true", "false"])
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--server", help="HOST:PORT of a meshplan server (default: in-process)")
    add_connection_flags(p)
    p.add_argument("--plot", help="draw the memory bill against HBM as a PNG to this path")
    if not evaluate:
        p.add_argument("--top-k", type=int, help="distinct alternatives to return")
        p.add_argument("--time-limit", type=float, help="solver time limit (s)")
        p.add_argument("--allow-fewer-gpus", action="store_true")
        p.add_argument(
            "--framework",
            choices=["GENERIC", "KEMPNERFORGE", "MEGATRON", "TORCHTITAN", "DEEPSPEED"],
        )
        p.add_argument(
            "--emit",
            choices=["megatron", "torchtitan", "deepspeed", "kempnerforge"],
            help="print a launcher snippet for the plan",
        )


def model_spec(value: str) -> dict:
    path = Path(value)
    if value.endswith(".json") or path.is_dir():
        from meshplan.tools.hf_config import load_hf_config

        return load_hf_config(path).model_dump(exclude_none=True)
    return {"preset": value}


def request_from_flags(a: argparse.Namespace, evaluate: bool) -> dict:
    req: dict = json.loads(Path(a.request).read_text()) if a.request else {}
    model, cluster = req.setdefault("model", {}), req.setdefault("cluster", {})
    training, search = req.setdefault("training", {}), req.setdefault("search", {})
    if a.model:
        model.update(model_spec(a.model))
    for flag, key in (
        ("gpu", "gpu"),
        ("gpus", "num_gpus"),
        ("gpus_per_node", "gpus_per_node"),
        ("hbm_gib", "hbm_gib"),
    ):
        if getattr(a, flag) is not None:
            cluster[key] = getattr(a, flag)
    for key in ("seq_len", "global_batch_tokens", "critical_batch_tokens", "precision"):
        if getattr(a, key) is not None:
            training[key] = getattr(a, key)
    pins = {
        k: getattr(a, k) for k in (*PINS, "zero_stage", "recompute") if getattr(a, k) is not None
    }
    if a.sequence_parallel is not None:
        pins["sequence_parallel"] = a.sequence_parallel == "true"
    if evaluate:
        req.pop("search", None)
        cfg = req.setdefault("config", {})
        cfg.update(pins)
        return req
    search.update(pins)
    if a.allow_fewer_gpus:
        search["allow_fewer_gpus"] = True
    if getattr(a, "framework", None):
        training["framework"] = a.framework
    opts = req.setdefault("options", {})
    if a.top_k is not None:
        opts["top_k"] = a.top_k
    if a.time_limit is not None:
        opts["time_limit_s"] = a.time_limit
    return req


def one_line(e: Exception) -> str:
    if isinstance(e, ValidationError):
        parts = []
        for err in e.errors():
            loc = ".".join(str(x) for x in err["loc"])
            parts.append(f"{loc}: {err['msg']} (got {err.get('input')!r})")
        return "invalid request: " + "; ".join(parts)
    if isinstance(e, KeyError):
        return f"invalid request: {e.args[0]}"
    return f"invalid request: {e}"
