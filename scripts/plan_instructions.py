"""Plan the first N requests of the throughput sweep in one process, as a solver process does
(the heap settled after each plan), for counting the solver's instructions under valgrind,
which the host's load does not change (this VM's speed drifts; wall and CPU times with it).

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.N .venv/bin/python \\
        scripts/plan_instructions.py N

Run with N and with 0 (start-up and the warm-up plan alone) and divide the difference of the
"I refs" lines by N. The sweep's order puts all ten models of the first GPU types first. Fix
PYTHONHASHSEED: with Python's random string hashing the same tree's count moves by a few percent
from run to run (49.2 and 52.9 M a plan seen), more than most changes being measured.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/ from a checkout

from benchmarks.suite import throughput_requests  # noqa: E402
from meshplan.server.memory import settle_heap  # noqa: E402
from meshplan.solver import cache, plan  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("n", type=int, help="requests to plan (0: start-up and warm-up only)")
    args = parser.parse_args(argv)
    if os.environ.get("PYTHONHASHSEED") is None:
        print("note: PYTHONHASHSEED is not set: counts vary by a few percent", file=sys.stderr)
    reqs = throughput_requests(1000, time_limit_s=10)[: args.n]
    plan(throughput_requests(1, quick=True)[0])  # lazy imports and first tables: the baseline
    gc.collect()
    gc.freeze()
    cache.clear()
    statuses: dict[str, int] = {}
    for req in reqs:
        st = plan(req).status.value
        statuses[st] = statuses.get(st, 0) + 1
        settle_heap()
    print(f"planned {args.n}: {statuses}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
