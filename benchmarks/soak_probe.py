"""The soak benchmark's hostile-caller phases (an independent probe's findings, replayed):

- memory: the 78-byte Replan (llama3-405b on 1,048,576 GPUs, `event.precompute_nodes` 1024)
  and distinct 4,096-cell curves, the whole process tree's RSS sampled throughout;
- requests of scheduler queries carrying many observations and of 1 MiB (used by the load);
- residual CPU: the tree's CPU time over the 10 s after the last call;
- SIGTERM with a query of 12,000 observations in flight: the time the server takes to exit.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import psutil

if TYPE_CHECKING:
    from benchmarks.soak import Server


def tree(pid: int) -> list[psutil.Process]:
    """The process `pid` and every process under it."""
    root = psutil.Process(pid)
    try:
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return [root]


def tree_rss_mb(pid: int) -> float:
    """Resident memory of the process tree under `pid`, summed (MB)."""
    return sum(processes_rss_mb(pid))


def processes_rss_mb(pid: int) -> list[float]:
    """Resident memory of each process of the tree under `pid`: the server's first (MB)."""
    out = []
    for proc in tree(pid):
        try:
            out.append(proc.memory_info().rss / 1e6)
        except psutil.Error:
            continue
    return out


def tree_cpu_s(pid: int) -> float:
    """CPU time (user + system) of the living processes of the tree under `pid` (s)."""
    total = 0.0
    for proc in tree(pid):
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            continue
    return total


class PeakRss:
    """The tree's RSS sampled every `every_s` on a thread while in use: its peak (MB)."""

    def __init__(self, pid: int, every_s: float = 0.25) -> None:
        self.pid, self.every_s, self.peak = pid, every_s, 0.0
        self.at_peak: list[float] = []  # each process's RSS at the peak, the server's first
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                each = processes_rss_mb(self.pid)
            except psutil.Error:
                return
            if sum(each) > self.peak:
                self.peak, self.at_peak = sum(each), each
            self._stop.wait(self.every_s)


