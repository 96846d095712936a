"""`--ray`: sweeps, batches and scheduler queries on a local Ray cluster (`ray.init(num_cpus=2)`,
started once for the module): the same rows as the process pool, a killed worker actor loses
nothing, an interrupted sweep resumes without a duplicate, and without Ray `--ray` is exit 2
with one line that says what to install."""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshplan.tools.cli.main import main
from meshplan.tools.sweep.files import SweepFiles, run_sweep
from meshplan.tools.sweep.grid import expand_models
from meshplan.tools.sweep.ray_backend import RAY_MISSING
from meshplan.tools.sweep.solve import build_jobs

# Small, fast cells (tests/test_sweep.py's knobs): a fixed batch, the generic profile.
BASE = {
    "training": {"global_batch_tokens": 131072, "framework": "GENERIC"},
    "options": {"time_limit_s": 30},
}
KNOBS = ["--seq-len", "2048", "--global-batch-tokens", "131072", "--time-limit", "30"]
KNOBS += ["--framework", "GENERIC"]


def _jobs(models: str = "llama2-7b,mixtral-8x7b,nope", gpus: tuple[int, ...] = (8, 16, 32, 64)):
    return build_jobs(expand_models(models), list(gpus), seq_lens=[2048], base=BASE)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _comparable(row: dict[str, Any]) -> dict[str, Any]:
    """A row without what depends on the run (solve times)."""
    row = {k: v for k, v in row.items() if k != "wall_time_s"}
    if row.get("result") and row["result"].get("solver"):
        row["result"] = json.loads(json.dumps(row["result"]))
        row["result"]["solver"].pop("wall_time_s", None)
    return row


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def backend(ray_cluster: Any) -> Iterator[Any]:
    """Worker actors shared by the tests."""
    from meshplan.tools.sweep.ray_paths import RayBackend

    with RayBackend() as ray:
        yield ray


def test_a_sweep_on_ray_equals_the_process_pool_row_for_row(backend: Any, tmp_path: Path) -> None:
    jobs = _jobs()
    with SweepFiles(None, tmp_path / "pool.jsonl") as files:
        run_sweep(jobs, files, workers=2)
    with SweepFiles(None, tmp_path / "ray.jsonl") as files:
        stats = run_sweep(jobs, files, ray=backend)
    assert len(backend.workers.pids()) == 2  # one actor per CPU of the cluster
    assert stats.solved == len(jobs) == 12
    pool = {r["key"]: _comparable(r) for r in _lines(tmp_path / "pool.jsonl")}
    on_ray = {r["key"]: _comparable(r) for r in _lines(tmp_path / "ray.jsonl")}
    assert pool == on_ray
    assert Counter(r["status"] for r in on_ray.values()) == {
        "OPTIMAL": 7,
        "INFEASIBLE": 1,
        "ERROR": 4,
    }


def test_a_scheduler_query_on_ray_equals_in_process(backend: Any) -> None:
    from meshplan.solver.scheduler import CurveRequest, scaling_curve

    req = CurveRequest.model_validate(
        {
            "model": {"preset": "llama3-8b"},
            "training": {"seq_len": 4096},
            "clusters": [{"gpu": "h100-sxm-80gb"}, {"gpu": "a100-sxm-80gb"}],
            "grid": {"counts": [4, 8, 16]},
            "batch": {"kind": "FIXED_GLOBAL", "global_batch_tokens": 4096 * 64},
        }
    )

    def cells(res: Any) -> list[dict[str, Any]]:
        out = res.model_dump(mode="json")["cells"]
        for c in out:
            (c.get("result") or {}).get("solver", {}).pop("wall_time_s", None)
        return out

    local, on_ray = scaling_curve(req), scaling_curve(req, solver=backend.cells)
    assert len(on_ray.cells) == 6 and cells(on_ray) == cells(local)
    assert on_ray.clusters == local.clusters


