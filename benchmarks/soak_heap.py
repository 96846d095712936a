"""The server process's garbage collections against its event loop, with the curve cache full.

A scheduler query's thread stores its curve in the server's curve cache and then calls
`settle_heap` (server/scheduler.py). Once the frozen heap has doubled, settle_heap ran a full
collection there: it unfreezes the whole heap (the start-up modules with the cached curves)
and holds the GIL over it, so the event loop waited it out. This benchmark replays that in one
process per mode: the server's modules imported and frozen as at start-up, then `--queries`
queries on a thread, each making a curve of `--cells` cells and keeping it (the heap the server
process's caches hold: the curve cache, and the solver's caches that the fits of small queries
fill there, ~6 tracked objects a cell), then settling; an asyncio loop meanwhile
sleeps 5 ms at a time and records how late it wakes (its lag). Modes:

- inline: the full pass in settle_heap, on the query thread (the code before deferral);
- deferred: settle_heap collects the young generations and freezes (`defer_full_passes`, as
  `serve` sets); the count and the full pass wait for `collect_when_idle`, which runs them on
  the loop once no call is in progress (here: after the last query, timed alone).

    python -m benchmarks.soak_heap [--queries N] [--cells N]

Prints, per mode: the longest settle_heap call, the loop's lag while queries ran (p99, max), and
the deferred full pass's length when it ran idle.
"""

from __future__ import annotations

import json
import subprocess
import sys

from benchmarks.common import arg_parser, header, table

_PROBE = r"""
import asyncio, gc, json, sys, threading, time
from meshplan.server import app, memory  # the server's modules, as at start-up
from meshplan.solver.scheduler.answers import Cell, CurveResult
from meshplan.solver.schema import ParallelConfig

mode, queries, cells = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
memory.freeze_startup_heap()
memory.defer_full_passes(mode == "deferred")
memory._settled["check_at"] = memory._SETTLE_CHECK = 1  # the frozen count looked at
memory._SETTLE_SPREAD = 10**9  # after every call
cache = {}

def curve(q):
    cs = [
        Cell(cluster=f"c{q}", num_gpus=8 * (j + 1), status="PLANNED", step_time_s=1.0 + j,
             config=ParallelConfig(tp=2, pp=1, dp=j + 1, micro_batch_size=1, num_microbatches=4))
        for j in range(cells)
    ]
    return CurveResult(cache_key=str(q), cost_model_version="v", knee_gain=0.1, cells=cs,
                       clusters=[], band_source="b")

settles, lags, done = [], [], threading.Event()

def queries_thread():
    for q in range(queries):
        cache[str(q)] = curve(q)
        t = time.perf_counter()
        memory.settle_heap()
        settles.append(time.perf_counter() - t)
    done.set()

async def main():
    loop = asyncio.get_running_loop()
    threading.Thread(target=queries_thread, daemon=True).start()
    while not done.is_set():
        due = loop.time() + 0.005
        await asyncio.sleep(0.005)
        lags.append(max(loop.time() - due, 0.0))
    idle_pass = None
    if mode == "deferred":  # what collect_when_idle runs once no call is in progress
        t = time.perf_counter()
        if memory.settle_when_idle():
            idle_pass = time.perf_counter() - t
    lags.sort()
    print(json.dumps({
        "max_settle_s": max(settles), "lag_p99_s": lags[int(0.99 * (len(lags) - 1))],
        "lag_max_s": lags[-1], "idle_pass_s": idle_pass, "frozen": gc.get_freeze_count(),
        "cached": len(cache),
    }))

asyncio.run(main())
"""


def run_mode(mode: str, queries: int, cells: int) -> dict[str, float]:
    """One mode in a fresh process: its figures (seconds)."""
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode, str(queries), str(cells)],
        capture_output=True,
        text=True,
        timeout=1200,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = arg_parser("soak_heap", __doc__.splitlines()[0])
    p.add_argument("--queries", type=int, default=60, help="curves stored, one per query")
    p.add_argument("--cells", type=int, default=2048, help="cells per curve")
    args = p.parse_args(argv)
    queries = 12 if args.quick else args.queries
    print(header("server heap settling", queries=queries, cells=args.cells))
    rows = []
    for mode in ("inline", "deferred"):
        got = run_mode(mode, queries, args.cells)
        idle = got["idle_pass_s"]
        rows.append(
            [
                mode,
                f"{got['max_settle_s'] * 1e3:.1f}",
                f"{got['lag_p99_s'] * 1e3:.1f}",
                f"{got['lag_max_s'] * 1e3:.1f}",
                "-" if idle is None else f"{idle * 1e3:.0f}",
                got["cached"],
            ]
        )
    headers = [
        "mode",
        "longest settle (ms)",
        "loop lag p99 (ms)",
        "loop lag max (ms)",
        "idle full pass (ms)",
        "curves cached",
    ]
    print(table(headers, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
