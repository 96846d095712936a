"""stdout carries exactly one artefact (the table, the JSON, or the launcher config); the rest
goes to stderr. Each launcher's --emit output parses from stdout alone."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path

import pytest
from test_export import read_torchtitan_py

from meshplan.tools.cli.main import main

PLAN = ["plan", "--model", "llama3-8b", "--gpus", "8", "--seq-len", "4096"]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def planned(framework: str) -> dict:
    """The plan of PLAN under a framework as JSON (its --emit must encode this layout)."""
    from meshplan.solver import PlanRequest, plan

    req = PlanRequest.model_validate(
        {
            "model": {"preset": "llama3-8b"},
            "cluster": {"num_gpus": 8},
            "training": {"seq_len": 4096, "framework": framework.upper()},
        }
    )
    return json.loads(plan(req).model_dump_json())


def test_table_and_json_alone_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(PLAN, capsys)
    assert rc == 0 and err == ""
    assert out.startswith("llama3-8b (8.0B params") and "binding wall:" in out
    rc, out, err = run([*PLAN, "--json"], capsys)
    assert rc == 0 and err == ""
    assert json.loads(out)["status"] == "OPTIMAL"  # one document, nothing around it


def _flags(text: str) -> dict[str, str | bool]:
    """Megatron-LM's command line as {flag: value} (a flag alone is True)."""
    words = shlex.split(text.replace("\\\n", " "), comments=True)  # as a shell reads it
    out: dict[str, str | bool] = {}
    for i, w in enumerate(words):
        assert w.startswith("--") or words[i - 1].startswith("--"), w
        if w.startswith("--"):
            nxt = words[i + 1] if i + 1 < len(words) else "--"
            out[w] = True if nxt.startswith("--") else nxt
    return out


