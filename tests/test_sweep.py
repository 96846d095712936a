"""`meshplan sweep`: grid specs, CSV + JSON lines, resume, error rows, and the --server path."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from test_grpc_support import LOOPBACK, running_server

from meshplan.tools.cli.main import main
from meshplan.tools.sweep.files import SweepFiles, run_sweep
from meshplan.tools.sweep.grid import ModelItem, expand_models, parse_gpus
from meshplan.tools.sweep.solve import Job, Outcome, build_jobs, job_key

# Small, fast cells: a fixed global batch keeps each solve well under two seconds.
# The textbook's bill (16 bytes per parameter, ZeRO-3 with any pipeline): 70B fits on 16 GPUs.
# Under Megatron's recipe (fp32 main gradients, no ZeRO-3 with pipelining) it needs 24
# (tests/test_profiles.py::test_ladder_under_the_default_profile).
KNOBS = ["--seq-len", "2048", "--global-batch-tokens", "131072", "--time-limit", "30"]
KNOBS += ["--framework", "GENERIC"]


def _rows(prefix: Path) -> tuple[list[dict], list[dict]]:
    with open(f"{prefix}.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    lines = [json.loads(x) for x in Path(f"{prefix}.jsonl").read_text().splitlines()]
    return rows, lines


def test_grid_specs() -> None:
    assert parse_gpus("8..64") == [8, 16, 32, 64]
    assert parse_gpus("24..100,8,8") == [8, 24, 48, 96]
    with pytest.raises(ValueError, match="--gpus"):
        parse_gpus("8..x")
    assert [m.label for m in expand_models("llama2:7b..13b")] == ["llama2-7b", "llama2-13b"]
    scaled = expand_models("llama3:1b..4b:x2")
    assert [m.label for m in scaled] == ["llama3:1b", "llama3:2b", "llama3:4b"]
    for m, target in zip(scaled, (1e9, 2e9, 4e9), strict=True):
        assert m.error is None and abs(m.params / target - 1) < 0.1
        assert m.spec is not None and m.spec["num_kv_heads"] == 8  # llama3's GQA kept
    bad = expand_models("nope,llama3:1b..2b,foo:3b")
    assert [m.error is not None for m in bad] == [True, True, True]
    assert "unknown model 'nope'" in (bad[0].error or "")


def test_key_ignores_options_and_spelled_out_defaults() -> None:
    m = ModelItem("llama3-8b", {"preset": "llama3-8b"})
    a = build_jobs([m], [8], base={"options": {"time_limit_s": 5}})[0]
    b = build_jobs([m], [8], seq_lens=[8192], base={"training": {"precision": "BF16"}})[0]
    c = build_jobs([m], [8], seq_lens=[4096])[0]
    assert a.key == b.key != c.key
    assert job_key("llama3-70b", a.request) != a.key


def test_sweep_writes_csv_and_jsonl_then_resumes(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "run"
    argv = ["sweep", "--models", "llama2-7b,llama2-70b,nope", "--gpus", "8,16", *KNOBS]
    rc = main([*argv, "--jobs", "2", "--out", str(out), "--no-progress"])
    assert rc == 1  # an ERROR row is in the output
    assert "6 cells: 0 already written, 6 run" in capsys.readouterr().err
    rows, lines = _rows(out)
    assert len(rows) == len(lines) == 6
    assert {r["key"] for r in rows} == {x["key"] for x in lines}
    cell = {(r["model"], int(r["num_gpus"])): r for r in rows}
    assert set(cell) == {(m, n) for m in ("llama2-7b", "llama2-70b", "nope") for n in (8, 16)}
    for n in (8, 16):
        ok = cell["llama2-7b", n]
        assert ok["status"] in ("OPTIMAL", "FEASIBLE") and float(ok["tokens_per_s"]) > 0
        assert int(ok["tp"]) * int(ok["pp"]) * int(ok["dp"]) * int(ok["cp"]) == n
        bad = cell["nope", n]
        assert bad["status"] == "ERROR" and "unknown model 'nope'" in bad["error"]
    infeasible = cell["llama2-70b", 8]
    assert infeasible["status"] == "INFEASIBLE" and int(infeasible["min_gpus"]) == 16
    assert "GiB" in infeasible["reason"]
    assert cell["llama2-70b", 16]["status"] in ("OPTIMAL", "FEASIBLE")
    full = next(x for x in lines if x["model"] == "llama2-7b")
    assert full["result"]["memory"]["total"] == int(
        cell["llama2-7b", full["num_gpus"]]["memory_total_bytes"]
    )

    # the rerun solves nothing: every key is written
    jobs = build_jobs(
        expand_models("llama2-7b,llama2-70b,nope"),
        [8, 16],
        seq_lens=[2048],
        base={
            "training": {"global_batch_tokens": 131072, "framework": "GENERIC"},
            "options": {"time_limit_s": 30},
        },
    )
    with SweepFiles(Path(f"{out}.csv"), Path(f"{out}.jsonl")) as files:
        stats = run_sweep(jobs, files, workers=2)
    assert (stats.total, stats.skipped, stats.solved) == (6, 6, 0)
    assert main([*argv, "--out", str(out), "--no-progress"]) == 1
    assert "6 already written, 0 run" in capsys.readouterr().err
    assert [len(x) for x in _rows(out)] == [6, 6]


def test_cut_line_is_dropped_and_errors_retried(tmp_path: Path) -> None:
    jobs = [
        Job(ModelItem(f"bad{i}", error="no such model"), {"cluster": {"num_gpus": 8}}, f"k{i}")
        for i in range(3)
    ]
    csv_path, jsonl_path = tmp_path / "s.csv", tmp_path / "s.jsonl"
    with SweepFiles(csv_path, jsonl_path) as files:
        for job in jobs[:2]:
            files.write(Outcome(job, error=job.model.error))
    with jsonl_path.open("a") as f:
        f.write('{"key": "k2", "model": "bad2", "sta')  # killed mid-line
    with SweepFiles(csv_path, jsonl_path) as files:
        assert files.done == {"k0", "k1"}
        stats = run_sweep(jobs, files)
    assert (stats.skipped, stats.solved, stats.statuses) == (2, 1, {"ERROR": 1})
    assert len(jsonl_path.read_text().splitlines()) == 3
    with SweepFiles(csv_path, None) as files:  # the CSV alone resumes too
        assert files.done == {"k0", "k1", "k2"}
    with SweepFiles(csv_path, jsonl_path, retry_errors=True) as files:
        assert files.done == set()
    assert jsonl_path.read_text() == "" and len(csv_path.read_text().splitlines()) == 1


def test_bad_flags_exit_2_naming_the_field(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    base = ["sweep", "--models", "llama2-7b", "--out", str(tmp_path / "x")]
    assert main([*base, "--gpus", "8..x"]) == 2
    assert "--gpus" in capsys.readouterr().err
    assert main([*base, "--gpus", "8", "--seq-len", "2k"]) == 2
    assert "--seq-len" in capsys.readouterr().err
    assert main(["sweep", "--models", "llama2-7b", "--gpus", "8"]) == 2
    assert "--out" in capsys.readouterr().err


def test_sweep_through_a_server(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "remote"
    with running_server() as (port, _health):
        rc = main(
            ["sweep", "--models", "llama2-7b,nope", "--gpus", "8,12", "--tp", "8", *KNOBS]
            + ["--server", f"{LOOPBACK}:{port}", "--out", str(out), "--no-progress"]
        )
    assert rc == 1
    rows, _ = _rows(out)
    cell = {(r["model"], int(r["num_gpus"])): r for r in rows}
    assert len(rows) == 4
    assert cell["llama2-7b", 8]["status"] in ("OPTIMAL", "FEASIBLE")
    assert cell["llama2-7b", 8]["tp"] == "8"
    # the server rejects this cell alone (tp must divide the GPU count): an error row
    assert cell["llama2-7b", 12]["status"] == "ERROR"
    assert "INVALID_ARGUMENT" in cell["llama2-7b", 12]["error"]
    assert "search.tp" in cell["llama2-7b", 12]["error"]
    assert cell["nope", 8]["status"] == "ERROR" and "nope" in cell["nope", 8]["error"]
