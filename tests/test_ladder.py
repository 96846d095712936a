"""`meshplan ladder`: the rungs of "The scaling ladder" on a small family: the wall and the axis
each rung adds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from meshplan.solver.schema import ParallelConfig
from meshplan.tools.cli.main import main
from meshplan.tools.sweep.ladder import axes_of, pair, parse_rungs

# The textbook's bill (16 bytes per parameter, ZeRO-3 with any pipeline): 70B fits on 16 GPUs.
# Under Megatron's recipe (fp32 main gradients, no ZeRO-3 with pipelining) it needs 24
# (tests/test_profiles.py::test_ladder_under_the_default_profile).
KNOBS = ["--seq-len", "2048", "--global-batch-tokens", "131072", "--time-limit", "30"]
KNOBS += ["--framework", "GENERIC"]


def test_axes_of_a_layout() -> None:
    def cfg(**kw: int) -> ParallelConfig:
        return ParallelConfig(
            **{"tp": 1, "pp": 1, "dp": 1, "micro_batch_size": 1, "num_microbatches": 1, **kw}
        )

    assert axes_of(cfg(dp=8, zero_stage=3)) == ["fsdp"]
    assert axes_of(cfg(dp=8, zero_stage=1)) == ["dp"]
    assert axes_of(cfg(tp=8, pp=16, dp=16, zero_stage=1)) == ["tp", "pp", "dp"]
    assert axes_of(cfg()) == []


def test_rung_specs() -> None:
    assert parse_rungs("llama3-8b@8, llama3-70b@256") == [("llama3-8b", 8), ("llama3-70b", 256)]
    with pytest.raises(ValueError, match="--rungs"):
        parse_rungs("llama3-8b")
    assert pair(["a", "b"], [8]) == [("a", 8), ("b", 8)]  # type: ignore[list-item]
    with pytest.raises(ValueError, match="--gpus"):
        pair(["a", "b"], [8, 16, 32])  # type: ignore[list-item]


def test_small_family_ladder(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """llama2 7B on 8 GPUs is pure data parallel; 70B on 8 does not fit (16 would); 70B on 16
    must split the model, so it adds tp or pp over the 7B rung ("The scaling ladder", rungs 0-2)."""
    png = tmp_path / "ladder.png"
    argv = ["ladder", "--rungs", "llama2-7b@8,llama2-70b@8,llama2-70b@16", *KNOBS]
    assert main([*argv, "--jobs", "1", "--json", "--plot", str(png)]) == 0
    rungs = json.loads(capsys.readouterr().out)
    assert [r["num_gpus"] for r in rungs] == [8, 8, 16]
    first, stuck, split = rungs
    assert first["config"] is not None and set(first["axes"]) <= {"dp", "fsdp"} and first["axes"]
    assert first["added"] == first["axes"]
    assert stuck["binding_wall"] == "INFEASIBLE" and stuck["min_gpus"] == 16 and stuck["reason"]
    assert stuck["added"] == [] and stuck["config"] is None
    assert split["config"] is not None
    assert {"tp", "pp"} & set(split["added"]), split
    assert split["binding_wall"] in ("WEIGHTS", "MEMORY", "BUBBLE", "COMMUNICATION", "NONE")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000

    # the same ladder from --models/--gpus, as a table
    assert main(["ladder", "--models", "llama2-7b,llama2-70b", "--gpus", "8,16", *KNOBS]) == 0
    table = capsys.readouterr().out
    assert "binding wall" in table and ("+fsdp" in table or "+dp" in table)
    assert "+tp" in table or "+pp" in table


def test_bad_ladder_input_exits_2(capsys) -> None:  # noqa: ANN001
    assert main(["ladder", "--rungs", "llama3-8b"]) == 2
    assert "--rungs" in capsys.readouterr().err
    assert main(["ladder", "--models", "llama2:*", "--gpus", "8,16"]) == 2
    assert "--gpus" in capsys.readouterr().err
