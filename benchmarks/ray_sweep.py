"""Plans on a local Ray cluster: the throughput benchmark's Ray path, and a 100,000-plan sweep on
Ray killed and resumed once midway.

`run_ray_pool` (used by `python -m benchmarks throughput --distinct`): the requests through the
warm worker actors of tools/sweep/ray_paths.py on a local cluster of `workers` CPUs. Ray's
start-up (ray.init) and the actors' (spawn, imports, one warm-up plan each) are timed apart,
before the clock starts, as the process pool's spawn and warm-up are.

    python -m benchmarks ray_sweep [-n 100000] [--kill-at 0.5] [--workers 2] [--dir DIR]

runs `meshplan sweep --ray` in a child process on a grid of at least `n` distinct cells
(`big_grid`: scaled family models x 6 catalog GPUs x 2 precisions x 7 sequence lengths x 15
GPU counts), SIGKILLs it once `kill-at` of the cells are written, runs the same command again
(it resumes), and checks the JSON lines hold each cell's key exactly once, every cell present.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import arg_parser, fmt_s, header, write_json

# The grid of the 100,000-plan sweep: 15 counts (8 ... 131,072) x 7 sequence lengths (1K ...
# 64K) x 2 precisions x the 6 catalog GPUs with FP8 (an A100 cell at FP8 is an ERROR row) =
# 1,260 cells per model, and enough family-shaped models (tools/sweep/grid.py's scaled_model)
# for 100,000 cells: 80 of them, 100,800 cells.
BIG_MODELS = (
    "llama3:1b..405b:x1.2,llama2:1b..70b:x1.2,mixtral:8b..141b:x1.3,qwen3:20b..235b:x1.5,"
    "deepseek:30b..671b:x1.6"
)
BIG_GPUS = "b200-192gb,h100-sxm-80gb,h100-sxm-96gb,h200-141gb,h800-sxm-80gb,mi300x-192gb"
BIG_COUNTS = "8..131072"
BIG_SEQ = "1024,2048,4096,8192,16384,32768,65536"
BIG_PRECISIONS = "BF16,FP8"
DEFAULT_N = 100_000
TARGET_RAY_SLOWER = 0.15  # the distinct mix on Ray: at most 15% slower than the process pool


def run_ray_pool(reqs: list[Any], workers: int, progress: bool = False) -> Any:
    """The requests on `workers` warm Ray actors of a new local cluster of `workers` CPUs; a
    throughput.PathResult whose `startup_s` is ray.init and `actors_s` the actors' start."""
    from benchmarks.throughput_paths import collect
    from meshplan.tools.sweep.ray_paths import RayBackend

    t0 = time.perf_counter()
    with RayBackend(workers=workers, cpus=workers, warm=True) as ray:
        started = time.perf_counter()
        ray.workers.pids()  # every actor spawned, imported and warm
        ready = time.perf_counter()
        cpu0 = time.process_time()
        answers = (
            item.result if item.result is not None else item.error for item in ray.batch(reqs)
        )
        res = collect(f"Ray x{workers}", reqs, answers, time.perf_counter(), progress)
        res.main_cpu_s = time.process_time() - cpu0
        res.startup_s, res.actors_s = started - t0, ready - started
        res.seconds = time.perf_counter() - ready  # the clock starts once the actors are warm
        return res


def ray_over_pool(results: list[Any]) -> float | None:
    """Ray's time per plan over the process pool's (None unless both ran)."""
    by = {r.path.split(" x")[0]: r for r in results if not r.processes}
    ray, pool = by.get("Ray"), by.get("process pool")
    return pool.plans_per_s / ray.plans_per_s if ray and pool else None


def ray_lines(rep: Any) -> list[str]:
    """The throughput report's lines on Ray: its start-up, apart, and the target."""
    out = [
        f"{r.path}: start-up, not in the wall: ray.init {fmt_s(r.startup_s)}, {rep.workers} "
        f"actors spawned, imported and warm {fmt_s(r.actors_s)}"
        for r in rep.results
        if r.startup_s
    ]
    ratio = ray_over_pool(rep.results)
    if ratio is not None:
        v = "met" if ratio <= 1 + TARGET_RAY_SLOWER else "MISSED"
        out.append(
            f"Ray's time per plan over the process pool's: {ratio:.3f}x: {v} (at most "
            f"{1 + TARGET_RAY_SLOWER:.2f}x)"
        )
    return out


