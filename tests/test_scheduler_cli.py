"""`meshplan curve|replan|admit|front`: one artefact on stdout, the exit codes (0 answered,
3 nothing can be planned / the deadline cannot be met, 2 bad input naming the flag)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from meshplan.tools.cli.main import main

CURVE = ["curve", "--model", "llama3-8b", "--seq-len", "4096", "--counts", "4,8,16",
         "--batch", "fixed-global", "--global-batch-tokens", str(4096 * 64)]  # fmt: skip


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_curve_json_csv_table_and_plot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run([*CURVE, "--json"], capsys)
    assert code == 0 and not err
    res = json.loads(out)
    assert [c["num_gpus"] for c in res["cells"]] == [4, 8, 16]
    assert all(
        c["global_batch_tokens"] == 4096 * 64 for c in res["cells"] if c["status"] == "PLANNED"
    )
    code, out, _ = run([*CURVE, "--csv"], capsys)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and [int(r["num_gpus"]) for r in rows] == [4, 8, 16]
    png = tmp_path / "curve.png"
    code, out, err = run([*CURVE, "--plot", str(png)], capsys)
    assert code == 0 and "knee" in out and "cache key" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "wrote" in err and "wrote" not in out


def test_a_curve_where_nothing_fits_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["curve", "--model", "llama3-405b", "--counts", "8", "--batch",
                        "fixed-global", "--global-batch-tokens", str(8192 * 64)], capsys)  # fmt: skip
    assert code == 3 and "DOES_NOT_FIT" in out


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        ([*CURVE[:-4], "--batch", "fixed-global"], "batch.global_batch_tokens"),
        ([*CURVE, "--max-gpus", "8"], "--counts"),
        (["curve", "--model", "llama3-8b", "--batch", "free"], "--counts or --nodes"),
        (["admit", "--model", "llama3-8b", "--batch", "free", "--max-gpus", "8",
          "--tokens", "1000000", "--deadline-unix", "1000"], "--deadline-unix"),
        (["replan", "--model", "llama3-8b", "--gpus", "16", "--tp", "3", "--pp", "1",
          "--dp", "4", "--micro-batch-size", "1", "--num-microbatches", "4", "--lose", "1",
          "--compatibility", "FREE"], "--tp"),
    ],
)  # fmt: skip
def test_bad_input_exits_2_with_one_line_naming_the_field(
    argv: list[str], field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(argv, capsys)
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and field in err, err


def test_replan_admit_and_front(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(["replan", "--model", "llama3-8b", "--seq-len", "4096", "--gpus", "32",
                        "--tp", "2", "--pp", "1", "--dp", "16", "--micro-batch-size", "1",
                        "--num-microbatches", "4", "--precompute", "2", "--compatibility",
                        "SAME_TP", "--json"], capsys)  # fmt: skip
    assert code == 0 and [r["delta_nodes"] for r in json.loads(out)["rows"]] == [-1, -2]
    admit = ["admit", "--model", "llama3-8b", "--seq-len", "4096", "--gpu", "h100-sxm-80gb",
             "--max-gpus", "16", "--batch", "fixed-global", "--global-batch-tokens",
             str(4096 * 64), "--steps", "100"]  # fmt: skip
    code, out, _ = run([*admit, "--deadline-hours", "48"], capsys)
    assert code == 0 and "pick:" in out
    code, out, _ = run([*admit, "--deadline-hours", "0.001"], capsys)
    assert code == 3 and "earliest finish" in out
    png = tmp_path / "front.png"
    code, out, err = run(["front", "--model", "llama3-8b", "--seq-len", "4096", "--gpu",
                          "h100-sxm-80gb,a100-sxm-80gb", "--price", "3,1.5", "--nodes", "1..2",
                          "--batch", "free", "--token-budget", str(10**10), "--csv",
                          "--plot", str(png)], capsys)  # fmt: skip
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and rows and any(r["on_front_cost"] == "True" for r in rows)
    assert png.exists() and "wrote" in err
