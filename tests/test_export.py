"""meshplan.tools.export: every snippet parses with its format's own parser and carries the plan."""

from __future__ import annotations

import json
import math
import re
import shlex
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshplan.solver.schema import ModelSpec, ParallelConfig, Precision, Recompute, TrainingSpec
from meshplan.tools.export import KINDS, emit
from meshplan.tools.hf_config import load_hf_config

DATA = Path(__file__).parent / "data" / "hf"

# Argument names defined in NVIDIA/Megatron-LM megatron/training/arguments.py (the groups
# network size, training, mixed precision, distributed, data, tokenizer, moe, transformer
# engine), copied from the add_argument calls.
MEGATRON_FLAGS = frozenset(
    """
    --num-layers --encoder-num-layers --decoder-num-layers --hidden-size --ffn-hidden-size
    --num-attention-heads --attention-backend --kv-channels --group-query-attention
    --num-query-groups --window-size --max-position-embeddings --position-embedding-type
    --use-rotary-position-embeddings --rotary-base --rotary-percent --rotary-interleaved
    --use-rope-scaling --rope-scaling-factor --no-position-embedding
    --make-vocab-size-divisible-by --normalization --norm-epsilon --apply-layernorm-1p
    --openai-gelu --squared-relu --swiglu --untie-embeddings-and-output-weights
    --multi-latent-attention --mtp-num-layers --qk-layernorm
    --micro-batch-size --batch-size --global-batch-size --rampup-batch-size
    --recompute-activations --recompute-granularity --distribute-saved-activations
    --recompute-method --recompute-num-layers --recompute-modules --cpu-offloading-num-layers
    --tp-comm-overlap --train-iters --train-samples --log-interval --disable-bias-linear
    --add-qkv-bias --optimizer --sequence-parallel --use-legacy-models --use-flash-attn
    --cross-entropy-loss-fusion --seed --init-method-std --lr --min-lr --lr-decay-style
    --lr-warmup-iters --save --load --save-interval --ckpt-format
    --fp16 --bf16 --grad-reduce-in-bf16 --loss-scale --accumulate-allreduce-grads-in-fp32
    --attention-softmax-in-fp32
    --tensor-model-parallel-size --pipeline-model-parallel-size
    --decoder-first-pipeline-num-layers --decoder-last-pipeline-num-layers
    --pipeline-model-parallel-layout --num-layers-per-virtual-pipeline-stage
    --num-virtual-stages-per-pipeline-rank --microbatch-group-size-per-virtual-pipeline-stage
    --no-overlap-p2p-communication --distributed-backend --distributed-timeout-minutes
    --overlap-grad-reduce --overlap-param-gather --use-distributed-optimizer
    --use-megatron-fsdp --data-parallel-sharding-strategy --num-distributed-optimizer-instances
    --use-torch-fsdp2 --torch-fsdp2-no-reshard-after-forward --context-parallel-size
    --cp-comm-type --hierarchical-context-parallel-sizes
    --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split
    --vocab-size --tokenizer-type --tokenizer-model --vocab-file --merge-file
    --data-path --split --seq-length --mock-data --num-workers
    --expert-model-parallel-size --expert-tensor-parallel-size --num-experts --moe-layer-freq
    --moe-ffn-hidden-size --moe-shared-expert-intermediate-size --moe-shared-expert-overlap
    --moe-grouped-gemm --moe-router-load-balancing-type --moe-router-score-function
    --moe-router-topk --moe-router-pre-softmax --moe-router-num-groups --moe-router-group-topk
    --moe-router-topk-scaling-factor --moe-router-enable-expert-bias
    --fp8-format --fp8-recipe --fp8-margin --fp8-amax-history-len --fp8-amax-compute-algo
    --transformer-impl --fp8-param-gather
    """.split()  # noqa: SIM905 (a word list reads better than 130 quoted strings)
)


def megatron_args(text: str) -> dict[str, str | bool]:
    """Parse the snippet as a shell would (line continuations, comments) into flag -> value."""
    tokens = shlex.split(text.replace("\\\n", " "), comments=True)
    out: dict[str, str | bool] = {}
    for i, tok in enumerate(tokens):
        assert tok.startswith("--") or tokens[i - 1].startswith("--"), tok
        if tok.startswith("--"):
            nxt = tokens[i + 1] if i + 1 < len(tokens) else "--"
            out[tok] = True if nxt.startswith("--") else nxt
    return out