def test_a_killed_worker_actor_loses_nothing(backend: Any, tmp_path: Path) -> None:
    jobs = _jobs("llama2-7b,llama3-8b", (8, 16, 32, 64, 128, 256, 512, 1024))
    victim = backend.workers.pids()[0]
    lost = backend.workers.lost
    with SweepFiles(None, tmp_path / "kill.jsonl") as files:
        write = files.write

        def write_then_kill(out: Any) -> dict[str, Any]:
            if len(files.rows) == 1:  # mid-sweep: the actor holds calls in flight
                os.kill(victim, 9)  # a crash, not a polite stop
            return write(out)

        files.write = write_then_kill  # type: ignore[method-assign]
        stats = run_sweep(jobs, files, ray=backend)
    assert backend.workers.lost == lost + 1
    assert victim not in backend.workers.pids()
    rows = _lines(tmp_path / "kill.jsonl")
    assert stats.solved == len(jobs) == 16
    assert sorted(r["key"] for r in rows) == sorted(j.key for j in jobs)  # once each
    assert all(r["status"] == "OPTIMAL" for r in rows)


def test_an_actor_that_cannot_be_placed_holds_no_work(backend: Any, tmp_path: Path) -> None:
    jobs = _jobs("llama2-7b", (8, 16, 32, 64))
    backend.workers.close()
    backend.workers.count = 3  # on 2 CPUs: the third waits for a CPU that never frees
    try:
        with SweepFiles(None, tmp_path / "placed.jsonl") as files:
            stats = run_sweep(jobs, files, ray=backend)
        ready = [s.ready for s in backend.workers._slots]
        assert len(ready) == 3 and 1 <= ready.count(True) <= 2  # never the one with no CPU
    finally:
        backend.workers.count = 0
        backend.workers.close()
    assert stats.solved == len(jobs) == 4
    assert sorted(r["key"] for r in _lines(tmp_path / "placed.jsonl")) == sorted(
        j.key for j in jobs
    )


