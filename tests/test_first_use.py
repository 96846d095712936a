"""What a new user trips over first: the scheduler commands' defaults and errors, flags never
abbreviated, token suffixes on every token flag, the ZeRO stage of a one-rank evaluate, and the
tables' words."""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

import grpc
import pytest
from test_grpc_support import LOOPBACK, raw_stub, running_server

from meshplan.client.exceptions import InvalidRequestError, error_from_rpc
from meshplan.client.scheduler import _message
from meshplan.solver.scheduler import CurveRequest, ReplanRequest, scaling_curve
from meshplan.solver.scheduler.observe import NOTE
from meshplan.tools.cli.flags import tokens
from meshplan.tools.cli.main import COMMANDS, build_parser, main
from meshplan.tools.render.scheduler_tables import curve_table, layout

ROOT = Path(__file__).resolve().parent.parent
REPLAN = ["replan", "--model", "llama3-8b", "--seq-len", "4096", "--gpus", "32", "--tp", "2",
          "--pp", "1", "--dp", "16", "--micro-batch-size", "1"]  # fmt: skip
SMALL = ["--model", "llama3-8b", "--seq-len", "4096", "--nodes", "1..2"]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_replan_without_num_microbatches_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run([*REPLAN, "--lose", "1", "--compatibility", "SAME_TP"], capsys)
    assert code == 2 and not out and "--num-microbatches" in err and "internal" not in err, err
    # ... or derives it from the running global batch: 16 replicas x 1 x 4 x 4096 tokens
    code, out, err = run([*REPLAN, "--global-batch-tokens", "256Ki", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["before_global_batch_tokens"] == 16 * 4 * 4096


def test_replan_without_num_microbatches_over_grpc_is_invalid_argument() -> None:
    body = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"num_gpus": 32},
        "config": {"tp": 2, "pp": 1, "dp": 16, "micro_batch_size": 1},
        "event": {"delta_nodes": -1},
        "compatibility": "SAME_TP",
        "batch": {"kind": "FIXED_GLOBAL"},
    }
    msg = _message("Replan", ReplanRequest.model_validate(body))
    with (
        running_server() as (port, _),
        raw_stub(port) as stub,
        pytest.raises(grpc.RpcError) as err,
    ):
        stub.Replan(msg, timeout=60)
    failure = error_from_rpc(err.value)
    assert isinstance(failure, InvalidRequestError), failure
    assert [v.field for v in failure.violations] == ["config.num_microbatches"]


