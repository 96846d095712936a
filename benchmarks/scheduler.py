"""Scheduler queries: a cold scaling curve of 4 GPU types x 64 counts (256 cells), the same
request again (the answer cache), one Replan and a precomputed Replan table for k = 1..8.

1. ScalingCurve through a loopback server with `--processes` solver processes (default 2,
   every one open to the caller), cold: target <= 2 s for 256 cells. `--cold-runs N` times N
   cold curves, each on a fresh server (the median is judged). With each, the CPU time the
   curve took (this process: server and client; and the solver processes): on a machine
   shared with other work the wall time varies with their load, the CPU time much less.
2. The same request again, over gRPC (the server's answer cache) and in-process (the cache
   key and lookup): target <= 10 ms.
3. Replan of one event (lose a node), in-process, cold: target <= 1 s.
4. Replan precompute k = 1..8, in-process, cold: target <= 3 s.

    python -m benchmarks scheduler [--quick] [--repeats N] [--processes P] [--cold-runs N]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
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
from benchmarks.throughput_paths import pool_server

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
    cold_curve_s: float = 0.0  # the median of cold_runs_s
    cold_runs_s: list[float] = field(default_factory=list)  # wall of each cold curve (s)
    cold_cpu_s: list[float] = field(default_factory=list)  # this process's CPU in each (s)
    cold_solver_cpu_s: list[float] = field(default_factory=list)  # the solver processes' (s)
    cached_grpc: dict = field(default_factory=dict)
    cached_inproc: dict = field(default_factory=dict)
    replan_s: float = 0.0
    precompute_s: float = 0.0
    precompute_rows: int = 0
    source_warning: str = ""

    def add_cold(self, wall: float, cpu: float, solver_cpu: float) -> None:
        self.cold_runs_s.append(wall)
        self.cold_cpu_s.append(cpu)
        self.cold_solver_cpu_s.append(solver_cpu)
        self.cold_curve_s = statistics.median(self.cold_runs_s)


def _children() -> list[int]:
    """This process's child processes (Linux /proc; none elsewhere)."""
    pids: list[int] = []
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                pids += [int(x) for x in f.read().split()]
    except OSError:
        return []
    return pids


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU time of these processes so far (s; a process gone counts 0)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime (proc(5))
    return total


def cold_curve(client: Any, req: Any) -> tuple[Any, float, float, float]:
    """The curve from a server that has not answered it: (the answer, wall s, this process's
    CPU s, the solver processes' CPU s)."""
    pids = _children()
    own, solvers = time.process_time(), _cpu_s(pids)
    curve, wall = timed(client.scaling_curve, req, timeout=3600)
    return curve, wall, time.process_time() - own, _cpu_s(pids) - solvers


def run(
    quick: bool, repeats: int, processes: int = DEFAULT_PROCESSES, cold_runs: int = 1
) -> Report:
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
    for _ in range(cold_runs - 1):  # each cold curve on a fresh server
        with pool_server(processes) as target, PlannerClient(target) as client:
            rep.add_cold(*cold_curve(client, req)[1:])
    with pool_server(processes) as target, PlannerClient(target) as client:
        curve, *figures = cold_curve(client, req)
        rep.add_cold(*figures)
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


def _cold_line(rep: Report) -> str:
    """Each cold curve's wall and CPU time: the CPU time is what load on the machine changes
    least (the solver processes' share is per process)."""
    runs = []
    for wall, own, solvers in zip(
        rep.cold_runs_s, rep.cold_cpu_s, rep.cold_solver_cpu_s, strict=True
    ):
        runs.append(
            f"{fmt_s(wall)} wall, {fmt_s(own + solvers)} CPU (this process {fmt_s(own)}, "
            f"solver processes {fmt_s(solvers / rep.processes)} per process)"
        )
    head = f"cold curves ({len(runs)}, the median judged): " if len(runs) > 1 else "cold curve: "
    return head + "; ".join(runs)


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
    out = [table(["measure", "time", "target", "verdict"], rows), _cold_line(rep)]
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
    totals = [a + b for a, b in zip(rep.cold_cpu_s, rep.cold_solver_cpu_s, strict=True)]
    cpu = statistics.median(totals) if totals else 0.0
    out.append(
        f"summary: scheduler: cold curve {fmt_s(rep.cold_curve_s)} for {rep.cells} cells "
        f"({fmt_s(rep.cold_curve_s / max(rep.cells, 1))}/cell; {fmt_s(cpu)} CPU), cached "
        f"{fmt_s(grpc_p50)} over gRPC / {fmt_s(inproc_p50)} in-process, Replan {fmt_s(rep.replan_s)}, precompute "
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
    p.add_argument(
        "--cold-runs",
        type=int,
        default=1,
        help="cold curves timed, each on a fresh server (count; the median is judged)",
    )
    a = p.parse_args(argv)
    if a.processes < 1:
        p.error(f"--processes: must be >= 1 (got {a.processes})")
    if a.cold_runs < 1:
        p.error(f"--cold-runs: must be >= 1 (got {a.cold_runs})")
    params = {"repeats": a.repeats, "processes": a.processes, "cold_runs": a.cold_runs}
    print(header("scheduler", quick=a.quick, **params), flush=True)
    rep = run(a.quick, a.repeats, a.processes, a.cold_runs)
    print(render(rep))
    write_json(a.json, {"benchmark": "scheduler", "report": asdict(rep)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