def test_an_interrupted_sweep_stops_its_actors_and_resumes_without_a_duplicate(
    backend: Any, tmp_path: Path
) -> None:
    jobs = _jobs("llama2-7b,llama3-8b", (8, 16, 32, 64, 128, 256))
    path = tmp_path / "resume.jsonl"
    pids = backend.workers.pids()
    with SweepFiles(None, path) as files:
        write = files.write

        def write_then_interrupt(out: Any) -> dict[str, Any]:
            row = write(out)
            if len(files.rows) == 3:
                raise KeyboardInterrupt  # as Ctrl-C does, between two rows
            return row

        files.write = write_then_interrupt  # type: ignore[method-assign]
        with pytest.raises(KeyboardInterrupt):
            run_sweep(jobs, files, ray=backend)
    deadline = time.monotonic() + 10  # the actors are killed at once: their work stops
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids)
    assert len(_lines(path)) == 3
    with SweepFiles(None, path) as files:
        stats = run_sweep(jobs, files, ray=backend)  # new actors
    assert (stats.skipped, stats.solved) == (3, len(jobs) - 3)
    keys = [r["key"] for r in _lines(path)]
    assert len(keys) == len(set(keys)) == len(jobs)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (killed, not yet reaped) has stopped working too
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def test_the_cli_on_ray_sweep_and_batch(
    backend: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    backend.workers.close()  # their CPUs, for the actors the commands start
    out = tmp_path / "cli"
    argv = ["sweep", "--models", "llama2-7b", "--gpus", "8,16", *KNOBS, "--no-progress"]
    assert main([*argv, "--ray", "--jobs", "1", "--out", str(out)]) == 0
    assert "2 cells: 0 already written, 2 run" in capsys.readouterr().err
    assert main([*argv, "--ray", "--out", str(out)]) == 0  # resumed: nothing runs again
    assert "2 already written, 0 run" in capsys.readouterr().err
    assert len(_lines(Path(f"{out}.jsonl"))) == 2

    reqs = [{"model": {"preset": "llama2-7b"}, "cluster": {"num_gpus": n}, **BASE} for n in (8, 16)]
    reqs.append({"model": {"preset": "llama2-7b"}, "cluster": {"num_gpus": 8, "gpu": "nope"}})
    src = tmp_path / "reqs.json"
    src.write_text(json.dumps(reqs))
    code = main(["batch", "--ray", "--jobs", "1", "--request", str(src), "--no-progress"])
    got = capsys.readouterr()
    rows = sorted((json.loads(x) for x in got.out.splitlines()), key=lambda r: r["index"])
    assert code == 1 and [r["index"] for r in rows] == [0, 1, 2]
    assert rows[0]["result"]["status"] == "OPTIMAL" and rows[1]["result"]["config"]
    assert rows[2]["error"]["code"] == "INVALID_ARGUMENT" and "nope" in rows[2]["error"]["message"]
    # the field as PlanBatch names it (server/servicer.py: requests[i].<path>)
    (bad,) = rows[2]["error"]["field_violations"]
    assert bad["field"] == "requests[2].cluster.gpu" and "nope" in bad["description"]
    assert "1 of 3 requests failed" in got.err


def test_the_ladder_on_ray_equals_the_ladder_in_process(
    backend: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    backend.workers.close()  # their CPUs, for the actors the command starts
    argv = ["ladder", "--rungs", "llama2-7b@8,llama2-7b@16", *KNOBS, "--json"]
    assert main([*argv, "--jobs", "1"]) == 0
    local = json.loads(capsys.readouterr().out)
    assert main([*argv, "--ray", "--jobs", "1"]) == 0
    on_ray = json.loads(capsys.readouterr().out)
    assert [r["num_gpus"] for r in on_ray] == [8, 16] and on_ray[0]["config"]
    assert on_ray == local


@pytest.mark.parametrize(
    "argv",
    [
        ["sweep", "--models", "llama2-7b", "--gpus", "8", "--out", "{tmp}/x", "--ray"],
        ["ladder", "--rungs", "llama2-7b@8", "--ray"],
        ["batch", "--ray", "auto", "--request", "{tmp}/none.json"],
        ["curve", "--model", "llama3-8b", "--counts", "8", "--ray", "ray://head:10001"],
        [
            "admit",
            "--model",
            "llama3-8b",
            "--max-gpus",
            "8",
            "--steps",
            "1",
            "--deadline-hours",
            "1",
            "--ray",
        ],  # fmt: skip
    ],
)
def test_ray_flag_without_ray_exits_2_with_what_to_install(
    argv: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as if not installed
    code = main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and RAY_MISSING in err and "pip install 'meshplan[ray]'" in err
    assert not list(tmp_path.iterdir())  # nothing ran, nothing written


def test_the_throughput_report_puts_rays_start_up_apart_and_judges_the_target() -> None:
    from benchmarks.ray_sweep import ray_lines, ray_over_pool
    from benchmarks.throughput import PathResult, Report

    pool = PathResult("process pool x2", 1000, 1000, 50.0, {"OPTIMAL": 1000})
    ray = PathResult("Ray x2", 1000, 1000, 56.0, {"OPTIMAL": 1000}, startup_s=20.0, actors_s=3.0)
    batch = PathResult("PlanBatch (gRPC) x2", 1000, 1000, 40.0, {}, processes=2)
    rep = Report([batch, pool, ray], [2], 2, 10.0, False, distinct=True)
    assert ray_over_pool(rep.results) == pytest.approx(1.12)
    lines = ray_lines(rep)
    assert "ray.init 20" in lines[0] and "warm 3" in lines[0]
    assert lines[1].endswith("1.120x: met (at most 1.15x)")
    ray.seconds = 60.0
    assert "1.200x: MISSED" in ray_lines(rep)[1]
    assert ray_over_pool([batch, pool]) is None


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            [
                "sweep",
                "--models",
                "llama2-7b",
                "--gpus",
                "8",
                "--out",
                "{tmp}/x",
                "--ray",
                "--server",
                "localhost:1",
            ],
            "--ray: give --ray or --server, not both",
        ),  # fmt: skip
        (["batch", "--request", "{tmp}/none.json"], "--server or --ray: give where to solve"),
    ],
)
def test_ray_and_server_are_one_or_the_other(
    argv: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and said in err
    assert not list(tmp_path.iterdir())
