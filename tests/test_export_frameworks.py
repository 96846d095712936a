"""Exports the frameworks accept: Megatron-FSDP's CUDA_DEVICE_MAX_CONNECTIONS, PyTorch's
interleaved 1F1B rounds in the TORCHTITAN profile, no DEEPSPEED plan its export refuses, the
attention details (RoPE base, QK-norm, latent attention) where a framework has them, no torchtitan
debug-model fallback, and torchtitan 0.3.0's own config classes loading the module it is given."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest
from test_export import MEGATRON_FLAGS, one, read_torchtitan_py, shell_args

from meshplan.solver.planner import evaluate
from meshplan.solver.schema import (
    EvaluateRequest,
    Framework,
    ModelSpec,
    ParallelConfig,
    Recompute,
    TrainingSpec,
)
from meshplan.tools.cli.main import main
from meshplan.tools.export.emit import emit


def _emit(kind: str, c: ParallelConfig, model: str, **training: object) -> str:
    t = TrainingSpec(**training)
    tokens = c.dp * c.micro_batch_size * c.num_microbatches * t.seq_len
    return emit(kind, c, ModelSpec(preset=model), t, tokens)


def test_megatron_fsdp_with_tp_is_never_told_to_set_one_connection() -> None:
    # megatron/training/arguments.py @ d98e8a6: "FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1
    # or unset", asserted with Megatron-FSDP in any layout
    c = ParallelConfig(tp=2, pp=1, dp=4, cp=2, micro_batch_size=1, num_microbatches=4)
    for z in (2, 3):
        text = _emit("megatron", c.model_copy(update={"zero_stage": z}), "llama3-8b")
        assert "CUDA_DEVICE_MAX_CONNECTIONS=1" not in text
        assert "leave CUDA_DEVICE_MAX_CONNECTIONS unset" in text
    text = _emit("megatron", c.model_copy(update={"zero_stage": 1}), "llama3-8b")
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1" in text  # asserted before Blackwell with tp or cp


def test_torchtitan_interleaved_micro_batches_are_whole_rounds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["plan", "--model", "llama3-70b", "--gpus", "256", "--pp", "4", "--tp", "8",
            "--virtual-stages", "2", "--framework", "torchtitan", "--emit"]  # fmt: skip
    assert main(argv) == 0
    got = read_torchtitan_py(capsys.readouterr().out)
    m = got["raw"]["training"]["local_batch_size"] // got["b"]
    rounds = max(1, m // got["pp"])  # torch/distributed/pipelining/schedules.py, torch 2.13.0
    assert got["v"] == 2 and m % rounds == 0, m
    # the rule itself, as evaluate reports it (533 = 4 x 133 + 1 micro-batches)
    ev = evaluate(
        EvaluateRequest(
            model=ModelSpec(preset="llama3-70b"),
            cluster={"num_gpus": 256},
            training=TrainingSpec(framework=Framework.TORCHTITAN),
            config=ParallelConfig(
                tp=8,
                pp=4,
                dp=8,
                virtual_stages=2,
                micro_batch_size=1,
                num_microbatches=533,
                zero_stage=1,
            ),  # fmt: skip
        )
    )
    assert any("multiple of its rounds" in v for v in ev.violations), ev.violations


def test_deepspeed_refuses_to_plan_a_model_it_cannot_build(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert (
        main(["plan", "--model", "deepseek-v3", "--gpus", "1024", "--framework", "deepspeed"]) == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("meshplan plan: --framework: DEEPSPEED cannot build") and "shared" in err
    # a model it can build plans and exports
    argv = ["plan", "--model", "mixtral-8x7b", "--gpus", "64", "--framework", "deepspeed", "--emit"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["zero_optimization"]["stage"] in (0, 1, 2, 3)


def test_exports_carry_rope_base_qk_norm_and_latent_attention() -> None:
    c = ParallelConfig(tp=4, pp=1, dp=16, ep=8, etp=1, micro_batch_size=1, num_microbatches=2)
    a = shell_args(_emit("megatron", c, "qwen3-235b-a22b", seq_len=4096), MEGATRON_FLAGS)
    assert one(a, "--rotary-base") == "1000000" and "--qk-layernorm" in a
    d = ParallelConfig(tp=8, pp=1, dp=8, micro_batch_size=1, num_microbatches=2)
    a = shell_args(_emit("megatron", d, "llama3-8b", seq_len=4096), MEGATRON_FLAGS)
    assert one(a, "--rotary-base") == "500000" and "--qk-layernorm" not in a
    e = ParallelConfig(tp=1, pp=1, dp=64, ep=64, micro_batch_size=1, num_microbatches=1)
    a = shell_args(_emit("megatron", e, "deepseek-v3", seq_len=4096), MEGATRON_FLAGS)
    assert "--multi-latent-attention" in a and one(a, "--kv-lora-rank") == "512"
    assert one(a, "--q-lora-rank") == "1536" and one(a, "--qk-pos-emb-head-dim") == "64"
    ds = json.loads(_emit("deepspeed", d.model_copy(update={"zero_stage": 1}), "llama3-8b"))
    assert "--rotary-position-embeddings-theta 500000" in ds["_megatron_deepspeed"]
    kf = tomllib.loads(_emit("kempnerforge", d.model_copy(update={"zero_stage": 3}), "llama3-8b"))
    assert kf["model"]["rope_theta"] == 500_000.0
    custom = ModelSpec(num_layers=4, hidden_size=1024, num_attention_heads=8, num_kv_heads=8,
                       ffn_hidden_size=4096, vocab_size=32000)  # fmt: skip
    t = TrainingSpec(seq_len=4096)
    text = emit("megatron", d, custom, t, 8 * 2 * 4096)
    assert "--rotary-base" not in text and "take the framework's defaults" in text


def test_mixtral_is_refused_by_torchtitan_not_trained_as_the_debug_model() -> None:
    c = ParallelConfig(tp=1, pp=1, dp=64, ep=8, micro_batch_size=1, num_microbatches=1,
                       zero_stage=3)  # fmt: skip
    for kind in ("torchtitan", "torchtitan-toml"):
        with pytest.raises(ValueError, match="registry.*no flavour") as err:
            _emit(kind, c, "mixtral-8x7b", framework=Framework.TORCHTITAN)
        assert "debug" not in str(err.value)


def test_the_torchtitan_toml_is_written_by_tomli_w() -> None:
    c = ParallelConfig(tp=2, pp=2, dp=2, micro_batch_size=1, num_microbatches=4, zero_stage=1,
                       recompute=Recompute.FULL)  # fmt: skip
    text = _emit("torchtitan-toml", c, "llama3-8b", precision="FP8")
    d = tomllib.loads(text)
    assert d["quantize"]["linear"]["float8"]["recipe_name"] == "tensorwise"
    assert d["model"] == {
        "name": "llama3",
        "flavor": "8B",
        "converters": ["quantize.linear.float8"],
    }
    import meshplan.tools.export.toml_formats as toml_formats

    assert not hasattr(toml_formats, "_toml_value")  # no hand-written TOML writer left


# (model, flags): dense with FSDP, TP + PP interleaved, MoE with EP, full recomputation with
# async TP, MoE with PP. Not FP8: torchao's float8 converter checks the GPU (SM 8.9 or later)
# when the model spec is built, so a CPU cannot load that config.
PLANS = [
    ("llama3-8b", ["--gpus", "16"]),
    ("llama3-70b", ["--gpus", "256", "--pp", "4", "--tp", "8", "--virtual-stages", "2"]),
    ("qwen3-235b-a22b", ["--gpus", "256", "--ep", "8"]),
    ("llama3-70b", ["--gpus", "64", "--tp", "8", "--recompute", "full", "--request", "ASYNC_TP"]),
    ("deepseek-v3", ["--gpus", "1024", "--pp", "8"]),
]


@pytest.mark.skipif(
    not os.environ.get("MESHPLAN_TORCHTITAN_PYTHON"),
    reason="set MESHPLAN_TORCHTITAN_PYTHON to a Python with torchtitan 0.3.0 (and CPU torch)",
)
def test_torchtitan_builds_its_config_from_the_module(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """torchtitan's own classes load each exported module: Trainer.Config.__post_init__ and the
    config dataclasses' checks run on what meshplan_plan() returns."""
    failed = []
    for i, (model, flags) in enumerate(PLANS):
        request = tmp_path / "async_tp.json"  # training.tp_comm_overlap has no flag
        request.write_text(json.dumps({"training": {"tp_comm_overlap": True}}))
        flags = [str(request) if f == "ASYNC_TP" else f for f in flags]
        argv = ["plan", "--model", model, *flags, "--framework", "torchtitan", "--emit"]
        assert main(argv) == 0, capsys.readouterr().err
        folder = tmp_path / f"plan{i}"
        folder.mkdir()
        (folder / "meshplan_plan.py").write_text(capsys.readouterr().out)
        code = (
            "import meshplan_plan as m; c = m.meshplan_plan(); p = c.parallelism; "
            "print(type(c).__qualname__, p.tensor_parallel_degree, p.pipeline_parallel_degree, "
            "c.training.local_batch_size)"
        )
        run = subprocess.run(
            [os.environ["MESHPLAN_TORCHTITAN_PYTHON"], "-c", code],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONPATH": str(folder)},
        )
        if run.returncode or run.stdout.split()[:1] != ["Trainer.Config"]:
            failed.append((model, flags, run.stderr[-1500:]))
    assert not failed, failed
