"""A solver process keeps the heap it freed for the next solve (server/memory.py
keep_freed_heap): arrays freed after one solve are reused by the next instead of being handed
back to the system and faulted in again, page by page."""

from __future__ import annotations

import asyncio
import resource
import subprocess
import sys
import threading

import pytest

from meshplan.server.memory import trimmer
from meshplan.server.pool import ProcessRunner

# A "solve" writes 40 arrays of 1 MiB and frees them all; the page faults of 20 more solves.
_PROBE = """
import resource, sys
import numpy as np
from meshplan.server.memory import keep_freed_heap

if sys.argv[1] == "keep":
    assert keep_freed_heap()

def solve():
    arrays = [np.ones(1 << 17) for _ in range(40)]
    del arrays

solve()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    solve()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(trimmer() is None, reason="glibc's malloc only")
def test_freed_arrays_are_reused_not_faulted_in_again() -> None:
    default, kept = _faults("default"), _faults("keep")
    # glibc's defaults return the 40 MiB after each solve: ~10,000 faults a solve
    assert default > 20 * 40 * 256 // 2
    assert kept < default // 100


def churn(solves: int, *, stop: threading.Event) -> int:
    """In a solver process: the page faults of `solves` solves after a first one."""
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
