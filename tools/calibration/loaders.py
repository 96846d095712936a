"""Published training runs as the requests the planner would score, with what was measured.

Three files, vendored with their sources: `tools/calibration/published/published_runs.json`
(Narayanan et al. 2021, Korthikanti et al. 2022, torchtitan, MosaicML llm-foundry),
`tools/calibration/published/megatron_h100_runs.json` (Megatron-Core r0.8.0 scaling, NeMo 24.07,
NVIDIA DGX Cloud recipes v25.02.01, the Megatron MoE model zoo) and the KempnerForge scaling
guide's measurements (`tools/calibration/published/kempnerforge_runs.json`). Each run becomes a
`CalibrationRun`: the model, the cluster, the training step (framework profile and the overlaps
the run used), the published layout, and the published speed as tokens/s per GPU (every
source's FLOP convention undone: `CONVERSIONS`). Fields a source does not publish take the
per-source default stated in `DEFAULTS`; each run lists the defaults it used (`assumptions`).
fsdp_runs.json (llm-foundry, nanotron) is loaded by tools/calibration/fsdp.py (`load_fsdp`;
`load_calibration` returns every run: the runs the time constants are fitted on and the fidelity
benchmark scores; `load_all` the other three files). This module loads the first and the last; tools/calibration/megatron.py the second;
tools/calibration/runs.py holds the run model and what the loaders share;
tools/calibration/sources.py the conventions in words.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from meshplan.solver.arch import resolve_model
from meshplan.solver.schema import (
    ClusterSpec,
    Framework,
    LossKernel,
    ModelSpec,
    ParallelConfig,
    Precision,
    Recompute,
    TrainingSpec,
)
from meshplan.tools.calibration.fsdp import load_fsdp
from meshplan.tools.calibration.megatron import load_megatron
from meshplan.tools.calibration.runs import (
    CATEGORIES,
    DATA,
    DEFAULT_FSDP,
    DEFAULT_MEGATRON,
    DEFAULT_PUBLISHED,
    FRAMEWORKS,
    SOURCES,
    CalibrationRun,
    Category,
    Knob,
    _category,
    _gpt_flops_hfu,
    _gpt_flops_mfu,
    _gpu,
    _recompute,
    megatron_flops_per_token,
    micro_batch,
)
from meshplan.tools.calibration.sources import CONVERSIONS, DEFAULTS

__all__ = [
    "CATEGORIES",
    "CONVERSIONS",
    "DATA",
    "DEFAULTS",
    "DEFAULT_FSDP",
    "DEFAULT_MEGATRON",
    "DEFAULT_PUBLISHED",
    "FRAMEWORKS",
    "SOURCES",
    "CalibrationRun",
    "Category",
    "load_all",
    "load_calibration",
    "load_fsdp",
    "load_kempnerforge",
    "load_megatron",
    "load_published",
    "megatron_flops_per_token",
]


def _published_source(rec: dict[str, Any]) -> str:
    for s in ("narayanan2021", "korthikanti2022", "torchtitan", "mosaicml"):
        if rec["id"].startswith(s.rstrip("0123456789")):
            return s
    raise ValueError(f"unknown source for run {rec['id']}")


# torchtitan compiles its loss with the model since bbb1b61 (2025-04-02: components/loss.py
# build_cross_entropy_loss, torch.compile(loss_fn) under training.compile); at 9dec370 (the
# Dec 2024 benchmarks) train.py left it eager. Benchmarks whose command line compiles, where the
# record's id and notes do not say so (the Trainy doc's `--training.compile`):
COMPILED_BY_COMMAND = ("benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md",)


def _compiled(src: str, rec: dict[str, Any]) -> bool:
    """A torchtitan run whose blocks run under torch.compile (its record or command says so)."""
    said = f"{rec['id']} {rec['parallel']['notes'] or ''}".lower()
    compiled = "compile" in said or rec["source"].get("path") in COMPILED_BY_COMMAND
    return src == "torchtitan" and compiled


def _loss_kernel(src: str, rec: dict[str, Any]) -> LossKernel | None:
    """LossKernel.COMPILED for a torchtitan run that compiles its loss, else None (the
    profile's)."""
    if _compiled(src, rec) and "9dec370" not in rec["framework"]:
        return LossKernel.COMPILED
    return None


def _run_from_published(rec: dict[str, Any]) -> CalibrationRun:
    src = _published_source(rec)
    m, hw, par, meas = rec["model"], rec["hardware"], rec["parallel"], rec["measured"]
    used: list[str] = []
    gpus = hw["num_gpus"]
    gpt = src in ("narayanan2021", "korthikanti2022", "mosaicml")
    vocab = m["vocab"]
    if vocab is None:
        vocab = 51200
        used.append("vocabulary 51,200")
    ffn = m["ffn_hidden"] or 4 * m["hidden"]
    kv = m["kv_heads"] or m["heads"]
    if m["ffn_hidden"] is None or m["kv_heads"] is None:
        used.append("ffn 4h, MHA")
    seq = m["seq_len"]
    if seq is None:
        seq = 8192
        used.append("seq_len 8192")
    model = ModelSpec(
        num_layers=m["layers"],
        hidden_size=m["hidden"],
        num_attention_heads=m["heads"],
        num_kv_heads=kv,
        ffn_hidden_size=ffn,
        vocab_size=vocab,
        gated_mlp=not gpt,
        tie_embeddings=gpt,
    )
    tp, pp = par["tp"] or 1, par["pp"] or 1
    cp = par["cp"] or 1
    dp = par["dp"] or gpus // (tp * pp * cp)
    seqs = par["global_batch_seqs"]
    if seqs is None:
        seqs = gpus
        used.append("one sequence per GPU")
    unstated: list[Knob] = []
    local = micro_batch(par["micro_batch"], used, unstated)
    v = par["virtual_pipeline_stages"]
    if v == "interleaved":
        v = 2  # torchtitan @ 9dec370 pipelining_utils.generate_split_points: 2 stages per rank
        used.append("interleaved = 2 chunks per stage")
    elif v is None and src == "narayanan2021" and pp > 2:
        unstated.append("virtual_stages")  # the paper's interleaved schedule needs pp > 2
    v = v or 1
    if src == "torchtitan" and pp > 1:
        # 'local batch' per DP rank, split into pp micro-batches (torchtitan's default count)
        b, M = local // pp, pp
        used.append(f"local batch {local} split into {pp} micro-batches")
    else:
        b = local
        M = par["grad_accum"] or seqs // (dp * b)
    if dp * b * M != seqs:
        raise ValueError(f"{rec['id']}: dp*b*M = {dp * b * M} != global batch {seqs}")
    default_r = Recompute.FULL if src == "narayanan2021" else Recompute.NONE
    r = _recompute(par["recompute"], default_r)
    if par["recompute"] is None:
        used.append(f"recompute {r.value.lower()}")
    zero = par["zero_stage"]
    if zero is None:
        zero = 3 if par.get("fsdp") else 0
        used.append(f"ZeRO {zero}")
    if src == "torchtitan" and pp > 1 and zero == 3:
        # FSDP2 under PP: reshard_after_forward=False and gradient sync on the last micro-batch
        # only, so weights and gradients stay unsharded through the step (one all-gather and
        # one reduce-scatter per step): ZeRO-1's memory and traffic in the planner's terms.
        zero = 1
        used.append("FSDP2 with PP scored as ZeRO-1 (weights gathered for the whole step)")
    sp_on = bool(par["sequence_parallel"]) or (src == "torchtitan" and tp > 1)
    prec = Precision.FP8 if "FP8" in rec["precision"].upper() else Precision.BF16
    megatron = FRAMEWORKS[src] is Framework.MEGATRON
    training = TrainingSpec(
        seq_len=seq,
        global_batch_tokens=seqs * seq,
        precision=prec,
        framework=FRAMEWORKS[src],
        tp_comm_overlap="asynctp" in (rec["id"] + (par["notes"] or "")).lower(),
        dp_comm_overlap=not megatron,  # Megatron-LM 2021-22 all-reduced after the backward
        fused_attention=not megatron,  # before FlashAttention (Dao et al., May 2022)
        loss_kernel=_loss_kernel(src, rec),
        compiled=_compiled(src, rec) or None,
    )
    config = ParallelConfig(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        virtual_stages=v,
        micro_batch_size=b,
        num_microbatches=M,
        zero_stage=zero,
        recompute=r,
        sequence_parallel=sp_on and tp > 1,
    )
    A = resolve_model(model)
    peak = 312e12 if "A100" in hw["gpu"] else 989e12  # calibration README: dense BF16 peaks
    source_mfu = meas.get("mfu") or meas.get("hfu")
    if src == "narayanan2021":
        tps = meas["tflops_per_gpu"] * 1e12 / _gpt_flops_hfu(A, seq)
        published = f"{meas['tflops_per_gpu']} TFLOP/s per GPU, {meas['hfu']:.0%} of peak (HFU)"
    elif src == "korthikanti2022" and meas.get("iteration_time_s"):
        t = meas["iteration_time_s"]
        tps = seqs * seq / t / gpus
        published = f"iteration time {t} s" + (f", MFU {meas['mfu']:.1%}" if meas["mfu"] else "")
    elif src == "korthikanti2022":
        tps = meas["mfu"] * peak / _gpt_flops_mfu(A, seq)
        published = f"MFU {meas['mfu']:.1%}"
    elif src == "mosaicml":
        tps = meas["tokens_per_sec"] / gpus
        published = f"{meas['tokens_per_sec']:,} tokens/s, MFU {meas['mfu']:.2%}"
    else:
        tps = meas["tokens_per_sec_per_gpu"]
        published = f"{tps:,} tokens/s per GPU"
    mem = meas.get("memory_gb")
    return CalibrationRun(
        id=rec["id"],
        source=src,
        category=_category(False, prec),
        citation=f"{rec['source']['title']}, {rec['source']['location']}",
        model=model,
        cluster=ClusterSpec(gpu=_gpu(hw["gpu"]), num_gpus=gpus, gpus_per_node=hw["gpus_per_node"]),
        training=training,
        config=config,
        memory_precision=Precision.BF16,
        tokens_per_s_per_gpu=tps,
        published=published,
        source_mfu=source_mfu,
        memory_gib=mem,
        memory_basis="reserved" if mem is not None else None,
        # torchtitan @ 9dec370 models/llama/model.py: repeat_kv before F.scaled_dot_product_attention
        kv_repeated="torchtitan 9dec370" in rec["framework"],
        assumptions=used,
        unstated=tuple(unstated),
        even_layers=megatron,  # Megatron-LM 2021-22: layers split evenly over pp·v
    )


def load_published(path: Path | str = DEFAULT_PUBLISHED) -> list[CalibrationRun]:
    """The 48 records of published_runs.json as runs (every record is usable)."""
    records = json.loads(Path(path).read_text(encoding="utf-8"))
    return [_run_from_published(r) for r in records]


def _kempnerforge_raw() -> dict[str, Any]:
    path = "published/kempnerforge_runs.json"
    text = resources.files("meshplan.tools.calibration").joinpath(path).read_text("utf-8")
    return json.loads(text)


def load_kempnerforge() -> list[CalibrationRun]:
    """The KempnerForge scaling guide's measurements (tools/calibration/published/kempnerforge_runs.json)."""
    data = _kempnerforge_raw()
    c = data["common"]
    out = []
    for r in data["runs"]:
        model = ModelSpec(preset=r["model"])
        A = resolve_model(model)
        seq, gpus = c["seq_len"], r["num_gpus"]
        if r["tokens_per_s"] is not None:
            tps = r["tokens_per_s"] / gpus
            published = f"{r['tokens_per_s']:,} tok/s, MFU {r['mfu']:.1%}"
        else:
            # KempnerForge report: 6·N_total (both embeddings) + 12·L·h·s per token, peak 989
            flops = 6 * A.total_params + 12 * A.L * A.h * seq
            tps = r["mfu"] * 989e12 / flops
            published = f"MFU {r['mfu']:.1%}"
        M = r["grad_accum"]
        prec = Precision(c["precision"])
        out.append(
            CalibrationRun(
                id=r["id"],
                source="kempnerforge",
                category=_category(A.is_moe, prec),
                citation=f'{data["source"]["title"]}: "{r["quote"]}"',
                model=model,
                cluster=ClusterSpec(gpu=c["gpu"], num_gpus=gpus, gpus_per_node=c["gpus_per_node"]),
                training=TrainingSpec(
                    seq_len=seq,
                    global_batch_tokens=r["dp"] * r["micro_batch"] * M * seq,
                    precision=prec,
                    framework=Framework(c["framework"]),
                    tp_comm_overlap=False,
                    dp_comm_overlap=True,
                    # mfu_bench.sh passes --train.compile_model=true to every run but 08
                    # (KempnerForge @ 5666d0d benchmarks/mfu_scaling/mfu_bench.sh; the report:
                    # "except experiment 08 which used compile=false"); the record's note
                    compiled="compile off" not in (r.get("note") or ""),
                ),
                config=ParallelConfig(
                    tp=r["tp"],
                    pp=c["pp"],
                    dp=r["dp"],
                    micro_batch_size=r["micro_batch"],
                    num_microbatches=M,
                    # nothing to shard over one data-parallel rank: FSDP2 over dp 1 is ZeRO-0
                    zero_stage=c["zero_stage"] if r["dp"] > 1 else 0,
                    recompute=Recompute(c["recompute"]),
                    sequence_parallel=r["tp"] > 1,
                ),
                memory_precision=prec,
                tokens_per_s_per_gpu=tps,
                published=published,
                source_mfu=r["mfu"],
                memory_gib=r["memory_gib"],
                memory_basis="allocated" if r["memory_gib"] is not None else None,
            )
        )
    return out


def load_all(
    published: Path | str | None = DEFAULT_PUBLISHED,
    megatron: Path | str | None = DEFAULT_MEGATRON,
) -> list[CalibrationRun]:
    """Every calibration run: published_runs.json, megatron_h100_runs.json and the KempnerForge
    guide's (a file passed as None is skipped)."""
    runs = load_published(published) if published is not None else []
    runs += load_megatron(megatron) if megatron is not None else []
    return runs + load_kempnerforge()


def load_calibration() -> list[CalibrationRun]:
    """Every vendored run: `load_all`'s and fsdp_runs.json's (llm-foundry, nanotron)."""
    return load_all() + load_fsdp()
