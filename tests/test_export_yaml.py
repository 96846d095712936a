"""The YAML exports (tools/export/llm_foundry.py, tools/export/nanotron.py) parse as YAML, name
only the keys the frameworks' own config classes define (tests/data/export/*_keys.txt, read
from their code at the commits solver/profiles/ cites), fill every field those classes
require, and carry the plan's layout, batch and recipe."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from meshplan.solver import PlanRequest, plan
from meshplan.solver.schema import ModelSpec, ParallelConfig, TrainingSpec
from meshplan.tools.export.emit import emit

DATA = Path(__file__).parent / "data" / "export"


def _names(file: str) -> frozenset[str]:
    lines = (DATA / file).read_text().splitlines()
    return frozenset(x for x in lines if x and not x.startswith("#"))


LLM_FOUNDRY_KEYS = _names("llm_foundry_keys.txt")
NANOTRON_KEYS = _names("nanotron_keys.txt")
# TrainConfig's fields without a default (llmfoundry/utils/config_utils.py), less those
# update_batch_size_info fills from global_train_batch_size and the GPU count
LLM_FOUNDRY_REQUIRED = {
    "model",
    "tokenizer",
    "optimizer",
    "scheduler",
    "train_loader",
    "device_eval_batch_size",
    "max_duration",
    "max_seq_len",
}


def paths(d: object, prefix: str = "") -> set[str]:
    """Every key path of a parsed YAML document (a list's items under the list's path)."""
    out: set[str] = set()
    if isinstance(d, dict):
        for k, v in d.items():
            p = f"{prefix}{k}"
            out.add(p)
            out |= paths(v, p + ".")
    elif isinstance(d, list):
        for item in d:
            out |= paths(item, prefix)
    return out


def unknown(found: set[str], known: frozenset[str]) -> set[str]:
    wild = tuple(k[:-1] for k in known if k.endswith(".*"))
    return {p for p in found if p not in known and not p.startswith(wild)}


def _plan(framework: str, model: str, gpus: int, **training: object) -> tuple[object, ...]:
    req = PlanRequest.model_validate(
        {
            "model": {"preset": model},
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": gpus},
            "training": {"framework": framework, "seq_len": 4096, **training},
            "options": {"time_limit_s": 20},
        }
    )
    res = plan(req)
    assert res.config is not None, res.explanation
    return res.config, req.model, req.training, res.performance.global_batch_tokens


@pytest.mark.parametrize(
    ("model", "gpus", "training"),
    [
        ("llama3-8b", 16, {"global_batch_tokens": 4096 * 64}),
        ("llama3-70b", 64, {"global_batch_tokens": 4096 * 256}),
        ("llama3-8b", 8, {"precision": "FP8", "loss_kernel": "EAGER_FP32"}),
    ],
)
def test_llm_foundry_yaml_is_llm_foundrys_train_config(
    model: str, gpus: int, training: dict
) -> None:
    c, m, t, tokens = _plan("LLM_FOUNDRY", model, gpus, **training)
    text = emit(None, c, m, t, tokens)
    doc = yaml.safe_load(text)
    assert not unknown(paths(doc), LLM_FOUNDRY_KEYS), unknown(paths(doc), LLM_FOUNDRY_KEYS)
    assert doc.keys() >= LLM_FOUNDRY_REQUIRED
    assert doc["global_train_batch_size"] * t.seq_len == tokens
    assert doc["device_train_microbatch_size"] == c.micro_batch_size
    fsdp = doc["fsdp_config"]
    want = {0: "NO_SHARD", 2: "SHARD_GRAD_OP", 3: "FULL_SHARD"}[c.zero_stage]
    assert fsdp["sharding_strategy"] == want
    assert fsdp["activation_checkpointing"] == (c.recompute.value == "FULL")
    assert doc["model"]["n_layers"] > 0 and doc["model"]["attn_config"]["attn_impl"] == "flash"
    fp8 = t.precision.value == "FP8"
    assert doc["precision"] == ("amp_fp8" if fp8 else "amp_bf16")
    assert doc["model"]["loss_fn"] == (
        "torch_crossentropy" if t.loss_kernel else "fused_crossentropy"
    )
    assert isinstance(doc["optimizer"]["eps"], float)  # YAML 1.1 floats need a dot


@pytest.mark.parametrize(
    ("model", "gpus", "training"),
    [
        ("llama3-8b", 16, {"global_batch_tokens": 4096 * 64}),
        ("llama3-70b", 64, {"global_batch_tokens": 4096 * 256, "grad_dtype": "BF16"}),
    ],
)
def test_nanotron_yaml_is_nanotrons_config(model: str, gpus: int, training: dict) -> None:
    c, m, t, tokens = _plan("NANOTRON", model, gpus, **training)
    doc = yaml.safe_load(emit(None, c, m, t, tokens))
    assert not unknown(paths(doc), NANOTRON_KEYS), unknown(paths(doc), NANOTRON_KEYS)
    par = doc["parallelism"]
    assert (par["dp"], par["tp"], par["pp"]) == (c.dp, c.tp, c.pp)
    assert par["tp_mode"] == (
        "REDUCE_SCATTER" if c.sequence_parallel and c.tp > 1 else "ALL_REDUCE"
    )
    tok = doc["tokens"]
    assert tok["micro_batch_size"] == c.micro_batch_size
    assert tok["batch_accumulation_per_replica"] == c.num_microbatches
    assert tok["sequence_length"] == t.seq_len
    opt = doc["optimizer"]
    assert opt["zero_stage"] == c.zero_stage
    assert opt["accumulate_grad_in_fp32"] == (t.grad_dtype is None)
    assert doc["model"]["model_config"]["num_hidden_layers"] == 32 if "8b" in model else 80


@pytest.mark.parametrize(
    ("zero", "dp", "grads", "warned"),
    [(1, 8, None, True), (0, 8, None, False), (1, 8, "BF16", False)],
)
def test_nanotron_yaml_says_which_versions_run_zero1_over_fp32_grads(
    zero: int, dp: int, grads: str | None, warned: bool
) -> None:
    # nanotron @ 7bc9923 on wraps dp > 1 in DDP, whose fp32 hook raises under ZeRO
    c = ParallelConfig(tp=1, pp=1, dp=dp, micro_batch_size=1, num_microbatches=1, zero_stage=zero)
    t = TrainingSpec(framework="NANOTRON", grad_dtype=grads)
    text = emit("nanotron", c, ModelSpec(preset="llama3-8b"), t, dp * 8192)
    assert ("runs on nanotron before 7bc9923" in text) is warned
    yaml.safe_load(text)  # the note is a comment


def test_yaml_exports_refuse_what_the_framework_cannot_say() -> None:
    c = ParallelConfig(tp=1, pp=1, dp=8, micro_batch_size=1, num_microbatches=1, zero_stage=1)
    gpt = ModelSpec(preset="gpt3-175b")  # GELU MLP: not a Llama
    with pytest.raises(ValueError, match="nanotron cannot express this plan: .*gated"):
        emit("nanotron", c, gpt, TrainingSpec(framework="NANOTRON"), 8 * 8192)
    with pytest.raises(
        ValueError,
        match="runs zero_stage 0 .NO_SHARD. or 2 .SHARD_GRAD_OP. or 3 .FULL_SHARD.* not zero_stage 1",
    ):
        emit("llm_foundry", c, gpt, TrainingSpec(framework="LLM_FOUNDRY"), 8 * 8192)
    with pytest.raises(ValueError, match="loss_fn"):
        emit(
            "llm_foundry",
            c.model_copy(update={"zero_stage": 3}),
            gpt,
            TrainingSpec(framework="LLM_FOUNDRY", loss_kernel="CHUNKED"),
            8 * 8192,
        )
