"""Forgiving input (enum values in any case; evaluate derives num_microbatches from the batch)
and hostile input, which gets one bounded line and exit 2: a request that is not an object,
100,000-deep nesting, a 100 MB name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from meshplan.solver import EvaluateRequest, PlanRequest, evaluate
from meshplan.solver.schema import Framework, Precision, Recompute
from meshplan.tools.cli.flags import tokens
from meshplan.tools.cli.main import main
from meshplan.tools.cli.messages import one_line, shorten

SMALL = ["--model", "llama3-8b", "--gpus", "8", "--seq-len", "4096"]
LAYOUT = ["--tp", "1", "--pp", "1", "--dp", "8", "--micro-batch-size", "1", "--zero-stage", "3"]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_enum_values_in_any_case_in_json_requests() -> None:
    req = PlanRequest.model_validate(
        {
            "model": {"preset": "llama3-8b"},
            "cluster": {"num_gpus": 8},
            "training": {"precision": "fp8", "framework": "KempnerForge"},
            "search": {"recompute": "Selective"},
        }
    )
    assert req.training.precision is Precision.FP8
    assert req.training.framework is Framework.KEMPNERFORGE
    assert req.search.recompute is Recompute.SELECTIVE
    ev = EvaluateRequest.model_validate(
        {
            "model": {"preset": "llama3-8b"},
            "cluster": {"num_gpus": 8},
            "config": {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1, "recompute": "full"},
        }
    )
    assert ev.config.recompute is Recompute.FULL
    with pytest.raises(ValidationError) as bad:  # still an error, naming the field
        PlanRequest.model_validate(
            {
                "model": {"preset": "x"},
                "cluster": {"num_gpus": 8},
                "training": {"precision": "fp16"},
            }
        )
    assert bad.value.errors()[0]["loc"] == ("training", "precision")


def test_enum_values_in_any_case_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", *SMALL, "--precision", "bf16", "--recompute", "full", "--json"]
    argv += ["--framework", "torchtitan", "--sequence-parallel", "TRUE"]
    rc, out, _ = run(argv, capsys)
    assert rc == 0 and json.loads(out)["config"]["recompute"] == "FULL"
    rc, out, _ = run(["plan", *SMALL, "--framework", "TorchTitan", "--emit", "TorchTitan"], capsys)
    assert rc == 0 and "ParallelismConfig(" in out
    request = tmp_path / "r.json"
    request.write_text(
        json.dumps({"training": {"precision": "bf16"}, "search": {"recompute": "none"}})
    )
    rc, out, _ = run(["plan", *SMALL, "--request", str(request), "--json"], capsys)
    assert rc == 0 and json.loads(out)["config"]["recompute"] == "NONE"
    sweep = ["sweep", "--models", "llama2-7b", "--gpus", "8", "--seq-len", "2048", "--jobs", "1"]
    rc, _, _ = run(
        [*sweep, "--precision", "bf16", "--recompute", "full", "--csv", str(tmp_path / "s.csv")],
        capsys,
    )
    assert rc == 0 and "FULL" in (tmp_path / "s.csv").read_text()


def test_evaluate_derives_num_microbatches_from_the_global_batch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    batch = 8 * 1 * 16 * 4096  # dp * micro_batch_size * 16 micro-batches * seq_len
    rc, out, err = run(
        ["evaluate", *SMALL, *LAYOUT, "--global-batch-tokens", str(batch), "--json"], capsys
    )
    doc = json.loads(out)
    assert rc in (0, 3) and err == ""
    assert doc["config"]["num_microbatches"] == 16
    assert doc["performance"]["global_batch_tokens"] == batch
    assert doc["notes"] and "num_microbatches = 16" in doc["notes"][0]
    assert "global_batch_tokens" in doc["notes"][0]
    rc, out, _ = run(["evaluate", *SMALL, *LAYOUT, "--global-batch-tokens", str(batch)], capsys)
    assert "note: num_microbatches = 16" in out  # the table says so too
    rc, out, err = run(
        ["evaluate", *SMALL, *LAYOUT, "--global-batch-tokens", str(3 * 4096)], capsys
    )
    assert rc == 2 and out == "" and "config.num_microbatches" in err


def test_evaluate_without_a_batch_uses_the_plans_batch_rule() -> None:
    req = EvaluateRequest.model_validate(
        {
            "model": {"preset": "llama3-8b"},
            "cluster": {"num_gpus": 8},
            "training": {"seq_len": 4096, "critical_batch_tokens": 1 << 20},
            "config": {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 2, "zero_stage": 3},
        }
    )
    res = evaluate(req)
    assert res.config.num_microbatches == (1 << 20) // 4096 // 16  # the cap over dp*b
    assert res.performance is not None and res.performance.global_batch_tokens == 1 << 20
    assert "critical_batch_tokens" in res.notes[0]


def test_a_request_that_is_not_an_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "r.json"
    for text, kind in (("[1, 2]", "list"), ('"llama"', "str"), ("7", "int")):
        path.write_text(text)
        for cmd in ("plan", "evaluate"):
            rc, out, err = run([cmd, "--request", str(path), "--gpus", "8"], capsys)
            assert rc == 2 and out == "" and err.count("\n") == 1, err
            assert "--request" in err and f"got a {kind}" in err and "Traceback" not in err
    path.write_text('{"model": [1], "cluster": {"num_gpus": 8}}')  # a part that is not one
    rc, _, err = run(["plan", "--request", str(path), "--model", "llama3-8b"], capsys)
    assert rc == 2 and "model: must be a JSON object, got list" in err


def test_deep_nesting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    rc, out, err = run(["plan", "--request", str(path)], capsys)
    assert rc == 2 and out == "" and "nested too deeply" in err and err.count("\n") == 1
    path.write_text('{"model": {"preset": ' + "[" * 100_000 + "]" * 100_000 + "}}")
    rc, _, err = run(["evaluate", "--request", str(path)], capsys)
    assert rc == 2 and "nested too deeply" in err


def test_a_100_mb_name_is_not_echoed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = "x" * 100_000_000
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"model": {"preset": name}, "cluster": {"num_gpus": 8}}))
    rc, out, err = run(["plan", "--request", str(path)], capsys)
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert len(err) < 1000 and "(100,000,0" in err and "unknown model" in err
    name = name[:1_000_000]  # the same path; smaller, to keep the test fast
    path.write_text(
        json.dumps({"model": {"preset": "llama3-8b"}, "cluster": {"gpu": name, "num_gpus": 8}})
    )
    rc, _, err = run(["evaluate", "--request", str(path), *LAYOUT], capsys)
    assert rc == 2 and len(err) < 1000


def test_one_line_and_shorten_bound_what_they_echo() -> None:
    assert shorten("a  b\n c") == "a b c"
    long = shorten("name " + "y" * 5000 + " end")
    assert long.startswith("name yyy") and "(5,000 characters)" in long and long.endswith("end")
    assert len(shorten("z " * 10_000)) < 700
    try:
        PlanRequest.model_validate({"model": {"preset": "q" * 10_000}, "cluster": {"num_gpus": 0}})
    except ValidationError as e:
        line = one_line(e)
    assert line.startswith("invalid request: cluster.num_gpus:") and "\n" not in line


def test_token_counts() -> None:
    assert tokens("15T") == 15 * 10**12 and tokens("2e6") == 2_000_000 and tokens("4096") == 4096
    assert tokens("1.5B") == 1_500_000_000 and tokens("2_000") == 2000
    for bad in ("x", "1.5", "-3", "4Q"):
        with pytest.raises(Exception, match="token count"):
            tokens(bad)
