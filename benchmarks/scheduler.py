"""Scheduler queries: a cold scaling curve of 4 GPU types x 64 counts (256 cells), the same
request again (the answer cache), one Replan and a precomputed Replan table for k = 1..8.

1. ScalingCurve through a loopback server with `--processes` solver processes (default 2,
   every one open to the caller), cold: target <= 2 s for 256 cells.
2. The same request again, over gRPC (the server's answer cache) and in-process (the cache
   key and lookup): target <= 10 ms.
3. Replan of one event (lose a node), in-process, cold: target <= 1 s.
4. Replan precompute k = 1..8, in-process, cold: target <= 3 s.

    python -m benchmarks scheduler [--quick] [--repeats N] [--processes P]
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks.common import (
    SourceWatch,
    Summary,
    arg_parser,
    fmt_s,
    header,
    table,
    timed,
    verdict,
    write_json,
)
from benchmarks.throughput import pool_server

DEFAULT_PROCESSES = 2
TARGETS = {"cold_curve": 2.0, "cached_curve": 0.010, "replan": 1.0, "precompute": 3.0}
GPUS = ("h100-sxm-80gb", "h200-141gb", "a100-sxm-80gb", "b200-192gb")


def curve_body(quick: bool) -> dict:
    """256 cells (4 types x whole nodes 1..64) of llama3-70b at a fixed 4 Mi-token batch;
    --quick: 2 types x 4 counts of llama3-8b."""
    if quick:
        return {
            "model": {"preset": "llama3-8b"},
            "training": {"seq_len": 4096},
            "clusters": [{"gpu": g} for g in GPUS[:2]],
            "grid": {"counts": [8, 16, 32, 64]},
            "batch": {"kind": "FIXED_GLOBAL", "global_batch_tokens": 4096 * 256},
        }
    return {
        "model": {"preset": "llama3-70b"},
        "training": {"seq_len": 4096},
        "clusters": [{"gpu": g} for g in GPUS],
        "grid": {"max_nodes": 64},
        "batch": {"kind": "FIXED_GLOBAL", "global_batch_tokens": 4096 * 1024},
    }


def replan_body(quick: bool, precompute: bool) -> dict:
    """llama3-70b on 512 GPUs (tp8 pp2 dp32) losing a node at SAME_MODEL_PARALLEL, keeping the
    global batch; --quick: llama3-8b on 64 GPUs."""
    if quick:
        cluster, cfg, model = 64, {"tp": 2, "pp": 1, "dp": 32, "micro_batch_size": 2,
                                   "num_microbatches": 4}, "llama3-8b"  # fmt: skip
    else:
        cluster, cfg, model = 512, {"tp": 8, "pp": 2, "dp": 32, "micro_batch_size": 1,
                                    "num_microbatches": 32, "recompute": "SELECTIVE"}, "llama3-70b"  # fmt: skip
    event = {"precompute_nodes": 8 if not quick else 3} if precompute else {"delta_nodes": -1}
    return {
        "model": {"preset": model},
        "training": {"seq_len": 4096},
        "cluster": {"num_gpus": cluster},
        "config": cfg,
        "event": event,
        "compatibility": "SAME_MODEL_PARALLEL",
        "batch": {"kind": "FIXED_GLOBAL"},
    }


@dataclass
class Report:
    quick: bool
    processes: int = DEFAULT_PROCESSES
    cells: int = 0
    planned: int = 0
    cold_curve_s: float = 0.0
    cached_grpc: dict = field(default_factory=dict)
    cached_inproc: dict = field(default_factory=dict)
    replan_s: float = 0.0
    precompute_s: float = 0.0
    precompute_rows: int = 0
    source_warning: str = ""


def run(quick: bool, repeats: int, processes: int = DEFAULT_PROCESSES) -> Report:
    import grpc

    from meshplan.client import PlannerClient
    from meshplan.client.scheduler import _message
    from meshplan.solver.scheduler import (
        AnswerCache,
        CurveRequest,
        ReplanRequest,
        replan,
        scaling_curve,
    )
    from meshplan.v1 import planner_pb2_grpc

    watch = SourceWatch()
    rep = Report(quick=quick, processes=processes)
    req = CurveRequest.model_validate(curve_body(quick))
    with pool_server(processes) as target, PlannerClient(target) as client:
        curve, rep.cold_curve_s = timed(client.scaling_curve, req, timeout=3600)
        rep.cells = len(curve.cells)
        rep.planned = sum(c.status.value == "PLANNED" for c in curve.cells)
        msg = _message("ScalingCurve", req)
        with grpc.insecure_channel(target) as channel:  # raw bytes: what a scheduler receives
            stub = planner_pb2_grpc.PlannerStub(channel)
            first = stub.ScalingCurve(msg, timeout=60).SerializeToString()
            times = []
            for _ in range(repeats):
                again, t = timed(stub.ScalingCurve, msg, timeout=60)
                assert again.SerializeToString() == first, "the same request gave other bytes"
                times.append(t)
        rep.cached_grpc = asdict(Summary.of(times))
    cache: AnswerCache[Any] = AnswerCache(4)
    cache.put(curve.cache_key, curve)  # the in-process answer for this request, as computed
    times = []
    for _ in range(repeats):
        fresh = CurveRequest.model_validate(curve_body(quick))  # a new object: key it again
        hit, t = timed(scaling_curve, fresh, cache=cache)
        assert hit is curve
        times.append(t)
    rep.cached_inproc = asdict(Summary.of(times))
    _, rep.replan_s = timed(replan, ReplanRequest.model_validate(replan_body(quick, False)))
    table_, rep.precompute_s = timed(replan, ReplanRequest.model_validate(replan_body(quick, True)))
    rep.precompute_rows = len(table_.rows)
    rep.source_warning = watch.warning()
    return rep


def render(rep: Report) -> str:
    grpc_p50, inproc_p50 = rep.cached_grpc["p50"], rep.cached_inproc["p50"]
    rows = [
        [f"cold curve ({rep.cells} cells, {rep.planned} planned, {rep.processes} processes)",
         fmt_s(rep.cold_curve_s),
         fmt_s(TARGETS["cold_curve"]), verdict(rep.cold_curve_s, TARGETS["cold_curve"])],
        ["same request again, gRPC (p50)", fmt_s(grpc_p50), fmt_s(TARGETS["cached_curve"]),
         verdict(grpc_p50, TARGETS["cached_curve"])],
        ["same request again, in-process (p50)", fmt_s(inproc_p50),
         fmt_s(TARGETS["cached_curve"]), verdict(inproc_p50, TARGETS["cached_curve"])],
        ["Replan, one event", fmt_s(rep.replan_s), fmt_s(TARGETS["replan"]),
         verdict(rep.replan_s, TARGETS["replan"])],
        [f"Replan precompute k = 1..{rep.precompute_rows}", fmt_s(rep.precompute_s),
         fmt_s(TARGETS["precompute"]), verdict(rep.precompute_s, TARGETS["precompute"])],
    ]  # fmt: skip
    out = [table(["measure", "time", "target", "verdict"], rows)]
    if rep.quick:
        out.append("(--quick: a small subset; the targets are for the full run)")
    if rep.source_warning:
        out.append(rep.source_warning)
    met = sum(
        v <= TARGETS[k]
        for k, v in (
            ("cold_curve", rep.cold_curve_s),
            ("cached_curve", grpc_p50),
            ("cached_curve", inproc_p50),
            ("replan", rep.replan_s),
            ("precompute", rep.precompute_s),
        )
    )
    out.append(
        f"summary: scheduler: cold curve {fmt_s(rep.cold_curve_s)} for {rep.cells} cells "
        f"({fmt_s(rep.cold_curve_s / max(rep.cells, 1))}/cell), cached {fmt_s(grpc_p50)} over "
        f"gRPC / {fmt_s(inproc_p50)} in-process, Replan {fmt_s(rep.replan_s)}, precompute "
        f"{fmt_s(rep.precompute_s)}; {met}/5 targets met"
    )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = arg_parser("scheduler", __doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=20, help="cached calls timed (count)")
    p.add_argument(
        "--processes",
        type=int,
        default=DEFAULT_PROCESSES,
        help=f"solver processes of the server (default {DEFAULT_PROCESSES})",
    )
    a = p.parse_args(argv)
    if a.processes < 1:
        p.error(f"--processes: must be >= 1 (got {a.processes})")
    print(header("scheduler", quick=a.quick, repeats=a.repeats, processes=a.processes), flush=True)
    rep = run(a.quick, a.repeats, a.processes)
    print(render(rep))
    write_json(a.json, {"benchmark": "scheduler", "report": asdict(rep)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
