"""Published training runs as evaluable requests: what the cost model is fitted to and judged on.

Two files: `tools/data/calibration/published_runs.json` (Narayanan et al. 2021, Korthikanti et al.
2022, torchtitan, MosaicML llm-foundry) and seed 001's KempnerForge measurements, transcribed
with their quotes into `tools/data/seed001_runs.json`. Each run becomes the request the
planner would score (model, cluster, training, the published layout) plus what was measured,
converted to the planner's conventions:

- speed as tokens/s per GPU (every source's FLOP convention is undone here, see `CONVERSIONS`),
  and MFU in the planner's convention: (6·N_active without the input embedding + 12·L·h·s) per
  token / (GPUs × dense BF16 peak), no causal halving (solver/arch.py);
- peak memory in GiB per GPU, compared with the tenants alone (`allocated`: KempnerForge's
  max_memory_allocated) or with the tenants plus the fragmentation share of the reserve
  (`reserved`: torchtitan's max_memory_reserved).

Fields a source does not publish get the per-source default stated in `DEFAULTS`; each run lists
the defaults it used. `scripts/fit_constants.py` and `benchmarks/fidelity.py` share this module.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from meshplan.solver.arch import Arch, resolve_model
from meshplan.solver.costmodel import CostModel, Point
from meshplan.solver.costmodel.constants import Constants
from meshplan.solver.hardware import GIB, resolve_cluster
from meshplan.solver.schema import (
    ClusterSpec,
    EvaluateRequest,
    Framework,
    ModelSpec,
    ParallelConfig,
    Precision,
    Recompute,
    SearchSpec,
    TrainingSpec,
)

DEFAULT_PUBLISHED = Path(__file__).resolve().parent / "data" / "calibration" / "published_runs.json"
SOURCES = ("narayanan2021", "korthikanti2022", "torchtitan", "mosaicml", "seed001")

# How each source's published speed becomes tokens/s per GPU (the planner then applies its own
# FLOP convention to that throughput).
CONVERSIONS = {
    "narayanan2021": (
        "Table 1 prints hardware TFLOP/s per GPU by Eq. 3, 96·B·s·l·h²·(1 + s/6h + V/16lh), which "
        "counts the full-recompute forward (HFU). tokens/s/GPU = TFLOP/s / (96·l·h²·(1 + s/6h + "
        "V/16lh)) per token; our MFU ≈ ¾ of the printed % (the logit layer is not recomputed)."
    ),
    "korthikanti2022": (
        "tokens/s/GPU = global batch tokens / iteration time (Table 5) / GPUs; where only MFU is "
        "printed (2,240 GPUs), tokens/s/GPU = MFU × 312e12 / (72·l·h²·(1 + s/6h + V/12lh)), "
        "Korthikanti App. A: the same terms as ours for a GPT, no causal halving."
    ),
    "torchtitan": (
        "tokens/s per GPU as printed; no MFU published. Peak memory is max_memory_reserved "
        "(GiB, max over ranks), compared with the tenants plus the fragmentation allowance."
    ),
    "mosaicml": (
        "tokens/s as printed / GPUs. Their MFU is (6·N_total + 12·L·d·s)/token, no causal "
        "halving (llm-foundry collect_results.py), equal to ours for MPT's tied embeddings."
    ),
    "seed001": (
        "tok/s as printed / GPUs; where only MFU is printed, tokens/s/GPU = MFU × 989e12 / "
        "(6·N_total + 12·L·h·s), N_total with both embeddings (KempnerForge 2026-04-05 report); "
        "our MFU drops the input embedding: 6% (7B) / 4% (13B) / 1.3% (70B) lower. Memory is "
        "max_memory_allocated (GiB), compared with the tenants without any reserve."
    ),
}

DEFAULTS = {
    "narayanan2021": [
        "micro-batch 1 (Table 1 does not print it)",
        "full recomputation (Eq. 3 counts the recompute forward)",
        "ZeRO 0, no sequence parallelism, no interleaving (Megatron-LM, April 2021)",
        "fp16/bf16 mixed precision scored as BF16 (same peak on A100)",
    ],
    "korthikanti2022": [
        "vocabulary 51,200 (GPT-3's, padded; not transcribed)",
        "ZeRO 0 (no distributed optimizer)",
        "2,240-GPU runs: ffn 4h, MHA, micro-batch 1, one sequence per GPU (as in Table 3)",
    ],
    "torchtitan": [
        "seq_len 8192 where not printed (train_config default at the benchmark commits)",
        "pipeline runs: 'local batch' split into pp micro-batches (pipeline_parallel_microbatches "
        "defaults to the stage count); interleaved 1F1B = 2 chunks per stage",
        "ZeRO 3 (FSDP2), sequence parallelism whenever tp > 1",
        "Float8 runs: FP8 matmul rate, BF16 state bytes (Float8Linear keeps no FP8 weights)",
        "FSDP2 with pp > 1 scored as ZeRO-1: torchtitan sets reshard_after_forward=False under "
        "PP and syncs gradients on the last micro-batch, so weights and gradients stay unsharded "
        "through the step (one all-gather, one reduce-scatter per step)",
    ],
    "mosaicml": [
        "GELU MLP (expansion 4) and tied embeddings (MPT)",
        "ZeRO 3 (FULL_SHARD), full recomputation as printed",
    ],
    "seed001": [
        "ZeRO 3 (FSDP2), full activation checkpointing, sequence parallelism with tp > 1",
        "micro-batch x grad-accum and seq_len 4096 from KempnerForge's mfu_bench.sh (NOTES.md)",
        "KempnerForge memory recipe (framework KEMPNERFORGE)",
    ],
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CalibrationRun(_Strict):
    """One published run at its published configuration, with what was measured."""

    id: str = Field(description="Run identifier (the record's id).")
    source: str = Field(description="Source group: one of SOURCES.")
    citation: str = Field(description="Paper and table, or repository and path.")
    model: ModelSpec = Field(description="The transformer as published.")
    cluster: ClusterSpec = Field(description="Catalog GPU, GPU count and node size.")
    training: TrainingSpec = Field(description="Sequence length, global batch and precision.")
    config: ParallelConfig = Field(description="The published layout (defaults filled in).")
    memory_precision: Precision = Field(
        description="Precision recipe whose state bytes the run keeps (Float8 compute keeps BF16)."
    )
    tokens_per_s_per_gpu: float = Field(description="Published throughput per GPU (tokens/s).")
    published: str = Field(description="What the source printed for speed, verbatim figures.")
    source_mfu: float | None = Field(
        default=None, description="The source's own MFU or HFU figure (its convention), if any."
    )
    memory_gib: float | None = Field(default=None, description="Published peak memory (GiB).")
    memory_basis: Literal["allocated", "reserved"] | None = Field(
        default=None,
        description="allocated: tenants only; reserved: tenants plus fragmentation allowance.",
    )
    assumptions: list[str] = Field(default_factory=list, description="Defaults this run used.")

    @property
    def framework(self) -> Framework:
        return self.training.framework

    @property
    def search(self) -> SearchSpec:
        return SearchSpec()

    def request(self) -> EvaluateRequest:
        """The Evaluate request that scores this run with the planner."""
        return EvaluateRequest(
            model=self.model,
            cluster=self.cluster,
            training=self.training,
            config=self.config,
            search=self.search,
        )


class RunResult(_Strict):
    """Predicted against published, for one run."""

    id: str = Field(description="Run identifier.")
    source: str = Field(description="Source group.")
    published_mfu: float = Field(description="Published speed as MFU in our convention.")
    predicted_mfu: float = Field(description="Cost model's MFU at the published layout.")
    mfu_error: float = Field(description="predicted / published − 1 (same for tokens/s).")
    published_tokens_per_s_per_gpu: float = Field(description="Published tokens/s per GPU.")
    predicted_tokens_per_s_per_gpu: float = Field(description="Predicted tokens/s per GPU.")
    published_memory_gib: float | None = Field(description="Published peak memory (GiB).")
    predicted_memory_gib: float | None = Field(description="Predicted on the same basis (GiB).")
    memory_error: float | None = Field(description="predicted / published − 1 (< 0: under).")


# ---- loading -------------------------------------------------------------------------------


def _recompute(text: str | None, default: Recompute) -> Recompute:
    if not text:
        return default
    t = text.lower()
    if t.startswith("selective"):
        return Recompute.SELECTIVE
    if t.startswith("full"):
        return Recompute.FULL
    if t.startswith("none"):
        return Recompute.NONE
    raise ValueError(f"unknown recompute mode {text!r}")


def _gpu(text: str) -> str:
    t = text.upper()
    if "A100" in t:
        return "a100-sxm-80gb"
    if "H200" in t:
        return "h200-141gb"
    if "H100" in t:
        return "h100-sxm-96gb" if "96" in t else "h100-sxm-80gb"
    raise ValueError(f"no catalog GPU for {text!r}")


def _source_of(rec: dict[str, Any]) -> str:
    for s in SOURCES:
        if rec["id"].startswith(s.rstrip("0123456789")):
            return s
    raise ValueError(f"unknown source for run {rec['id']}")


def _gpt_flops_hfu(A: Arch, s: int) -> float:
    # Narayanan et al. 2021 Eq. 3, per token: 96·l·h²·(1 + s/6h + V/16lh)
    return 96 * A.L * A.h**2 * (1 + s / (6 * A.h) + A.V / (16 * A.L * A.h))


def _gpt_flops_mfu(A: Arch, s: int) -> float:
    # Korthikanti et al. 2022 App. A, per token: 72·l·h²·(1 + s/6h + V/12lh)
    return 72 * A.L * A.h**2 * (1 + s / (6 * A.h) + A.V / (12 * A.L * A.h))


def _run_from_record(rec: dict[str, Any]) -> CalibrationRun:
    src = _source_of(rec)
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
    local = par["micro_batch"]
    if local is None:
        local = 1
        used.append("micro-batch 1")
    v = par["virtual_pipeline_stages"]
    if v == "interleaved":
        v = 2
        used.append("interleaved = 2 chunks per stage")
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
    fp8 = "FP8" in rec["precision"].upper()
    prec = Precision.FP8 if fp8 else Precision.BF16
    cluster = ClusterSpec(gpu=_gpu(hw["gpu"]), num_gpus=gpus, gpus_per_node=hw["gpus_per_node"])
    training = TrainingSpec(seq_len=seq, global_batch_tokens=seqs * seq, precision=prec)
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
        citation=f"{rec['source']['title']}, {rec['source']['location']}",
        model=model,
        cluster=cluster,
        training=training,
        config=config,
        memory_precision=Precision.BF16,
        tokens_per_s_per_gpu=tps,
        published=published,
        source_mfu=source_mfu,
        memory_gib=mem,
        memory_basis="reserved" if mem is not None else None,
        assumptions=used,
    )


def load_published(path: Path | str = DEFAULT_PUBLISHED) -> list[CalibrationRun]:
    """The 48 records of published_runs.json as runs (every record is usable)."""
    records = json.loads(Path(path).read_text(encoding="utf-8"))
    return [_run_from_record(r) for r in records]


def _seed001_raw() -> dict[str, Any]:
    text = resources.files("meshplan.tools").joinpath("data/seed001_runs.json").read_text("utf-8")
    return json.loads(text)


def load_seed001() -> list[CalibrationRun]:
    """Seed 001's KempnerForge measurements (tools/data/seed001_runs.json)."""
    data = _seed001_raw()
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
        out.append(
            CalibrationRun(
                id=r["id"],
                source="seed001",
                citation=f'{data["source"]["title"]}: "{r["quote"]}"',
                model=model,
                cluster=ClusterSpec(gpu=c["gpu"], num_gpus=gpus, gpus_per_node=c["gpus_per_node"]),
                training=TrainingSpec(
                    seq_len=seq,
                    global_batch_tokens=r["dp"] * r["micro_batch"] * M * seq,
                    precision=Precision(c["precision"]),
                    framework=Framework(c["framework"]),
                ),
                config=ParallelConfig(
                    tp=r["tp"],
                    pp=c["pp"],
                    dp=r["dp"],
                    micro_batch_size=r["micro_batch"],
                    num_microbatches=M,
                    zero_stage=c["zero_stage"],
                    recompute=Recompute(c["recompute"]),
                    sequence_parallel=r["tp"] > 1,
                ),
                memory_precision=Precision(c["precision"]),
                tokens_per_s_per_gpu=tps,
                published=published,
                source_mfu=r["mfu"],
                memory_gib=r["memory_gib"],
                memory_basis="allocated" if r["memory_gib"] is not None else None,
            )
        )
    return out


