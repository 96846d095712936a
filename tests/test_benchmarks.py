"""Smoke test of the benchmarks (issue 4): each `--quick` mode runs through its main() and
reports sane numbers (positive times, p50 <= p99 <= max, ratios computed, counts right). Speed
is not asserted here; benchmarks/RESULTS.md compares the figures with the targets."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from benchmarks import latency, scaling, soak, suite, throughput
from benchmarks.__main__ import load
from benchmarks.__main__ import main as dispatch
from benchmarks.common import Summary, percentile, table
from benchmarks.soak_fuzz import EDGE_KINDS
from meshplan.solver.catalog import get_model


def _run(module: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    out = tmp_path / "out.json"
    assert module.main(["--quick", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    last = printed.strip().splitlines()[-1]
    assert last.startswith("summary: "), printed
    return json.loads(out.read_text())["report"]


def _ordered(s: dict) -> None:
    assert 0 < s["p50"] <= s["p99"] <= s["max"], s


def test_percentiles_and_table() -> None:
    xs = [4.0, 1.0, 3.0, 2.0]
    assert percentile(xs, 0) == 1.0 and percentile(xs, 100) == 4.0
    assert percentile(xs, 50) == 2.5
    s = Summary.of(xs)
    assert (s.n, s.p50, s.max) == (4, 2.5, 4.0) and s.p50 <= s.p99 <= s.max
    text = table(["name", "t"], [["a", "1.5 ms"], ["bb", "12 ms"]])
    assert text.splitlines()[2] == "a     1.5 ms"  # numbers right-aligned


def test_suite_is_fixed_and_covers_the_issue() -> None:
    names = [i.name for i in suite.LATENCY_SUITE]
    assert len(set(names)) == len(names)
    assert len(suite.CATALOG_CASES) >= 50
    counts = {i.num_gpus for i in suite.CATALOG_CASES}
    assert min(counts) == 8 and max(counts) == 131_072
    moe = [i for i in suite.CATALOG_CASES if get_model(i.model).moe is not None]
    assert moe and len(moe) < len(suite.CATALOG_CASES)
    pinned = {k for i in suite.CATALOG_CASES for k in i.search}
    assert {"tp", "pp", "zero_stage", "recompute"} <= pinned
    for inst in suite.LATENCY_SUITE:
        assert inst.request(time_limit_s=1).cluster.num_gpus == inst.num_gpus
    sweep = suite.throughput_requests(1000)
    assert len({r.model_dump_json() for r in sweep}) == 1000


def test_latency_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rep = _run(latency, tmp_path, capsys)
    rows = rep["rows"]
    assert [r["name"] for r in rows] == suite.QUICK_LATENCY
    for s in ("inproc", "grpc"):
        _ordered(rep[s])
        assert rep[s]["n"] == len(rows)
    assert rep["grpc_overhead"]["p50"] <= rep["grpc_overhead"]["max"]
    for r in rows:
        assert r["status"] in ("OPTIMAL", "FEASIBLE", "INFEASIBLE"), r
        assert all(t > 0 for t in r["inproc_s"] + r["grpc_s"]), r
        assert r["grpc_status"] == r["status"]
        o = r["oracle"]  # every quick instance is small enough for the oracle
        assert o is not None and o["seconds"] > 0
        assert r["ratio"] == pytest.approx(o["seconds"] / min(r["inproc_s"]))
        if r["proven"] and not o["capped"] and not rep["source_warning"]:
            assert r["oracle_agrees"] is True, r  # the same optimum (or both infeasible)
    assert any(r["status"] == "INFEASIBLE" for r in rows)


def test_throughput_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rep = _run(throughput, tmp_path, capsys)
    paths = [r["path"] for r in rep["results"]]
    assert paths == [f"PlanBatch (gRPC) x{p}" for p in throughput.DEFAULT_PROCESSES]
    assert [r["processes"] for r in rep["results"]] == list(throughput.DEFAULT_PROCESSES)
    for r in rep["results"]:
        assert r["requests"] == r["answered"] == throughput.QUICK_N
        assert sum(r["statuses"].values()) == throughput.QUICK_N
        assert r["seconds"] > 0 and all(t > 0 for t in r["plan_wall_s"])
        # the solver processes' CPU is measured (Linux /proc) and covers the batch's plans
        assert r["worker_cpu_s"] is None or r["worker_cpu_s"] > 0
    # the same requests give the same answers on 1 and on 2 processes
    assert rep["results"][0]["statuses"] == rep["results"][1]["statuses"]


def test_speedup_ceiling_is_the_cores_over_the_cpu_a_plan() -> None:
    """1 process: 100 plans/s; 2: 10 ms of worker and 2 ms of main CPU a plan. On 2 cores at
    most 2 / 12 ms = 166.7 plans/s, 1.67x; on 4, the 2 workers alone: 2 / 10 ms, 2x (and None
    without the workers' CPU)."""
    one = throughput.PathResult("x1", 100, 100, 1.0, {}, processes=1, main_cpu_s=0.1)
    two = throughput.PathResult("x2", 100, 100, 0.7, {}, processes=2, main_cpu_s=0.2)
    two.worker_cpu_s = 1.0
    rep = throughput.Report([one, two], [1, 2], 0, 10.0, True)
    assert throughput.speedup_ceiling(rep, 2) == pytest.approx(2 / 0.012 / 100)
    assert throughput.speedup_ceiling(rep, 4) == pytest.approx(2 / 0.010 / 100)
    two.worker_cpu_s = None
    assert throughput.speedup_ceiling(rep, 2) is None


def test_scaling_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rep = _run(scaling, tmp_path, capsys)
    assert [p["num_gpus"] for p in rep["by_gpus"]] == suite.SCALING_QUICK_COUNTS
    assert [p["label"] for p in rep["by_space"]] == [label for label, _ in suite.SCALING_SPACE]
    for p in rep["by_gpus"] + rep["by_space"]:
        assert p["seconds"] > 0 and p["num_layouts"] >= 1, p
        # no CP-SAT model (0 variables) only where the bounds and exact scores proved the plan
        assert p["num_variables"] > 0 or p["status"] == "OPTIMAL", p
        assert p["status"] in ("OPTIMAL", "FEASIBLE"), p
    points = [p["points"] for p in rep["by_space"]]
    assert points[0] == 1  # every axis pinned: one configuration
    assert points == sorted(points)  # freeing axes never shrinks the space
    assert rep["by_space"][-1]["num_gpus"] == suite.SCALING_SPACE_QUICK_GPUS


def test_scheduler_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import scheduler

    rep = _run(scheduler, tmp_path, capsys)
    assert rep["cells"] == 8 and 1 <= rep["planned"] <= 8
    assert rep["cold_curve_s"] > 0 and rep["replan_s"] > 0 and rep["precompute_s"] > 0
    for s in ("cached_grpc", "cached_inproc"):
        _ordered(rep[s])
    # a cache hit is a lookup: far faster than computing the curve it returns
    assert rep["cached_grpc"]["p50"] < rep["cold_curve_s"] / 10
    assert rep["precompute_rows"] == 3


def test_dispatch(capsys: pytest.CaptureFixture[str]) -> None:
    assert dispatch([]) == 2
    assert dispatch(["no-such-benchmark"]) == 2
    assert "unknown benchmark" in capsys.readouterr().err
    assert load("not_written_yet") is None
    assert "does not exist yet" in capsys.readouterr().err
    if importlib.util.find_spec("benchmarks.fidelity") is None:
        assert dispatch(["fidelity"]) == 1
        assert "does not exist yet" in capsys.readouterr().err


def test_startup_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The start-up benchmark times each command as a new process and names the heavy modules
    it loaded: --help, --version and catalog none of them, the README's first plan neither
    OR-Tools nor pandas (it needs no CP-SAT model); speed is not asserted."""
    from benchmarks import startup

    rep = _run(startup, tmp_path, capsys)
    assert rep["target_s"] == startup.TARGET_S
    cmds = rep["commands"]
    assert [c["command"] for c in cmds] == [
        "meshplan --help",
        "meshplan --version",
        "meshplan catalog",
        "meshplan " + " ".join(startup.FIRST_PLAN),
    ]
    for c in cmds:
        assert len(c["runs"]) == 3 and 0 < c["best"] <= c["median"] <= max(c["runs"]), c
        assert c["exit_status"] == 0 and c["heavy_imports"] == [], c


def test_soak_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rep = _run(soak, tmp_path, capsys)
    load, fuzz = rep["load"], rep["fuzz"]
    assert load["clients"] == soak.QUICK["clients"] and load["seconds"] >= soak.QUICK["seconds"]
    assert sum(load["codes"].values()) > 0 and load["codes"].get("OK", 0) > 0
    allowed = {"OK", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED"}  # the service's contract
    assert set(load["codes"]) | set(load["polite"]) <= allowed
    assert set(load["made_up"]) <= {"UNAUTHENTICATED"}
    _ordered(load["health"])
    _ordered(load["health_port"])
    assert load["health_failures"] == load["health_port_failures"] == 0
    assert 0 < load["rss_before_mb"] <= load["rss_peak_mb"] < rep["limit_mb"]
    assert fuzz["calls"] == soak.QUICK["fuzz"] == sum(fuzz["codes"].values())
    assert sum(fuzz["kinds"].values()) == fuzz["calls"] and len(fuzz["kinds"]) >= 8
    drawn = {"generated", "extreme", "evaluate", "batch", "scheduler", "observations", "garbage"}
    assert drawn < set(fuzz["kinds"]) <= drawn | set(EDGE_KINDS)
    assert fuzz["internal"] == fuzz["internal_items"] == fuzz["internal_log_lines"] == 0
    assert 0 < fuzz["logged"] <= fuzz["calls"] and fuzz["late_count"] == len(fuzz["late"])
    assert 0 <= rep["residual_cpu"]["share"] < 1
    assert rep["memory"]["peak_mb"] < rep["limit_mb"]
    assert rep["sigterm"]["exit_code"] == 0 and rep["sigterm"]["exit_s"] < soak.GRACE_S