def parse(kind: str, text: str) -> dict:
    if kind == "megatron":
        args = megatron_args(text)
        unknown = set(args) - MEGATRON_FLAGS
        unknown |= set(re.findall(r"--[a-z0-9][a-z0-9-]*", text)) - MEGATRON_FLAGS  # in notes too
        assert not unknown, f"not Megatron-LM arguments: {sorted(unknown)}"
        return args
    if kind == "deepspeed":
        return json.loads(text)
    return tomllib.loads(text)


def model(stem: str) -> ModelSpec:
    return load_hf_config(DATA / f"{stem}.json")


def run_all(c: ParallelConfig, m: ModelSpec, t: TrainingSpec) -> dict[str, tuple[dict, str]]:
    tokens = c.dp * c.micro_batch_size * c.num_microbatches * t.seq_len
    out = {}
    for kind in KINDS:
        text = emit(kind, c, m, t, tokens)
        out[kind] = (parse(kind, text), text)
    return out


def notes(kind: str, text: str, parsed: dict) -> str:
    return " ".join(parsed["_meshplan_note"]) if kind == "deepspeed" else text


# --- dense, pp with interleaving ------------------------------------------------------------

DENSE_PP = ParallelConfig(
    tp=8,
    pp=4,
    dp=4,
    virtual_stages=5,
    micro_batch_size=1,
    num_microbatches=16,
    zero_stage=1,
    recompute=Recompute.SELECTIVE,
)