def big_grid(n: int = DEFAULT_N) -> list[str]:
    """The sweep's flags: BIG_* trimmed to the fewest models that give at least `n` cells."""
    from meshplan.tools.sweep.grid import expand_models, parse_gpus

    per_model = len(parse_gpus(BIG_COUNTS)) * len(BIG_SEQ.split(",")) * 2 * len(BIG_GPUS.split(","))
    items = [m for m in expand_models(BIG_MODELS) if m.error is None]
    need = -(-n // per_model)
    if need > len(items):
        raise ValueError(f"the grid holds {len(items) * per_model} cells, fewer than {n}")
    labels = ",".join(m.label for m in items[:need])
    return ["--models", labels, "--gpu", BIG_GPUS, "--gpus", BIG_COUNTS, "--seq-len", BIG_SEQ,
            "--precision", BIG_PRECISIONS]  # fmt: skip


@dataclass
class SweepRun:
    """What the killed-and-resumed sweep did."""

    cells: int
    killed_at_rows: int
    first_s: float
    second_s: float
    rows: int
    distinct_keys: int
    statuses: dict[str, int] = field(default_factory=dict)
    second_said: str = ""

    @property
    def exact(self) -> bool:
        return self.rows == self.distinct_keys == self.cells


def _rows(path: Path) -> list[str]:
    """Keys of the whole lines written (a line cut by the kill is not a row)."""
    keys = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                keys.append(json.loads(line)["key"])
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
    return keys


def _count_lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def killed_and_resumed(
    n: int, kill_at: float, workers: int, folder: Path, time_limit_s: float | None = None
) -> SweepRun:
    """The sweep of `big_grid(n)` on Ray in a child process, SIGKILLed once `kill_at` of its
    cells are written, then run again to the end."""
    from meshplan.tools.sweep.grid import expand_models, parse_gpus, parse_ints
    from meshplan.tools.sweep.solve import build_jobs

    flags = big_grid(n)
    a = dict(zip(flags[::2], flags[1::2], strict=True))
    jobs = build_jobs(
        expand_models(a["--models"]),
        parse_gpus(a["--gpus"]),
        seq_lens=parse_ints(a["--seq-len"], "--seq-len"),
        gpu_types=a["--gpu"].split(","),
        precisions=a["--precision"].split(","),
    )
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "sweep.jsonl"
    out.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "meshplan", "sweep", "--ray", "--jobs", str(workers), *flags]
    argv += ["--jsonl", str(out), "--no-progress"]
    if time_limit_s:
        argv += ["--time-limit", str(time_limit_s)]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a new local cluster
    t0 = time.perf_counter()
    child = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    target = int(len(jobs) * kill_at)
    while child.poll() is None and _count_lines(out) < target:
        time.sleep(1.0)
    killed_at = _count_lines(out)
    if child.poll() is None:
        child.send_signal(signal.SIGKILL)
    child.wait()
    first = time.perf_counter() - t0
    time.sleep(5)  # the killed driver's local cluster ends with it (Ray's fate sharing)
    t1 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    second = time.perf_counter() - t1
    keys = _rows(out)
    statuses = Counter(json.loads(x)["status"] for x in out.read_text().splitlines() if x)
    said = [line for line in done.stderr.splitlines() if line.startswith("meshplan sweep:")]
    return SweepRun(
        len(jobs), killed_at, first, second, len(keys), len(set(keys)), dict(statuses),
        said[-1] if said else done.stderr[-400:],
    )  # fmt: skip


def render(run: SweepRun) -> str:
    ok = "met" if run.exact else "MISSED"
    return "\n".join(
        [
            f"cells in the grid: {run.cells:,}",
            f"first run: SIGKILLed after {run.killed_at_rows:,} rows, at {fmt_s(run.first_s)}",
            f"second run (resumed): {fmt_s(run.second_s)}: {run.second_said}",
            f"rows written: {run.rows:,}; distinct keys: {run.distinct_keys:,}: each cell "
            f"exactly once: {ok}",
            "statuses: " + ", ".join(f"{k} {v:,}" for k, v in sorted(run.statuses.items())),
            f"summary: {run.cells:,}-plan sweep on a local Ray cluster, killed at "
            f"{run.killed_at_rows:,} and resumed: {run.rows:,} rows, {run.distinct_keys:,} "
            f"distinct, in {fmt_s(run.first_s + run.second_s)} ({ok})",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = arg_parser("ray_sweep", __doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, default=DEFAULT_N, help=f"cells at least (default {DEFAULT_N})")
    p.add_argument("--kill-at", type=float, default=0.5, help="fraction written at the kill")
    p.add_argument("--workers", type=int, default=2, help="CPUs of the local cluster")
    p.add_argument("--dir", default="/tmp/meshplan-ray-sweep", help="where the files go")
    a = p.parse_args(argv)
    n = 2000 if a.quick else a.n
    print(header("ray_sweep", quick=a.quick, plans=n, workers=a.workers), flush=True)
    run = killed_and_resumed(n, a.kill_at, a.workers, Path(a.dir), a.time_limit)
    print(render(run))
    write_json(a.json, {"benchmark": "ray_sweep", "report": asdict(run)})
    return 0 if run.exact else 1
