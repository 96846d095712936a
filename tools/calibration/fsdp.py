"""fsdp_runs.json: MosaicML llm-foundry's benchmark tables (Composer, PyTorch FSDP1) and the
nanotron v0.5 benchmark sweep, as calibration runs under the LLM_FOUNDRY and NANOTRON profiles
(tools/calibration/published/README.md says what each table holds)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from meshplan.solver.arch import resolve_model
from meshplan.solver.schema import (
    ClusterSpec,
    ModelSpec,
    ParallelConfig,
    Precision,
    Recompute,
    TrainingSpec,
)
from meshplan.tools.calibration.runs import (
    DEFAULT_FSDP,
    FRAMEWORKS,
    CalibrationRun,
    _category,
)

# nanotron's scaling_benchmarks.py ties the embeddings when the MLP is narrower than 10,000
# (huggingface/nanotron @ 2411b02 scripts/scaling_benchmarks.py: tie_word_embeddings)
NANOTRON_TIED_BELOW = 10_000


def _source(rec: dict[str, Any]) -> str:
    fw = rec["framework"].lower()
    if "llm-foundry" in fw:
        return "llmfoundry"
    if "nanotron" in fw:
        return "nanotron"
    raise ValueError(f"unknown source for run {rec['id']}")


def _gpu(rec: dict[str, Any]) -> str:
    gpu = rec["hardware"]["gpu"].upper()
    if "A100" in gpu:
        return "a100-sxm-40gb" if "40" in gpu else "a100-sxm-80gb"
    if "H100" in gpu:
        return "h100-sxm-80gb"  # nanotron's 'hopper-prod' H100s: the 80 GB SXM part
    raise ValueError(f"{rec['id']}: no catalog GPU for {rec['hardware']['gpu']!r}")


def _run(rec: dict[str, Any]) -> CalibrationRun:
    src = _source(rec)
    m, hw, par, meas = rec["model"], rec["hardware"], rec["parallel"], rec["measured"]
    llmf = src == "llmfoundry"
    used: list[str] = []
    tied = llmf or m["ffn_hidden"] < NANOTRON_TIED_BELOW
    model = ModelSpec(
        num_layers=m["layers"],
        hidden_size=m["hidden"],
        num_attention_heads=m["heads"],
        num_kv_heads=m["kv_heads"] or m["heads"],
        ffn_hidden_size=m["ffn_hidden"],
        vocab_size=m["vocab"],
        gated_mlp=not llmf,  # MPT: GELU MLP (expansion_ratio 4); nanotron: Llama's SwiGLU
        tie_embeddings=tied,
    )
    if llmf:
        used.append("MPT's learned positional embedding (seq_len x d_model) not counted")
    gpus, seq = hw["num_gpus"], m["seq_len"]
    tp, pp = par["tp"] or 1, par["pp"] or 1
    dp = par["dp"] or gpus // (tp * pp)
    b = par["micro_batch"]
    per_replica = par["global_batch_seqs"] // dp
    M = -(-per_replica // b)  # llm-foundry: micro-batches need not divide the global batch
    if b * M != per_replica:
        used.append(
            f"{per_replica} sequences per GPU in {M} micro-batches of {b} (the last one "
            "smaller): scored as full micro-batches"
        )
    text = (par["recompute"] or "none").lower()
    r = Recompute.FULL if text.startswith("full") else Recompute.NONE
    zero = par["zero_stage"]
    if dp == 1:
        zero = 0
    notes = par.get("notes") or ""
    if "mixed_precision DEFAULT" in notes:
        used.append(
            "FSDP mixed_precision DEFAULT (fp32 gathered parameters, bf16 reduction) scored "
            "with bf16 gathers and an fp32 reduction"
        )
    training = TrainingSpec(
        seq_len=seq,
        global_batch_tokens=dp * b * M * seq,
        precision=Precision.BF16,
        framework=FRAMEWORKS[src],
        # Composer's mixed_precision PURE reduces gradients in bf16 (composer @ 1b7ba47
        # composer/distributed/mosaic_parallelism.py get_mixed_precision)
        grad_reduce_in_bf16="mixed_precision PURE" in notes,
        # nanotron's sweep runs tp_mode REDUCE_SCATTER with tp_linear_async_communication
        # (huggingface/nanotron @ 2411b02 scripts/scaling_benchmarks.py create_config)
        tp_comm_overlap=True if src == "nanotron" else None,
    )
    config = ParallelConfig(
        tp=tp,
        pp=pp,
        dp=dp,
        micro_batch_size=b,
        num_microbatches=M,
        zero_stage=zero,
        recompute=r,
        sequence_parallel=tp > 1,  # nanotron's tp_mode REDUCE_SCATTER
    )
    A = resolve_model(model)
    flops = A.model_flops_per_token(seq)
    peak = 312e12 if "A100" in hw["gpu"] else 989e12
    if meas.get("tokens_per_sec"):
        tps = meas["tokens_per_sec"] / gpus
        published = f"{meas['tokens_per_sec']:,} tokens/s, MFU {meas['mfu']:.2%}"
    else:
        # nanotron prints MFU only (model FLOPs with the LM head, no causal halving: ours)
        tps = meas["mfu"] * peak / flops
        published = f"MFU {meas['mfu']:.1%}"
    mem = meas.get("memory_gb")
    if mem is not None:
        used.append(
            "peak memory read as GiB of max_memory_reserved: the sweep's CSV holds 'Mem Alloc "
            "(GB)' and 'Mem Res (GB)' (GiB) written at step 3, after log_memory reset the peaks "
            "that followed train_batch_iter, so only the reserved figure holds the activations "
            "(nanotron @ e24d248 trainer.py training_step, helpers.py create_table_log)"
        )
    src_title = rec["source"]
    return CalibrationRun(
        id=rec["id"],
        source=src,
        category=_category(False, Precision.BF16),
        citation=f"{src_title['title']}, {src_title['location']}",
        model=model,
        cluster=ClusterSpec(gpu=_gpu(rec), num_gpus=gpus, gpus_per_node=hw["gpus_per_node"]),
        training=training,
        config=config,
        memory_precision=Precision.BF16,
        tokens_per_s_per_gpu=tps,
        published=published,
        source_mfu=meas.get("mfu"),
        memory_gib=mem,
        memory_basis="reserved" if mem is not None else None,
        # nanotron @ 2411b02 helpers.py log_throughput: world rank 0 (first pipeline stage, tp
        # rank 0) writes its own torch.cuda.max_memory_* to the benchmark CSV
        memory_stage="first",
        assumptions=used,
        # the A100-40GB table predates torch 2.1's early-stopping checkpoint: its sweep ran
        # mosaicml/pytorch:1.13.1 (llm-foundry @ 33aeb79 scripts/train/benchmarking/sweep.sh
        # IMAGE), and b2a43a1 kept the table, adding a column; the A100-80GB and H100 tables
        # were rerun at b2a43a1 on mosaicml/pytorch:2.1.0 (sweep.sh IMAGE there)
        recompute_stops_early=False if (llmf and _gpu(rec) == "a100-sxm-40gb") else None,
    )


def load_fsdp(path: Path | str = DEFAULT_FSDP) -> list[CalibrationRun]:
    """The 151 records of fsdp_runs.json as runs (137 llm-foundry layouts, 14 nanotron)."""
    records = json.loads(Path(path).read_text(encoding="utf-8"))
    return [_run(r) for r in records]