def test_replan_applies_the_defaults_its_help_states(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run([*REPLAN, "--num-microbatches", "4", "--json"], capsys)
    assert code == 0, err
    res = json.loads(out)
    assert res["compatibility"] == "SAME_MODEL_PARALLEL"  # --compatibility's default
    assert [r["delta_nodes"] for r in res["rows"]] == [-1]  # --lose 1
    assert res["before_global_batch_tokens"] == 16 * 4 * 4096  # the running batch kept


@pytest.mark.parametrize(
    "argv",
    [
        ["curve", *SMALL],
        ["front", *SMALL, "--token-budget", "10B"],
        ["admit", "--model", "llama3-8b", "--seq-len", "4096", "--max-gpus", "16",
         "--steps", "100", "--deadline-hours", "48"],
    ],
)  # fmt: skip
def test_no_batch_flag_means_the_free_policy(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run([*argv, "--json"], capsys)
    assert code == 0, err
    assert json.loads(out).get("cache_key")


def test_the_global_batch_flag_alone_means_fixed_global(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["curve", *SMALL, "--global-batch-tokens", "256Ki", "--json"], capsys)
    assert code == 0, err
    cells = [c for c in json.loads(out)["cells"] if c["status"] == "PLANNED"]
    assert cells and {c["global_batch_tokens"] for c in cells} == {256 * 1024}


def test_a_flag_is_never_read_as_a_longer_one(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["curve", "--model", "llama3-8b", "--gpus", "16", "--nodes", "1..2",
                          "--batch", "free"], capsys)  # fmt: skip
    assert code == 2 and not out and "--gpus" in err


def _parsers() -> list[ast.Call]:
    calls = []
    for folder in ("tools", "server", "client", "solver", "benchmarks", "scripts", "examples"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in (
                    "ArgumentParser",
                    "add_parser",
                ):
                    calls.append((path, node))
    return calls


def test_every_parser_refuses_abbreviations() -> None:
    calls = _parsers()
    assert len(calls) > 5
    for path, call in calls:
        keys = {k.arg: k.value for k in call.keywords}
        ok = "allow_abbrev" in keys and getattr(keys["allow_abbrev"], "value", None) is False
        assert ok, f"{path.relative_to(ROOT)}:{call.lineno} lacks allow_abbrev=False"


def _actions() -> list[tuple[str, argparse.Action]]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [(name, a) for name, p in sub.choices.items() for a in p._actions]


def test_every_token_flag_takes_suffixes() -> None:
    flags = [(c, a) for c, a in _actions() if a.metavar == "TOKENS"]
    assert len(flags) > 20
    for command, action in flags:
        if command in ("sweep", "ladder") and action.dest == "seq_len":
            continue  # a comma-separated axis there
        assert action.type is tokens, f"{command} {action.option_strings}"
    assert tokens("16M") == 16_000_000 and tokens("4Mi") == 4 * 2**20 and tokens("15T") == 15e12


def test_critical_batch_tokens_takes_a_suffix(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["plan", "--model", "llama3-8b", "--gpus", "8", "--critical-batch-tokens",
                          "4Mi", "--json"], capsys)  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["performance"]["global_batch_tokens"] <= 4 * 2**20


def test_errors_name_the_flag_typed_and_the_field_of_a_request_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    admit = ["admit", "--model", "llama3-8b", "--max-gpus", "8", "--steps", "10"]
    code, _, err = run([*admit, "--deadline-unix", "1000"], capsys)
    assert code == 2 and err.startswith("meshplan admit: --deadline-unix:"), err
    req = tmp_path / "admit.json"
    req.write_text(json.dumps({"deadline_unix_s": 1000}))
    code, _, err = run([*admit, "--request", str(req)], capsys)
    assert code == 2 and "deadline_unix_s" in err and "--deadline" not in err, err
    code, _, err = run(["plan", "--model", "llama3-8b", "--gpus", "0"], capsys)
    assert code == 2 and "--gpus:" in err and "num_gpus" not in err, err


def test_replan_help_states_each_pin_once_and_its_own_exit_status() -> None:
    parser = build_parser("replan")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    text = sub.choices["replan"].format_help()
    assert "required for tp, pp, dp" not in text
    assert text.count("required") >= 4 and "a plan was found" not in text
    assert "at least one row was planned" in text


def test_every_command_has_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    for c in COMMANDS:
        assert main([c.name, "--help"]) == 0
        assert "exit status" in capsys.readouterr().out


def test_tables_spell_recompute_whole_and_say_band_once() -> None:
    req = CurveRequest.model_validate(
        {"model": {"preset": "llama3-8b"}, "training": {"seq_len": 4096},
         "clusters": [{"gpu": "h100-sxm-80gb"}], "grid": {"counts": [8]},
         "batch": {"kind": "FREE"}, "search": {"recompute": "NONE"}}
    )  # fmt: skip
    res = scaling_curve(req)
    cfg = res.cells[0].config
    assert layout(cfg).endswith(" NONE")
    text = curve_table(res.model_copy(update={"band_source": NOTE}))
    assert "band: band:" not in text and "band: the step time" in text


def test_evaluate_zero_stage_follows_the_data_parallel_ranks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(["evaluate", "--model", "llama3-8b", "--gpus", "8", "--tp", "8", "--pp",
                          "1", "--dp", "1", "--micro-batch-size", "1", "--json"], capsys)  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["config"]["zero_stage"] == 0
    code, out, _ = run(["evaluate", "--model", "llama3-8b", "--gpus", "8", "--tp", "4", "--pp",
                        "1", "--dp", "2", "--micro-batch-size", "1", "--json"], capsys)  # fmt: skip
    assert json.loads(out)["config"]["zero_stage"] == 1


def test_batch_says_why_it_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = {"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": 8}}
    bad = {"model": {"preset": "no-such-model"}, "cluster": {"num_gpus": 8}}
    path = tmp_path / "requests.json"
    path.write_text(json.dumps([good, bad]))
    out = tmp_path / "out.jsonl"
    with running_server() as (port, _):
        code = main(["batch", "--server", f"{LOOPBACK}:{port}", "--request", str(path),
                     "--output", str(out), "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1 and "1 of 2 requests failed" in err and "model.preset" in err, err


def _children(pid: int) -> set[int]:
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.add(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_sweep_stopped_by_sigterm_stops_its_workers(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    cmd = [sys.executable, "-m", "meshplan", "sweep", "--models", "llama3-8b,llama3-70b,llama3-405b",
           "--gpus", "8..4096", "--jobs", "2", "--out", str(tmp_path / "s"), "--no-progress"]  # fmt: skip
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    deadline, kids = time.monotonic() + 60, set()
    while time.monotonic() < deadline and len(kids) < 3:  # 2 workers and the resource tracker
        time.sleep(0.2)
        kids = _children(proc.pid)
    assert len(kids) >= 3, kids
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "terminated" in err, err
    time.sleep(0.5)
    assert not [k for k in kids if _alive(k)], "worker processes left running"


LAZY_PROBE = """
import sys
from meshplan.tools.cli.main import main
import contextlib, io
import meshplan.solver.cpsat.search as search_mod
with contextlib.redirect_stdout(io.StringIO()):
    assert main(sys.argv[1:]) == 0
print(*(m for m in ("ortools", "pandas", "matplotlib", "grpc") if m in sys.modules))
from meshplan.solver import PlanRequest, cache, plan
cache.clear()
search_mod.exact_round = lambda *_: None  # the proof left to CP-SAT: a model is built
r = plan(PlanRequest.model_validate({"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": 8}}))
print(r.solver.num_variables > 0, "ortools" in sys.modules)
"""


def test_a_plan_loads_or_tools_and_pandas_only_with_a_cp_sat_model() -> None:
    import subprocess
    import sys

    from benchmarks.startup import FIRST_PLAN

    run = subprocess.run([sys.executable, "-c", LAZY_PROBE, *FIRST_PLAN], capture_output=True,
                         text=True, timeout=120, check=True)  # fmt: skip
    first, second = run.stdout.splitlines()
    assert first == "", f"the README's first plan loaded {first}"
    assert second == "True True"
