"""The distinct mix's benchmark (benchmarks/distinct.py): `latency --distinct N` plans the mix's
first N requests, none twice, and names the slowest shapes; `scaling` names them too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import distinct, latency, scaling
from benchmarks.common import Summary
from benchmarks.suite import distinct_requests


def test_latency_distinct(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.json"
    assert latency.main(["--distinct", "5", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.strip().splitlines()[-1].startswith("summary: distinct mix of 5 requests")
    assert "slowest shapes" in printed
    rep = json.loads(out.read_text())["report"]
    shapes = rep["shapes"]
    want = distinct_requests(5)
    assert [(s["model"], s["gpu"], s["num_gpus"], s["seq_len"]) for s in shapes] == [
        (r.model.preset, r.cluster.gpu, r.cluster.num_gpus, r.training.seq_len) for r in want
    ]
    assert all(s["proven"] and s["seconds"] > 0 for s in shapes), shapes
    slow = [s["seconds"] for s in rep["slowest"]]
    assert slow == sorted(slow, reverse=True) and slow[0] == max(s["seconds"] for s in shapes)
    assert 0 < rep["all"]["p50"] <= rep["all"]["p99"] <= rep["all"]["max"]
    # CPU time per plan: measured per shape, within the plan's wall time (one CP-SAT worker)
    assert all(0 < s["cpu_s"] <= s["seconds"] + 0.01 for s in shapes), shapes
    assert rep["cpu"]["n"] == 5 and 0 < rep["cpu"]["p50"] <= rep["cpu"]["max"]
    assert "CPU    p50" in printed and "; CPU p50 " in printed


def test_scaling_names_the_slowest_shape() -> None:
    fast = distinct.Shape("llama3-8b", "h100-sxm-80gb", 8, 4096, False, "OPTIMAL", "OPTIMAL",
                          True, 0.002, 20)  # fmt: skip
    slow = distinct.Shape("deepseek-v3", "b200-192gb", 16384, 32768, True, "OPTIMAL", "OPTIMAL",
                          True, 0.040, 300)  # fmt: skip
    d = distinct.Report([fast, slow], Summary.of([0.002, 0.04]), None, None, 10.0, 0.05, [slow])
    pt = scaling.Point("8 GPUs", 8, "all", "OPTIMAL", 0.01, 0, 0, 10, 100)
    rep = scaling.Report("llama3-70b", [pt], [pt], 8, 10.0, True, distinct=d)
    line = scaling.summary_line(rep)
    assert "slowest deepseek-v3 on 16,384 b200-192gb at 32K 40 ms" in line, line
    assert "deepseek-v3" in scaling.render(rep)
