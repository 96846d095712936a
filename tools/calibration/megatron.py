"""megatron_h100_runs.json: Megatron-Core r0.8.0 scaling, NeMo 24.07, NVIDIA DGX Cloud recipes
v25.02.01 and the Megatron MoE model zoo, on H100, as calibration runs (defaults in
tools/calibration/sources.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from meshplan.solver.arch import resolve_model
from meshplan.solver.schema import (
    ClusterSpec,
    ModelSpec,
    MoESpec,
    ParallelConfig,
    Precision,
    Recompute,
    TrainingSpec,
)
from meshplan.tools.calibration.runs import (
    DEFAULT_MEGATRON,
    FRAMEWORKS,
    CalibrationRun,
    Knob,
    _category,
    _recompute,
    megatron_flops_per_token,
    micro_batch,
)

# head_dim where it differs from hidden/heads.
HEAD_DIMS = {"Qwen3-235B-A22B": 128}  # HF Qwen/Qwen3-235B-A22B config.json; zoo --kv-channels


def _megatron_source(rid: str) -> str:
    for prefix, src in (
        ("mcore_r080", "mcore_r080"),
        ("nemo2407", "nemo2407"),
        ("dgxc_2502", "dgxc2502"),
        ("mcore_moezoo", "moezoo"),
    ):
        if rid.startswith(prefix):
            return src
    raise ValueError(f"unknown source for run {rid}")


def _run_from_megatron(rec: dict[str, Any]) -> CalibrationRun:
    rid = rec["id"]
    src = _megatron_source(rid)
    m, hw, par, meas = rec["model"], rec["hardware"], rec["parallel"], rec["measured"]
    used: list[str] = []
    name = m["name"]
    low = name.lower()
    gated = any(k in low for k in ("llama", "qwen", "grok"))
    gpt = "gpt" in low
    vocab = m["vocab"]
    if vocab is None:
        vocab = 51200
        used.append("vocabulary 51,200 (GPT-2 BPE padded)")
    if m["ffn_hidden"] is None or m["kv_heads"] is None:
        used.append("ffn 4h, multi-head attention")
    moe = m["moe"]
    model = ModelSpec(
        num_layers=m["layers"],
        hidden_size=m["hidden"],
        num_attention_heads=m["heads"],
        num_kv_heads=m["kv_heads"] or m["heads"],
        ffn_hidden_size=m["ffn_hidden"] or 4 * m["hidden"],
        vocab_size=vocab,
        gated_mlp=gated,
        tie_embeddings=gpt,
        head_dim=HEAD_DIMS.get(name),
        moe=(
            MoESpec(
                num_experts=moe["experts"],
                top_k=moe["top_k"],
                expert_ffn_hidden_size=moe["expert_ffn_hidden"],
                num_shared_experts=moe["shared_experts"] or 0,
            )
            if moe
            else None
        ),
    )
    gpus = hw["num_gpus"]
    tp, pp = par["tp"], par["pp"]
    if tp is None or pp is None:  # Megatron-Core strong scaling: the 177B weak row's shape
        tp, pp = 8, 6
        used.append("tp 8, pp 6 (the 177B weak-scaling row)")
    cp = par["cp"] or 1
    dp = par["dp"] or gpus // (tp * pp * cp)
    ep = par["ep"] or 1
    unstated: list[Knob] = []
    b = micro_batch(par["micro_batch"], used, unstated)
    seqs = par["global_batch_seqs"]
    M = seqs // (dp * b)
    if dp * b * M != seqs or (par["grad_accum"] and par["grad_accum"] != M):
        raise ValueError(f"{rid}: dp*b*M = {dp * b * M} != global batch {seqs}")
    v = par["virtual_pipeline_stages"] or 1
    if par["virtual_pipeline_stages"] is None and pp > 1:
        used.append("no interleaving (Megatron's default: no virtual stages)")
        if src == "mcore_r080":
            unstated.append("virtual_stages")
    r = _recompute(par["recompute"], Recompute.NONE)
    if par["recompute"] is None:
        used.append("no recomputation")
        if src != "dgxc2502":  # the DGX Cloud recipes' YAML sets no activation checkpointing
            unstated.append("recompute")
    zero = 3 if par["fsdp"] else 1  # Megatron's distributed optimizer = ZeRO-1
    prec = (
        Precision.FP8 if rec["precision"] and "FP8" in rec["precision"].upper() else Precision.BF16
    )
    if rec["precision"] is None:
        used.append("BF16")
    # Overlaps as each source configured them (DEFAULTS says where each is stated).
    tp_overlap = tp > 1 and src in ("mcore_r080", "nemo2407", "dgxc2502") and "grok" not in low
    training = TrainingSpec(
        seq_len=m["seq_len"],
        global_batch_tokens=seqs * m["seq_len"],
        precision=prec,
        framework=FRAMEWORKS[src],
        tp_comm_overlap=tp_overlap,
        dp_comm_overlap=True,
        ep_comm_overlap=(ep > 1 and "overlap" in rid) if moe else None,
        ep_dispatch_dedup=("deepep" in (rid + (par["notes"] or "")).lower()) if moe else None,
        # the zoo's runs force-balance the routing; Grok-1's recipe pads to capacity 1.0
        moe_router_force_balance=bool(moe),
        # NeMo's distributed_fused_adam reduces gradients in bf16 (grad_sync_dtype: bf16 in
        # NVIDIA/dgxc-benchmarking @ 0b71cfd llama3.1/llama3.1_*.yaml)
        grad_reduce_in_bf16=src in ("nemo2407", "dgxc2502"),
    )
    config = ParallelConfig(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        ep=ep,
        etp=par["etp"],
        virtual_stages=v,
        micro_batch_size=b,
        num_microbatches=M,
        zero_stage=zero,
        recompute=r,
        sequence_parallel=tp > 1,
    )
    A = resolve_model(model)
    if meas.get("tokens_per_sec_per_gpu"):
        tps = meas["tokens_per_sec_per_gpu"]
        published = f"{tps:,} tokens/s per GPU"
    elif meas.get("iteration_time_s"):
        t = meas["iteration_time_s"]
        tps = seqs * m["seq_len"] / t / gpus
        published = f"step time {t} s, {meas['tflops_per_gpu']} TFLOP/s per GPU (zoo's count)"
    elif meas.get("tflops_per_gpu"):
        tps = meas["tflops_per_gpu"] * 1e12 / megatron_flops_per_token(A, m["seq_len"])
        published = f"{meas['tflops_per_gpu']} TFLOP/s per GPU, MFU {meas['mfu']:.0%}"
    else:
        tps = meas["mfu"] * 989e12 / megatron_flops_per_token(A, m["seq_len"])
        published = f"MFU {meas['mfu']:.0%}"
    source_mfu = meas.get("mfu") or rec["derived"].get("mfu_vs_bf16_dense_peak")
    loc = rec["source"]
    return CalibrationRun(
        id=rid,
        source=src,
        category=_category(moe is not None, prec),
        citation=f"{loc['title']}, {loc['location']} ({loc['repo']} {loc['path']} @ "
        f"{loc['commit'][:7]})",
        model=model,
        cluster=ClusterSpec(gpu="h100-sxm-80gb", num_gpus=gpus, gpus_per_node=8),
        training=training,
        config=config,
        memory_precision=Precision.BF16,
        tokens_per_s_per_gpu=tps,
        published=published,
        source_mfu=source_mfu,
        assumptions=used,
        unstated=tuple(unstated),
        even_layers=src == "mcore_r080",  # r0.8.0: layers divisible by pp (and by pp·v)
    )


def load_megatron(path: Path | str = DEFAULT_MEGATRON) -> list[CalibrationRun]:
    """The 50 records of megatron_h100_runs.json as runs."""
    records = json.loads(Path(path).read_text(encoding="utf-8"))
    return [_run_from_megatron(r) for r in records]
