"""`meshplan evaluate` and `meshplan plan` with HBM below the reserve: the reason in words, with
the fields to change, never a negative amount of usable memory; the bars stay a line wide."""

from __future__ import annotations

import pytest

from meshplan.tools.cli.main import main

EIGHT = ["--model", "llama3-8b", "--gpus", "8", "--hbm-gib", "0.5"]


def test_evaluate_says_no_memory_is_usable(capsys: pytest.CaptureFixture[str]) -> None:
    main(["evaluate", *EIGHT, "--tp", "1", "--pp", "1", "--dp", "8", "--micro-batch-size", "1"])
    out = capsys.readouterr().out
    assert "does NOT fit: memory: no usable memory" in out, out
    assert "(cluster.hbm_gib)" in out and "(search.memory_reserve_gib)" in out, out
    assert "-0.5 GiB" not in out, out
    assert max(len(line) for line in out.splitlines() if "GiB  #" in line) < 100, out


def test_plan_says_no_memory_is_usable(capsys: pytest.CaptureFixture[str]) -> None:
    main(["plan", *EIGHT])
    out = capsys.readouterr().out
    assert "INFEASIBLE" in out and "no usable memory" in out and "-0.5 GiB" not in out, out
