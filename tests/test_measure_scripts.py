"""The measuring scripts run from a checkout: the gRPC floor times both bare servers around a
solve, and the instruction-count driver plans the sweep's first requests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_grpc_floor_times_both_servers() -> None:
    lines = _run("scripts/grpc_floor.py", "--calls", "5").splitlines()
    rows = [line.split() for line in lines[1:]]
    assert [(r[0], r[2]) for r in rows] == [
        ("0", "0"),
        ("5", "0"),
        ("0", "5"),
        ("5", "5"),
        ("0", "20"),
    ]
    for r in rows:  # "B ms S ms aio ms sync ms": both added times positive and under a second
        aio, sync = float(r[4]), float(r[6])
        assert 0 < aio < 1000 and 0 < sync < 1000


def test_plan_instructions_plans_the_first_requests() -> None:
    out = _run("scripts/plan_instructions.py", "2")
    assert out.strip() == "planned 2: {'OPTIMAL': 2}"