@pytest.mark.parametrize("kind", ["megatron", "torchtitan", "deepspeed", "kempnerforge"])
def test_emit_is_the_only_thing_on_stdout(kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run([*PLAN, "--framework", kind, "--emit", kind], capsys)
    assert rc == 0
    assert "binding wall:" in err and "binding wall:" not in out  # the table went to stderr
    c = planned(kind)["config"]
    seqs = c["dp"] * c["micro_batch_size"] * c["num_microbatches"]
    if kind == "megatron":
        flags = _flags(out)
        assert flags["--tensor-model-parallel-size"] == str(c["tp"])
        assert flags["--pipeline-model-parallel-size"] == str(c["pp"])
        assert flags["--micro-batch-size"] == str(c["micro_batch_size"])
        assert flags["--global-batch-size"] == str(seqs)
    elif kind == "deepspeed":
        doc = json.loads(out)
        assert doc["train_batch_size"] == seqs
        assert doc["train_micro_batch_size_per_gpu"] == c["micro_batch_size"]
        assert doc["gradient_accumulation_steps"] == c["num_microbatches"]
    elif kind == "torchtitan":  # 0.3.0: a Python configuration module
        doc = read_torchtitan_py(out)
        assert doc["tp"] == c["tp"] and doc["global"] == seqs
    else:
        doc = tomllib.loads(out)
        assert doc["distributed"]["tp"] == c["tp"] and doc["distributed"]["dp_shard"] == c["dp"]


def test_emit_without_a_value_follows_the_framework(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run([*PLAN, "--framework", "torchtitan", "--emit"], capsys)
    assert rc == 0 and read_torchtitan_py(out)["dp"] == planned("torchtitan")["config"]["dp"]
    rc, out, _ = run([*PLAN, "--framework", "torchtitan", "--emit", "torchtitan-toml"], capsys)
    assert rc == 0 and "parallelism" in tomllib.loads(out)
    rc, out, _ = run([*PLAN, "--emit"], capsys)  # the default profile, MEGATRON
    assert rc == 0 and "--tensor-model-parallel-size" in shlex.split(out)
    rc, out, err = run([*PLAN, "--framework", "generic", "--emit"], capsys)  # no launcher: say so
    assert rc == 2 and out == "" and "--emit" in err and err.count("\n") == 1


def test_json_and_emit_do_not_print_two_documents(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run([*PLAN, "--json", "--emit", "torchtitan"], capsys)
    assert rc == 2 and out == ""
    assert "--emit" in err and "--json" in err and err.count("\n") == 1


def test_infeasible_plan_prints_its_reason_and_no_snippet(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["plan", "--model", "llama2-70b", "--gpus", "8", "--emit", "megatron"]
    rc, out, err = run(argv, capsys)
    assert rc == 3 and out == ""
    assert "INFEASIBLE" in err and "smallest cluster that fits is 24 GPUs" in err  # MEGATRON


def test_evaluate_json_and_table(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["evaluate", "--model", "llama3-8b", "--gpus", "8", "--tp", "1", "--pp", "1"]
    argv += ["--dp", "8", "--micro-batch-size", "1", "--num-microbatches", "4", "--zero-stage"]
    argv += ["3", "--recompute", "full"]
    rc, out, err = run([*argv, "--json"], capsys)
    assert rc == 0 and err == "" and json.loads(out)["fits"] is True
    rc, out, err = run(argv, capsys)
    assert rc == 0 and err == "" and out.startswith("llama3-8b on 8 x h100-sxm-80gb: fits")


@pytest.mark.parametrize(
    ("suffix", "magic"), [("svg", b"<svg"), ("pdf", b"%PDF"), ("png", b"\x89PNG")]
)
def test_plot_writes_the_format_its_suffix_names(
    suffix: str, magic: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / f"bill.{suffix}"
    rc, out, err = run([*PLAN, "--plot", str(path)], capsys)
    assert rc == 0 and "binding wall:" in out and f"wrote {path}" in err
    head = path.read_bytes()[:400]
    assert magic in head


def test_plot_refuses_a_format_it_cannot_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bill.gif"
    rc, out, err = run([*PLAN, "--plot", str(path)], capsys)
    assert rc == 2 and out == "" and not path.exists()
    assert "bill.gif" in err and ".svg" in err and err.count("\n") == 1


def test_a_config_json_is_named_after_its_directory_or_name_or_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = Path(__file__).parent / "data" / "hf" / "llama3_8b.json"
    folder = tmp_path / "Meta-Llama-3-8B"
    folder.mkdir()
    (folder / "config.json").write_text(src.read_text())
    argv = ["plan", "--gpus", "8", "--seq-len", "4096", "--model"]
    rc, out, _ = run([*argv, str(folder)], capsys)
    assert rc == 0 and out.startswith("Meta-Llama-3-8B (8.0B params")
    doc = json.loads(src.read_text()) | {"_name_or_path": "meta-llama/Meta-Llama-3-8B"}
    (folder / "config.json").write_text(json.dumps(doc))
    rc, out, _ = run([*argv, str(folder / "config.json")], capsys)
    assert rc == 0 and out.startswith("meta-llama/Meta-Llama-3-8B (8.0B params")


def test_catalog_table_shows_the_validated_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    """The table reads the JSON files directly (fast start); it shows what the catalog holds."""
    rc, out, err = run(["catalog"], capsys)
    assert rc == 0 and err == ""
    rc, js, _ = run(["catalog", "--json"], capsys)
    doc = json.loads(js)
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    for g in doc["gpus"]:
        cells = rows[g["name"]]
        assert float(cells[1]) == g["hbm_gib"] and float(cells[2]) == g["peak_bf16_tflops"]
    for m in doc["models"]:
        cells = rows[m["name"]]
        assert int(cells[1]) == m["num_layers"] and int(cells[2]) == m["hidden_size"]
        assert cells[-1] == f"{m['published_params_b']:g}B"


def test_sweep_and_ladder_keep_stdout_for_their_artefact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_prefix = tmp_path / "grid"
    argv = ["sweep", "--models", "llama2-7b", "--gpus", "8", "--seq-len", "2048", "--jobs", "1"]
    rc, out, err = run([*argv, "--out", str(out_prefix), "--no-progress"], capsys)
    assert rc == 0 and out == "" and "1 cells" in err
    rc, out, err = run(["ladder", "--rungs", "llama2-7b@8", "--seq-len", "2048", "--json"], capsys)
    assert rc == 0 and err == "" and json.loads(out)[0]["num_gpus"] == 8
