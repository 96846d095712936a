"""`meshplan catalog`: the GPUs and model presets a request can name.

The table is read straight from the catalog's JSON files, without building the validated
models, so that it answers as fast as Python starts; `--json` prints the validated entries
(tests/test_cli_words.py checks that both show the same catalog).
"""

from __future__ import annotations

import argparse
import json
from importlib.util import find_spec
from pathlib import Path
from typing import Any


def add_catalog_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of `meshplan catalog`."""
    p.add_argument(
        "--json",
        action="store_true",
        help="print every field of every entry, with its source, as JSON",
    )


def _raw(filename: str) -> dict[str, dict[str, Any]]:
    spec = find_spec("meshplan.solver.catalog")  # locates the package without importing it
    assert spec is not None and spec.submodule_search_locations
    folder = Path(next(iter(spec.submodule_search_locations)))
    data = json.loads((folder / filename).read_text(encoding="utf-8"))
    return {k.lower(): v for k, v in sorted(data.items(), key=lambda kv: kv[0].lower())}


def cmd_catalog(a: argparse.Namespace) -> int:
    if a.json:
        from meshplan.solver.catalog import get_gpu, get_model, gpu_names, model_names

        doc = {
            "gpus": [get_gpu(n).model_dump() for n in gpu_names()],
            "models": [get_model(n).model_dump() for n in model_names()],
        }
        print(json.dumps(doc, indent=2))
        return 0
    print(catalog_table(_raw("gpus.json"), _raw("models.json")))
    return 0


def catalog_table(gpus: dict[str, dict[str, Any]], models: dict[str, dict[str, Any]]) -> str:
    """Two tables: the GPUs (memory, peaks, links) and the models (shape, size)."""
    out = [
        f"{'GPU':<16}{'HBM GiB':>8}{'BF16 TF/s':>10}{'FP8 TF/s':>9}{'NVLink GB/s':>12}"
        f"{'network GB/s':>13}{'per node':>9}"
    ]
    for name, g in gpus.items():
        out.append(
            f"{name:<16}{g['hbm_gib']:>8g}{g['peak_bf16_tflops']:>10g}{g['peak_fp8_tflops']:>9g}"
            f"{g['intra_node_gbps']:>12g}{g['inter_node_gbps']:>13g}{g['gpus_per_node']:>9}"
        )
    out += [
        "(peaks are dense, per GPU; link bandwidths per GPU and direction)",
        "",
        f"{'model':<18}{'layers':>7}{'hidden':>7}{'heads':>6}{'kv':>4}{'experts':>8}{'params':>9}",
    ]
    for name, m in models.items():
        moe = m.get("moe")
        e = f"{moe['num_experts']}x{moe['top_k']}" if moe else "-"
        out.append(
            f"{name:<18}{m['num_layers']:>7}{m['hidden_size']:>7}{m['num_attention_heads']:>6}"
            f"{m['num_kv_heads']:>4}{e:>8}{m['published_params_b']:>8g}B"
        )
    out.append("(experts: routed experts x experts per token; params: as published)")
    return "\n".join(out)
