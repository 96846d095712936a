"""The scheduler benchmark's CPU accounting: a child process's CPU time is counted."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from benchmarks.scheduler import Report, _children, _cold_line, _cpu_s


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads Linux /proc")
def test_a_busy_child_process_is_found_and_its_cpu_time_counted() -> None:
    spin = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"
    child = subprocess.Popen([sys.executable, "-c", spin + "input()"], stdin=subprocess.PIPE)
    try:
        assert child.pid in _children()
        used = 0.0
        for _ in range(100):  # until it has spun (a loaded machine may take a while)
            used = _cpu_s([child.pid])
            if used >= 0.25:
                break
            time.sleep(0.1)
        assert used >= 0.25, used
    finally:
        child.communicate(b"\n", timeout=30)
    assert _cpu_s([child.pid]) == 0.0  # gone: counts nothing


def test_each_cold_run_is_reported_with_its_cpu_time() -> None:
    rep = Report(quick=True, processes=2)
    rep.add_cold(3.0, 0.2, 3.0)
    rep.add_cold(2.0, 0.1, 2.8)
    rep.add_cold(5.0, 0.3, 3.4)
    assert rep.cold_curve_s == 3.0  # the median
    line = _cold_line(rep)
    assert line.startswith("cold curves (3, the median judged): 3 s wall, 3.2 s CPU"), line
    assert "solver processes 1.4 s per process" in line