def test_dense_pp_interleaved() -> None:
    r = run_all(DENSE_PP, model("llama2_70b"), TrainingSpec(seq_len=4096))
    meg = r["megatron"][0]
    assert (
        meg["--tensor-model-parallel-size"] == "8" and meg["--pipeline-model-parallel-size"] == "4"
    )
    assert meg["--num-layers-per-virtual-pipeline-stage"] == "4"  # 80 / (4 * 5)
    assert meg["--micro-batch-size"] == "1" and meg["--global-batch-size"] == "64"
    assert meg["--seq-length"] == "4096" and meg["--recompute-granularity"] == "selective"
    assert meg["--sequence-parallel"] is True and meg["--use-distributed-optimizer"] is True
    assert meg["--bf16"] is True and "--fp8-format" not in meg
    assert meg["--num-query-groups"] == "8" and meg["--swiglu"] is True

    tt = r["torchtitan"][0]
    par = tt["parallelism"]
    assert (par["data_parallel_shard_degree"], par["data_parallel_replicate_degree"]) == (4, 1)
    assert (par["tensor_parallel_degree"], par["pipeline_parallel_degree"]) == (8, 4)
    assert par["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert par["pipeline_parallel_layers_per_stage"] == 4
    assert par["pipeline_parallel_microbatch_size"] == 1
    assert tt["training"] == {"local_batch_size": 16, "global_batch_size": 64, "seq_len": 4096}
    assert tt["activation_checkpoint"]["mode"] == "selective"
    assert "ZeRO-1" in r["torchtitan"][1]

    ds, ds_text = r["deepspeed"]
    assert ds["train_batch_size"] == 64 and ds["train_micro_batch_size_per_gpu"] == 1
    assert ds["gradient_accumulation_steps"] == 16 and ds["zero_optimization"]["stage"] == 1
    assert ds["bf16"]["enabled"] is True and ds["tensor_parallel"]["autotp_size"] == 8
    assert "PipelineModule(num_stages=4)" in notes("deepspeed", ds_text, ds)
    assert "virtual_stages=5" in notes("deepspeed", ds_text, ds)

    kf, kf_text = r["kempnerforge"]
    d = kf["distributed"]
    assert (d["dp_shard"], d["dp_replicate"], d["tp"], d["pp"], d["cp"], d["ep"]) == (
        4,
        1,
        8,
        4,
        1,
        1,
    )
    assert kf["train"]["batch_size"] == 1 and kf["train"]["grad_accum_steps"] == 16
    assert kf["train"]["activation_checkpointing"] == "selective"
    assert "virtual_stages=5 not expressible" in kf_text


def test_uneven_interleaving_is_said_not_dropped() -> None:
    c = DENSE_PP.model_copy(update={"tp": 8, "pp": 4, "virtual_stages": 3})
    r = run_all(c, model("llama3_8b"), TrainingSpec(seq_len=4096))  # 32 layers, 12 chunks
    meg, meg_text = r["megatron"]
    assert "--num-layers-per-virtual-pipeline-stage" not in meg
    assert "NOT EXPRESSIBLE" in meg_text and "pp*virtual_stages" in meg_text
    tt, tt_text = r["torchtitan"]
    assert "pipeline_parallel_layers_per_stage" not in tt["parallelism"]
    assert tt["parallelism"]["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert "NOT EXPRESSIBLE" in tt_text


# --- MoE with expert parallelism --------------------------------------------------------------

MOE_EP = ParallelConfig(
    tp=2,
    pp=1,
    dp=16,
    ep=8,
    micro_batch_size=2,
    num_microbatches=4,
    zero_stage=3,
    recompute=Recompute.FULL,
)


def test_moe_with_ep() -> None:
    r = run_all(MOE_EP, model("mixtral_8x7b"), TrainingSpec(seq_len=4096))
    meg, meg_text = r["megatron"]
    assert meg["--expert-model-parallel-size"] == "8" and meg["--num-experts"] == "8"
    assert meg["--moe-router-topk"] == "2" and meg["--moe-ffn-hidden-size"] == "14336"
    assert meg["--recompute-granularity"] == "full" and meg["--recompute-method"] == "uniform"
    assert meg["--recompute-num-layers"] == "1" and meg["--global-batch-size"] == "128"
    assert "ZeRO-3 is not a Megatron concept" in meg_text and "--use-megatron-fsdp" in meg_text

    par = r["torchtitan"][0]["parallelism"]
    assert (par["data_parallel_shard_degree"], par["data_parallel_replicate_degree"]) == (16, 1)
    assert par["expert_parallel_degree"] == 8 and "pipeline_parallel_schedule" not in par
    assert r["torchtitan"][0]["training"]["local_batch_size"] == 2  # pp=1: accumulate 4 steps
    assert r["torchtitan"][0]["activation_checkpoint"]["mode"] == "full"

    ds, ds_text = r["deepspeed"]
    assert ds["zero_optimization"]["stage"] == 3 and ds["gradient_accumulation_steps"] == 4
    assert "ep_size=8" in notes("deepspeed", ds_text, ds)
    assert "ZeRO stages 0-2" in notes("deepspeed", ds_text, ds)  # AutoTP with ZeRO-3

    kf = r["kempnerforge"][0]["distributed"]
    assert (kf["dp_shard"], kf["ep"], kf["tp"]) == (2, 8, 2)  # dp 16 = dp_shard 2 x ep 8


def test_deepseek_dense_layers_and_kempnerforge_rejections() -> None:
    c = ParallelConfig(
        tp=2,
        pp=8,
        dp=64,
        cp=2,
        ep=64,
        micro_batch_size=1,
        num_microbatches=32,
        zero_stage=1,
        recompute=Recompute.FULL,
    )
    r = run_all(c, model("deepseek_v3"), TrainingSpec(seq_len=4096, precision=Precision.FP8))
    meg, meg_text = r["megatron"]
    assert meg["--moe-layer-freq"] == "([0]*3+[1]*58)"
    assert meg["--moe-shared-expert-intermediate-size"] == "2048"
    assert "divisible by pp" in meg_text  # 61 layers on 8 stages
    kf_text = r["kempnerforge"][1]
    assert "rejects MoE with pp > 1" in kf_text and "rejects FP8 with tp > 1" in kf_text
    assert "stub" in kf_text  # cp
    assert r["kempnerforge"][0]["train"]["mixed_precision"] == "fp8"


# --- context parallelism and FP8 --------------------------------------------------------------

CP_FP8 = ParallelConfig(
    tp=1,
    pp=1,
    dp=8,
    cp=4,
    micro_batch_size=1,
    num_microbatches=2,
    zero_stage=0,
    recompute=Recompute.NONE,
    sequence_parallel=False,
)


def test_cp_and_fp8() -> None:
    r = run_all(CP_FP8, model("llama3_8b"), TrainingSpec(seq_len=32768, precision=Precision.FP8))
    meg = r["megatron"][0]
    assert meg["--context-parallel-size"] == "4" and meg["--fp8-format"] == "hybrid"
    assert meg["--bf16"] is True and "--use-distributed-optimizer" not in meg
    assert "--recompute-granularity" not in meg and meg["--global-batch-size"] == "16"

    tt = r["torchtitan"][0]
    par = tt["parallelism"]
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]) == (8, 1)
    assert par["context_parallel_degree"] == 4 and tt["model"]["converters"] == ["float8"]
    assert tt["activation_checkpoint"]["mode"] == "none"

    ds, ds_text = r["deepspeed"]
    assert "tensor_parallel" not in ds and ds["zero_optimization"]["stage"] == 0
    assert "cp=4 not expressible" in notes("deepspeed", ds_text, ds)
    assert "FP8 not expressible" in notes("deepspeed", ds_text, ds)

    kf, kf_text = r["kempnerforge"]
    assert (kf["distributed"]["dp_replicate"], kf["distributed"]["dp_shard"]) == (8, 1)
    assert kf["distributed"]["cp"] == 4 and kf["train"]["mixed_precision"] == "fp8"
    assert "stub" in kf_text and "FP8 with tp" not in kf_text


