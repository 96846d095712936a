"""The CLI: a plan table, JSON, and one clear line (exit 2) for bad input."""

from __future__ import annotations

import json

from meshplan.tools.cli.main import main


def test_plan_table_and_json(capsys) -> None:  # noqa: ANN001
    assert main(["plan", "--model", "llama3-8b", "--gpus", "8", "--seq-len", "4096"]) == 0
    out = capsys.readouterr().out
    assert "binding wall:" in out and "GiB" in out and "MFU" in out
    assert (
        main(
            [
                "plan",
                "--model",
                "llama3-8b",
                "--gpus",
                "8",
                "--seq-len",
                "4096",
                "--tp",
                "2",
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "OPTIMAL" and data["config"]["tp"] == 2


def test_evaluate_flags(capsys) -> None:  # noqa: ANN001
    rc = main(
        [
            "evaluate",
            "--model",
            "llama3-8b",
            "--gpus",
            "8",
            "--tp",
            "1",
            "--pp",
            "1",
            "--dp",
            "8",
            "--micro-batch-size",
            "1",
            "--num-microbatches",
            "4",
            "--zero-stage",
            "3",
            "--recompute",
            "FULL",
            "--json",
        ]
    )
    assert rc == 0
    assert json.loads(capsys.readouterr().out)["fits"] is True


def test_bad_input_is_one_line(capsys) -> None:  # noqa: ANN001
    assert main(["plan", "--model", "nope", "--gpus", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "nope" in err
    assert main(["plan", "--model", "llama3-8b", "--gpus", "0"]) == 2
    assert "--gpus" in capsys.readouterr().err
    assert main(["plan", "--model", "llama3-8b", "--gpus", "8", "--tp", "3"]) == 2
    assert "search.tp" in capsys.readouterr().err


def test_catalog(capsys) -> None:  # noqa: ANN001
    assert main(["catalog"]) == 0
    out = capsys.readouterr().out
    assert "h100-sxm-80gb" in out and "llama3-405b" in out
