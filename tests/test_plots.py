"""PNG pictures: the memory bill of a plan, the scaling curve (and the numbers behind it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshplan.tools.cli.main import main
from meshplan.tools.render.plots import scaling_plot
from meshplan.tools.sweep.scaling import scaling_series

PNG = b"\x89PNG\r\n\x1a\n"


def assert_png(path: Path, min_bytes: int = 10_000) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG, f"{path} is not a PNG"
    assert len(data) > min_bytes, f"{path} is only {len(data)} bytes"


def test_plan_plot_draws_the_memory_bill(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    png = tmp_path / "bill.png"
    argv = ["plan", "--model", "llama2-7b", "--gpus", "8", "--seq-len", "2048"]
    argv += ["--global-batch-tokens", "131072", "--top-k", "1", "--plot", str(png)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "binding wall:" in captured.out and f"wrote {png}" in captured.err
    assert_png(png)


def test_plot_of_an_infeasible_plan_and_of_an_evaluation(tmp_path: Path) -> None:
    png = tmp_path / "none.png"
    assert main(["plan", "--model", "llama2-70b", "--gpus", "8", "--plot", str(png)]) == 3
    assert_png(png)
    ev = tmp_path / "eval.png"
    argv = ["evaluate", "--model", "llama2-7b", "--gpus", "8", "--tp", "1", "--pp", "1"]
    argv += ["--dp", "8", "--micro-batch-size", "1", "--num-microbatches", "4", "--plot", str(ev)]
    assert main(argv) == 3  # 8k-token sequences without recomputation overflow: still drawn
    assert_png(ev)


def _row(model: str, params: float, gpus: int, tps: float, wall: str = "MEMORY") -> dict:
    return {  # what a sweep's CSV holds (strings), the fields the curve reads
        "model": model,
        "status": "OPTIMAL",
        "total_params": str(int(params)),
        "num_gpus": str(gpus),
        "tokens_per_s": str(tps),
        "model_flops_per_token": str(6 * params),
        "mfu": "0.4",
        "binding_wall": wall,
        "gpu": "h100-sxm-80gb",
        "seq_len": "8192",
        "precision": "BF16",
        "global_batch_tokens": "0",
        "critical_batch_tokens": "2097152",
        "plan_global_batch_tokens": "2097152",
    }


def test_scaling_series_and_plot(tmp_path: Path) -> None:
    rows = [  # 8b: linear to 16 GPUs, then 75% and 50% past the DP cap at 32
        _row("8b", 8e9, 8, 1000.0),
        _row("8b", 8e9, 16, 2000.0),
        _row("8b", 8e9, 32, 3000.0, "DP_CAP"),
        _row("8b", 8e9, 64, 4000.0, "DP_CAP"),
        _row("16b", 16e9, 16, 900.0),
        _row("16b", 16e9, 32, 1700.0),
        _row("32b", 32e9, 32, 900.0),
        _row("32b", 32e9, 64, 1700.0),
        {"model": "bad", "status": "ERROR", "num_gpus": "8"},
    ]
    series = {s.label: s for s in scaling_series(rows)}
    strong = series["8b"]
    assert [p.efficiency for p in strong.points] == pytest.approx([1.0, 1.0, 0.75, 0.5])
    assert strong.dp_cap_gpus == 32 and strong.critical_batch_tokens == 2097152
    assert strong.seq_len == 8192
    (weak,) = [s for s in series.values() if s.kind == "weak"]
    # parameters per GPU held at 1e9: 8b on 8, 16b on 16, 32b on 32
    assert [(p.model, p.gpus) for p in weak.points] == [("8b", 8), ("16b", 16), ("32b", 32)]
    # model FLOPs per GPU over the first's: (16b·900/16) / (8b·1000/8) = 0.9, (32b·900/32) / ... = 0.9
    assert [p.efficiency for p in weak.points] == pytest.approx([1.0, 0.9, 0.9])
    png = scaling_plot(tmp_path / "scaling.png", list(series.values()))
    assert_png(png)