def load_all(published: Path | str | None = DEFAULT_PUBLISHED) -> list[CalibrationRun]:
    """Calibration runs and seed 001 (seed 001 alone when `published` is None)."""
    return (load_published(published) if published is not None else []) + load_seed001()


# ---- scoring -------------------------------------------------------------------------------


def evaluate_run(
    run: CalibrationRun, constants: Constants | None = None, memory: bool = True
) -> RunResult:
    """Score one run with the cost model at its published layout (as Evaluate does)."""
    A, H = resolve_model(run.model), resolve_cluster(run.cluster)
    cm = CostModel(A, H, run.training, run.search, constants)
    p = Point.from_config(run.config)
    perf = cm.performance(p)
    flops = A.model_flops_per_token(run.training.seq_len)
    pub_mfu = run.tokens_per_s_per_gpu * flops / H.peak_bf16
    pred_tps = perf.tokens_per_s / p.lay.gpus
    mem_pred = mem_err = None
    if memory and run.memory_gib is not None:
        mcm = cm
        if run.memory_precision is not run.training.precision:
            tr = run.training.model_copy(update={"precision": run.memory_precision})
            mcm = CostModel(A, H, tr, run.search, constants)
        bill = mcm.memory_bill(p)
        used = bill.total - bill.reserve
        if run.memory_basis == "reserved":  # caching allocator: the fragmentation share too
            used = bill.total - mcm.ctx.reserve_bytes
        mem_pred = used / GIB
        mem_err = mem_pred / run.memory_gib - 1
    return RunResult(
        id=run.id,
        source=run.source,
        published_mfu=pub_mfu,
        predicted_mfu=perf.mfu,
        mfu_error=perf.mfu / pub_mfu - 1,
        published_tokens_per_s_per_gpu=run.tokens_per_s_per_gpu,
        predicted_tokens_per_s_per_gpu=pred_tps,
        published_memory_gib=run.memory_gib,
        predicted_memory_gib=mem_pred,
        memory_error=mem_err,
    )


