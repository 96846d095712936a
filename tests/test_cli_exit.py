"""Exit codes, for every subcommand: 0 plan found / layout fits / every row answered, 3 no
layout fits / the layout does not fit, 2 bad input, 1 anything else, 130 Ctrl-C. A closed pipe
ends quietly with 0."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_grpc_support import LOOPBACK, running_server

from meshplan.tools.cli.main import EXIT_CODES, main

SMALL = ["--model", "llama3-8b", "--gpus", "8", "--seq-len", "4096"]
LAYOUT = ["--tp", "1", "--pp", "1", "--dp", "8", "--micro-batch-size", "1"]
FITS = [*LAYOUT, "--num-microbatches", "4", "--zero-stage", "3", "--recompute", "FULL"]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_top_level(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(["--help"], capsys)
    assert rc == 0 and "exit status:" in out and "plan" in out
    rc, out, _ = run(["--version"], capsys)
    assert rc == 0 and out.startswith("meshplan ") and len(out.split()) == 2
    rc, _, err = run([], capsys)
    assert rc == 2 and "COMMAND" in err
    rc, _, err = run(["no-such-command"], capsys)
    assert rc == 2 and "no-such-command" in err


def test_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["plan", *SMALL], capsys)[0] == 0
    rc, out, _ = run(["plan", "--model", "llama2-70b", "--gpus", "8"], capsys)
    assert rc == 3 and "INFEASIBLE" in out
    assert run(["plan", "--model", "nope", "--gpus", "8"], capsys)[0] == 2
    assert run(["plan", *SMALL, "--tp", "3"], capsys)[0] == 2  # a pin that can never hold
    assert run(["plan", *SMALL, "--precision", "fp16"], capsys)[0] == 2
    assert run(["plan", "--gpus", "8"], capsys)[0] == 2  # no model


def test_plan_stopped_before_any_plan_is_not_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    """A solve that runs out of time with nothing in hand exits 1 and says so: not 'invalid
    request' (TimeoutError is an OSError, which used to be read as a bad file)."""
    argv = ["plan", "--model", "llama3-405b", "--gpus", "4096", "--time-limit", "0.001"]
    rc, out, err = run(argv, capsys)
    assert rc == 1 and out == ""
    assert "stopped before any plan" in err and "--time-limit" in err
    assert "invalid" not in err and err.count("\n") == 1


def test_evaluate(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["evaluate", *SMALL, *FITS], capsys)[0] == 0
    rc, out, _ = run(["evaluate", *SMALL, *LAYOUT, "--num-microbatches", "4"], capsys)
    assert rc == 3 and "does NOT fit in memory" in out  # 8k tokens, no recomputation
    assert run(["evaluate", *SMALL, "--pp", "1", "--dp", "8"], capsys)[0] == 2  # no tp


def test_evaluate_rule_violations_are_not_called_memory(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["evaluate", *SMALL, *FITS, "--global-batch-tokens", str(8 * 4 * 4096 * 2)]
    rc, out, _ = run(argv, capsys)
    assert rc == 3
    assert out.splitlines()[0].endswith("breaks the rules")
    assert "rule violation: dp*micro_batch_size*num_microbatches*seq_len" in out
    assert "does NOT fit" not in out


def test_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["catalog"], capsys)[0] == 0
    assert run(["catalog", "--bogus"], capsys)[0] == 2


def test_serve_bad_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["serve", "--port", "not-a-port"], capsys)[0] == 2


def test_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["sweep", "--seq-len", "2048", "--jobs", "1", "--no-progress"]
    ok = run([*base, "--models", "llama2-7b", "--gpus", "8", "--out", str(tmp_path / "a")], capsys)
    assert ok[0] == 0
    rc, _, err = run(
        [*base, "--models", "nope", "--gpus", "8", "--out", str(tmp_path / "b")], capsys
    )
    assert rc == 1 and "1 ERROR" in err  # a failed row
    rc, _, err = run([*base, "--models", "llama2-7b", "--gpus", "8..x"], capsys)
    assert rc == 2 and "--gpus" in err and err.count("\n") == 1


