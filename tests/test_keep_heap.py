"""A solver process keeps the heap it freed for the next solve (server/memory.py
keep_freed_heap): arrays freed after one solve are reused by the next instead of being handed
back to the system and faulted in again, page by page."""

from __future__ import annotations

import asyncio
import resource
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from meshplan.server.memory import trimmer
from meshplan.server.pool import ProcessRunner

# In a fresh process, with glibc's defaults or with keep_freed_heap: `churn` below.
_PROBE = """
import sys
sys.path.insert(0, sys.argv[2])
from meshplan.server.memory import keep_freed_heap
from test_keep_heap import churn

if sys.argv[1] == "keep":
    assert keep_freed_heap()
print(churn(20, stop=None))
"""


def _faults(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode, str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(trimmer() is None, reason="glibc's malloc only")
def test_freed_arrays_are_reused_not_faulted_in_again() -> None:
    default, kept = _faults("default"), _faults("keep")
    # glibc's defaults return the 40 MiB after each solve: ~10,000 faults a solve
    assert default > 20 * 40 * 256 // 2
    assert kept < default // 100


def churn(solves: int, *, stop: threading.Event | None) -> int:
    """The page faults of `solves` "solves" after a first one, each writing 40 arrays of 1 MiB
    and freeing them all (in a solver process, or the probe's)."""
    import numpy as np

    def solve() -> None:
        arrays = [np.ones(1 << 17) for _ in range(40)]
        del arrays

    solve()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(solves):
        solve()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@pytest.mark.skipif(trimmer() is None, reason="glibc's malloc only")
def test_solver_processes_keep_their_heap() -> None:
    pool = ProcessRunner(1, warm=False)
    try:
        assert pool.wait_ready(120) == 1

        async def go() -> int:
            return await pool.start(churn, 20, stop=threading.Event())

        assert asyncio.run(go()) < 20 * 40 * 256 // 200
    finally:
        pool.close()
        pool.join()
