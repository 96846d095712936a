"""An elastic-training layout table: world size -> layout, from Replan's precompute mode.

At job start, ask meshplan once for the layout after losing 1..K nodes (Replan with
event.precompute_nodes = K) and write the answers as JSON keyed by world size. At every restart
the training script reads its world size and picks the row: TorchElastic sets WORLD_SIZE in each
worker's environment; Ray Train gives `ray.train.get_context().get_world_size()`. The row holds
everything a launcher needs (degrees, micro-batch size and count, ZeRO stage, recomputation) and
says whether the change restarts the model shards or only resizes data parallelism.

    python examples/elastic_layout_table.py --server localhost:50051 --out layouts.json
    python examples/elastic_layout_table.py --server planner:50051 --tls-ca ca.pem --token-file token

and in the training script, at start-up:

    table = json.load(open("layouts.json"))
    row = layout_for(table, int(os.environ["WORLD_SIZE"]))       # TorchElastic
    row = layout_for(table, ray.train.get_context().get_world_size())   # Ray Train
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from meshplan.solver.scheduler import CellStatus, ReplanRequest, ReplanResult
from meshplan.tools.cli.remote import add_connection_flags, connect

KEYS = ("tp", "pp", "dp", "cp", "ep", "virtual_stages", "micro_batch_size", "num_microbatches",
        "zero_stage", "recompute", "sequence_parallel")  # fmt: skip


def table_from(req: ReplanRequest, res: ReplanResult) -> dict[str, dict]:
    """{world size: row}: the running layout first, then one row per planned loss."""
    cfg = req.config.model_dump(mode="json")
    out = {
        str(res.before_num_gpus): {
            **{k: cfg[k] for k in KEYS},
            "num_gpus_used": req.config.tp * req.config.pp * req.config.cp * req.config.dp,
            "global_batch_tokens": res.before_global_batch_tokens,
            "tokens_per_s": res.before_tokens_per_s,
            "restart_implied": False,
        }
    }
    for r in res.rows:
        if r.status is not CellStatus.PLANNED:
            continue  # a size nothing fits on has no row: the reader falls back to a smaller one
        c = r.config.model_dump(mode="json")
        out[str(r.num_gpus)] = {
            **{k: c[k] for k in KEYS},
            "num_gpus_used": r.num_gpus_used,
            "global_batch_tokens": r.global_batch_tokens,
            "tokens_per_s": r.tokens_per_s,
            "restart_implied": r.restart_implied,
        }
    return out


def layout_for(table: dict[str, dict], world_size: int) -> dict:
    """The row for `world_size`, or for the largest size below it (its extra GPUs stay idle)."""
    sizes = sorted((int(k) for k in table if int(k) <= world_size), reverse=True)
    if not sizes:
        raise LookupError(f"no layout for {world_size} GPUs (smallest: {min(map(int, table))})")
    return table[str(sizes[0])]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    ap.add_argument("--server", required=True, help="HOST:PORT of a meshplan server")
    add_connection_flags(ap)  # --tls-ca, --tls-cert/--tls-key, --token-file (or MESHPLAN_*)
    ap.add_argument("--out", help="write the table here (default: stdout only)")
    ap.add_argument("--nodes-lost", type=int, default=3, help="K: rows for losing 1..K nodes")
    a = ap.parse_args(argv)
    req = ReplanRequest.model_validate(
        {
            "model": {"preset": "llama3-8b"},
            "training": {"seq_len": 4096},
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 64},
            "config": {
                "tp": 2,
                "pp": 1,
                "dp": 32,
                "micro_batch_size": 2,
                "num_microbatches": 4,
                "zero_stage": 1,
                "recompute": "SELECTIVE",
            },  # fmt: skip
            "event": {"precompute_nodes": a.nodes_lost},
            "compatibility": "SAME_MODEL_PARALLEL",  # what a dp-only checkpoint reload allows
            "checkpoint_reshard": "DP_ONLY",
            "batch": {"kind": "FIXED_GLOBAL"},  # keep the global batch: more micro-batches
        }
    )
    with connect(a) as client:
        res = client.replan(req, timeout=600)
    table = table_from(req, res)
    text = json.dumps(table, indent=2, sort_keys=True)
    if a.out:
        Path(a.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