def test_ep_borrowing_cp_ranks_is_flagged() -> None:
    c = ParallelConfig(tp=1, pp=1, dp=2, cp=4, ep=8, micro_batch_size=1, num_microbatches=1)
    r = run_all(c, model("mixtral_8x7b"), TrainingSpec(seq_len=8192))
    kf, kf_text = r["kempnerforge"]
    assert "NOT EXPRESSIBLE" in kf_text and kf["distributed"]["ep"] == 1
    assert r["torchtitan"][0]["parallelism"]["expert_parallel_degree"] == 8  # 4 <= 8 <= 2*4
    c0 = c.model_copy(update={"zero_stage": 0})  # DDP: shard 1, so ep 8 > 1*cp 4
    assert "cp <= ep <=" in emit("torchtitan", c0, model("mixtral_8x7b"), TrainingSpec(), 16384)


# --- errors -------------------------------------------------------------------------------------


def test_unknown_kind_names_it_and_the_supported_kinds() -> None:
    with pytest.raises(ValueError) as e:
        emit("nemo", DENSE_PP, model("llama3_8b"), TrainingSpec(seq_len=4096), 64 * 4096)
    assert "nemo" in str(e.value) and all(k in str(e.value) for k in KINDS)


def test_inconsistent_global_batch_is_an_error() -> None:
    with pytest.raises(ValueError, match="global_batch_tokens"):
        emit("megatron", DENSE_PP, model("llama3_8b"), TrainingSpec(seq_len=4096), 4096)


# --- every plan parses, and the degrees multiply to the GPU count ----------------------------


@settings(max_examples=150, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 2, 4]),
    dp=st.sampled_from([1, 2, 4, 8]),
    cp=st.sampled_from([1, 2]),
    ep=st.sampled_from([1, 2, 4, 8]),
    v=st.sampled_from([1, 2, 3]),
    mbs=st.integers(1, 4),
    m=st.integers(1, 8),
    zero=st.integers(0, 3),
    rc=st.sampled_from(list(Recompute)),
    prec=st.sampled_from(list(Precision)),
    stem=st.sampled_from(["llama3_8b", "mixtral_8x7b", "deepseek_v3", "gpt2"]),
)
def test_every_snippet_parses(tp, pp, dp, cp, ep, v, mbs, m, zero, rc, prec, stem) -> None:  # noqa: ANN001
    c = ParallelConfig(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        ep=ep,
        virtual_stages=v,
        micro_batch_size=mbs,
        num_microbatches=m,
        zero_stage=zero,
        recompute=rc,
    )
    r = run_all(c, model(stem), TrainingSpec(seq_len=2048, precision=prec))
    gpus, seqs = tp * pp * dp * cp, dp * mbs * m
    par = r["torchtitan"][0]["parallelism"]
    dims = (
        "data_parallel_replicate_degree",
        "data_parallel_shard_degree",
        "tensor_parallel_degree",
        "pipeline_parallel_degree",
        "context_parallel_degree",
    )
    assert math.prod(par[k] for k in dims) == gpus
    assert r["torchtitan"][0]["training"]["global_batch_size"] == seqs
    kf = r["kempnerforge"][0]["distributed"]
    kf_gpus = kf["dp_shard"] * kf["dp_replicate"] * kf["tp"] * kf["pp"] * kf["cp"] * kf["ep"]
    assert kf_gpus == gpus
    assert r["deepspeed"][0]["train_batch_size"] == seqs
    assert r["megatron"][0]["--global-batch-size"] == str(seqs)