def evaluate_runs(
    runs: Iterable[CalibrationRun], constants: Constants | None = None, memory: bool = True
) -> list[RunResult]:
    return [evaluate_run(r, constants, memory) for r in runs]


class ErrorSummary(_Strict):
    """Error statistics of one group of runs."""

    n_speed: int = Field(description="Runs with a published speed (count).")
    mfu_median: float = Field(description="Median |relative error| of MFU (= of tokens/s).")
    mfu_p90: float = Field(description="90th percentile |relative error| of MFU.")
    mfu_bias: float = Field(description="Median signed error of MFU (> 0: too optimistic).")
    n_memory: int = Field(description="Runs with a published peak memory (count).")
    memory_median: float | None = Field(description="Median |relative error| of peak memory.")
    memory_worst_under: float | None = Field(
        description="Most negative relative memory error (0 if never under-predicted)."
    )


def _pct(xs: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs, dtype=float), q))


def summarize(results: Sequence[RunResult]) -> ErrorSummary:
    e = [abs(r.mfu_error) for r in results]
    m = [r.memory_error for r in results if r.memory_error is not None]
    return ErrorSummary(
        n_speed=len(e),
        mfu_median=_pct(e, 50) if e else math.nan,
        mfu_p90=_pct(e, 90) if e else math.nan,
        mfu_bias=_pct([r.mfu_error for r in results], 50) if e else math.nan,
        n_memory=len(m),
        memory_median=_pct([abs(x) for x in m], 50) if m else None,
        memory_worst_under=min(0.0, *m) if m else None,
    )


def summarize_by_source(results: Sequence[RunResult]) -> dict[str, ErrorSummary]:
    """One summary per source (in SOURCES order) and one for all runs ('all')."""
    out = {
        s: summarize([r for r in results if r.source == s])
        for s in SOURCES
        if any(r.source == s for r in results)
    }
    out["all"] = summarize(results)
    return out


def with_constants(base: Constants, values: dict[str, Any]) -> Constants:
    """`base` with some fields replaced; dict fields (eta) are merged, not replaced."""
    upd = {}
    for k, v in values.items():
        cur = getattr(base, k)
        upd[k] = {**cur, **v} if isinstance(cur, dict) else v
    return replace(base, **upd)