def test_ladder(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["ladder", "--rungs", "llama2-7b@8", "--seq-len", "2048"], capsys)[0] == 0
    rc, _, err = run(["ladder", "--rungs", "llama2-7b@8", "--models", "llama3-8b"], capsys)
    assert rc == 2 and "--rungs" in err


def test_batch_and_remote_calls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"num_gpus": 8},
        "training": {"seq_len": 4096},
    }
    bad = {"model": {"preset": "no-such-model"}, "cluster": {"num_gpus": 8}}
    reqs = tmp_path / "reqs.json"
    with running_server() as (port, _):
        server = f"{LOOPBACK}:{port}"
        reqs.write_text(json.dumps([good, good]))
        rc, out, _ = run(["batch", "--server", server, "--request", str(reqs)], capsys)
        assert rc == 0 and len(out.splitlines()) == 2
        reqs.write_text(json.dumps([good, bad]))
        assert run(["batch", "--server", server, "--request", str(reqs)], capsys)[0] == 1
        reqs.write_text("[1, 2]")
        rc, out, err = run(["batch", "--server", server, "--request", str(reqs)], capsys)
        assert rc == 2 and out == "" and "request 0 must be a JSON object" in err
        assert run(["plan", "--server", server, *SMALL], capsys)[0] == 0
        infeasible = ["--model", "llama2-70b", "--gpus", "8"]
        assert run(["plan", "--server", server, *infeasible], capsys)[0] == 3
        rc, _, err = run(["plan", "--server", server, "--model", "nope", "--gpus", "8"], capsys)
        assert rc == 2 and "nope" in err  # the server's INVALID_ARGUMENT is bad input
        assert run(["evaluate", "--server", server, *SMALL, *FITS], capsys)[0] == 0
        # the new fields cross the wire: train_tokens in, the batch rule and notes out
        rc, out, _ = run(
            ["plan", "--server", server, *SMALL, "--train-tokens", "1T", "--json"], capsys
        )
        batch = json.loads(out)["batch"]
        assert rc == 0 and batch["source"] == "SCALING_LAW" and batch["train_tokens"] == 10**12
        rc, out, _ = run(["evaluate", "--server", server, *SMALL, *FITS[:-6], "--json"], capsys)
        assert json.loads(out)["notes"][0].startswith("num_microbatches = ")
    rc, _, err = run(["plan", "--server", f"{LOOPBACK}:1", *SMALL, "--time-limit", "1"], capsys)
    assert rc == 1 and "UNAVAILABLE" in err and err.count("\n") == 1


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "meshplan", *args]


@pytest.mark.parametrize("args", [("catalog",), ("plan", *SMALL, "--json")])
def test_a_closed_pipe_ends_quietly(args: tuple[str, ...]) -> None:
    proc = subprocess.Popen(_cli(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before anything is written
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0 and err == b""


def test_catalog_into_head() -> None:
    shell = f"set -o pipefail; {' '.join(_cli('catalog'))} | head -2"
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "" and len(done.stdout.splitlines()) == 2


@pytest.mark.parametrize("delay_s", [0.8, 2.0])
def test_ctrl_c_exits_130_with_one_line_and_no_partial_answer(delay_s: float) -> None:
    """Ctrl-C while the solver loads or solves: no traceback, no plan on stdout (CP-SAT used to
    catch SIGINT, stop the search and let the command print fewer alternatives with status 0;
    an extension module interrupted while it loads used to turn it into an ImportError)."""
    argv = _cli("plan", "--model", "deepseek-v3", "--gpus", "131072", "--allow-fewer-gpus")
    argv += ["--top-k", "16", "--time-limit", "60", "--json"]  # ~8 s on 2 cores
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )
    time.sleep(delay_s)  # loading the solver, or inside the solve (far from done)
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert out == "" and err == "meshplan: interrupted\n"
    assert time.monotonic() - t0 < 10  # stopped, not run to its time limit


def test_exit_codes_are_documented() -> None:
    for code in ("0", "1", "2", "3", "130"):
        assert f"\n  {code} " in EXIT_CODES
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    for line in EXIT_CODES.splitlines()[1:]:
        if line.strip()[:1].isdigit():
            assert f"| {line.split()[0]} |" in readme, line