def observed_curve(observations: int, seed: int = 0) -> Any:
    """A ScalingCurve request (domain object) over llama3-8b on 8..64 H100s with
    `observations` measured step times of distinct layouts, cycled (2,000 ~ 110 KB on the
    wire; 16,000 ~ 0.9 MB, near the 1 MiB cap)."""
    from meshplan.solver.scheduler import CurveRequest

    layouts = []
    for n in (8, 16, 32, 64):
        for tp in (1, 2, 4, 8):
            for mb in (1, 2):
                for m in (8, 16, 32, 64):
                    layouts.append((n, tp, n // tp, mb, m))
    obs = []
    for i in range(observations):
        n, tp, dp, mb, m = layouts[(i + seed) % len(layouts)]
        cfg = {"tp": tp, "pp": 1, "dp": dp, "micro_batch_size": mb, "num_microbatches": m,
               "zero_stage": 1 if dp > 1 else 0}  # fmt: skip
        obs.append({"cluster": "h100-sxm-80gb", "num_gpus": n, "config": cfg,
                    "step_time_s": 1.0 + (i % 97) / 50})  # fmt: skip
    return CurveRequest.model_validate(
        {
            "model": {"preset": "llama3-8b"},
            "training": {"seq_len": 4096},
            "clusters": [{"gpu": "h100-sxm-80gb"}],
            "grid": {"counts": [8, 16, 32, 64]},
            "batch": {"kind": "FIXED_GLOBAL", "global_batch_tokens": 4096 * 512 * (1 + seed % 4)},
            "observations": obs,
            "options": {"cell_time_limit_s": 1},
        }
    )


REPLAN_78 = {
    "model": {"preset": "llama3-405b"},
    "cluster": {"num_gpus": 1_048_576},
    "config": {"tp": 8, "pp": 16, "dp": 8192, "micro_batch_size": 1, "num_microbatches": 16},
    "event": {"precompute_nodes": 1024},
    "compatibility": "SAME_MODEL_PARALLEL",
    "batch": {"kind": "FIXED_GLOBAL"},
}


def large_curve(i: int) -> Any:
    """Distinct 4,096-cell curves (odd counts 1..8,191 with tp pinned to 2: every cell is
    COUNT_NOT_USABLE, so the answer is 4,096 cells at a small cost to compute)."""
    from meshplan.solver.scheduler import CurveRequest

    return CurveRequest.model_validate(
        {
            "model": {"preset": "llama3-8b"},
            "training": {"seq_len": 4096 * (1 + i % 4)},
            "search": {"tp": 2},
            "clusters": [{"gpu": "h100-sxm-80gb", "name": f"h100-{i}"}],
            "grid": {"counts": list(range(1, 8192, 2))},
            "batch": {
                "kind": "FIXED_GLOBAL",
                "global_batch_tokens": 4096 * 4 * (1 + i % 4) * (1 + i),
            },
        }
    )


def memory_phase(server: Server, token: str, curves: int, replan_s: float) -> dict[str, Any]:
    """The 78-byte Replan (a `replan_s` deadline), then `curves` distinct 4,096-cell curves
    from 4 clients: codes and the tree's peak RSS."""
    from meshplan.client import PlannerClient, PlannerError
    from meshplan.solver.scheduler import ReplanRequest

    codes: Counter = Counter()
    each_before = processes_rss_mb(server.proc.pid)
    before = sum(each_before)
    with PeakRss(server.proc.pid) as peak, PlannerClient(server.target, token=token) as c:
        t0 = time.monotonic()
        try:
            c.replan(ReplanRequest.model_validate(REPLAN_78), timeout=replan_s)
            codes["replan OK"] += 1
        except PlannerError as err:
            codes[f"replan {err.code.name}"] += 1
        replan_s = time.monotonic() - t0
        replan_peak = peak.peak

        half: list[float] = []  # the server process's RSS once half the curves are answered
        answered = Counter()

        def one(i: int) -> None:
            try:
                c.scaling_curve(large_curve(i), timeout=120)
                codes["curve OK"] += 1
            except PlannerError as err:
                codes[f"curve {err.code.name}"] += 1
            with lock:
                answered["n"] += 1
                if answered["n"] == max(curves // 2, 1):
                    half.append(server.rss_mb())

        lock = threading.Lock()

        t0 = time.monotonic()
        workers = [threading.Thread(target=lambda k=k: [one(i) for i in range(k, curves, 4)])
                   for k in range(4)]  # fmt: skip
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        curves_s = time.monotonic() - t0
    return {
        "codes": dict(codes),
        "replan_s": replan_s,
        "curves": curves,
        "curves_s": curves_s,
        "rss_before_mb": before,
        "processes_before_mb": each_before,
        "replan_peak_mb": replan_peak,
        "peak_mb": peak.peak,
        "processes_at_peak_mb": peak.at_peak,
        "rss_after_mb": tree_rss_mb(server.proc.pid),
        "server_rss_half_mb": half[0] if half else None,
        "server_rss_end_mb": server.rss_mb(),
    }


def residual_cpu(server: Server, seconds: float = 10.0) -> dict[str, Any]:
    """The tree's CPU time over `seconds` right after the last call (share of one core)."""
    start = tree_cpu_s(server.proc.pid)
    time.sleep(seconds)
    used = tree_cpu_s(server.proc.pid) - start
    return {"seconds": seconds, "cpu_s": used, "share": used / seconds}


def sigterm_phase(server: Server, token: str, observations: int) -> dict[str, Any]:
    """A query of `observations` observations in flight (60 s deadline), then SIGTERM: how long
    the server takes to exit, and its exit code."""
    from meshplan.client import PlannerClient, PlannerError

    req = observed_curve(observations, seed=7)
    outcome: list[str] = []

    def call() -> None:
        with PlannerClient(server.target, token=token) as c:
            try:
                c.scaling_curve(req, timeout=60)
                outcome.append("OK")
            except PlannerError as err:
                outcome.append(err.code.name)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    time.sleep(1.0)  # parsed and fitting
    t0 = time.monotonic()
    code = server.stop()
    exit_s = time.monotonic() - t0
    caller.join(10)
    return {"observations": observations, "exit_s": exit_s, "exit_code": code, "call": outcome}
