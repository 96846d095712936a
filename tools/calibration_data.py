"""Published training runs as the requests the planner would score, with what was measured.

Three files, vendored with their sources: `tools/data/calibration/published_runs.json`
(Narayanan et al. 2021, Korthikanti et al. 2022, torchtitan, MosaicML llm-foundry),
`tools/data/calibration/megatron_h100_runs.json` (Megatron-Core r0.8.0 scaling, NeMo 24.07,
NVIDIA DGX Cloud recipes v25.02.01, the Megatron MoE model zoo) and seed 001's KempnerForge
measurements (`tools/data/seed001_runs.json`). Each run becomes a `CalibrationRun`: the model,
the cluster, the training step (framework profile and the overlaps the run used), the
published layout, and the published speed as tokens/s per GPU (every source's FLOP convention
undone: `CONVERSIONS`). Fields a source does not publish take the per-source default stated
in `DEFAULTS`; each run lists the defaults it used (`assumptions`).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from meshplan.solver.arch import Arch, resolve_model
from meshplan.solver.schema import (
    ClusterSpec,
    EvaluateRequest,
    Framework,
    ModelSpec,
    MoESpec,
    ParallelConfig,
    Precision,
    Recompute,
    SearchSpec,
    TrainingSpec,
)

DATA = Path(__file__).resolve().parent / "data" / "calibration"
DEFAULT_PUBLISHED = DATA / "published_runs.json"
DEFAULT_MEGATRON = DATA / "megatron_h100_runs.json"

# Source groups: leave-one-source-out holds out one group at a time.
SOURCES = (
    "narayanan2021",
    "korthikanti2022",
    "torchtitan",
    "mosaicml",
    "seed001",
    "mcore_r080",
    "nemo2407",
    "dgxc2502",
    "moezoo",
)
CATEGORIES = ("BF16-dense", "FP8-dense", "MoE")
Category = Literal["BF16-dense", "FP8-dense", "MoE"]

# The framework profile each source ran (MosaicML's llm-foundry is PyTorch FSDP FULL_SHARD with
# activation checkpointing: the same recipe as torchtitan's FSDP).
FRAMEWORKS = {
    "narayanan2021": Framework.MEGATRON,
    "korthikanti2022": Framework.MEGATRON,
    "torchtitan": Framework.TORCHTITAN,
    "mosaicml": Framework.TORCHTITAN,
    "seed001": Framework.KEMPNERFORGE,
    "mcore_r080": Framework.MEGATRON,
    "nemo2407": Framework.MEGATRON,
    "dgxc2502": Framework.MEGATRON,
    "moezoo": Framework.MEGATRON,
}

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
    "mcore_r080": (
        "weak scaling prints model TFLOP/s per GPU by Megatron's num_floating_point_operations "
        "(megatron/training/training.py @ 937571c: 12·L·h²·((1 + g/a + s/h)·q/h + f/h·k·(3/2 if "
        "swiglu) + V/2Lh) per token, no causal halving): tokens/s/GPU = TFLOP/s / that; the two "
        "strong-scaling endpoints print MFU only: tokens/s/GPU = MFU × 989e12 / that."
    ),
    "nemo2407": (
        "tokens/s per GPU as printed (the model TFLOP/s column is the FP8 run's model FLOPs "
        "against nothing: NeMo prints no MFU)."
    ),
    "dgxc2502": (
        "tokens/s per GPU as printed (global batch tokens / last step time / GPUs). The recipes' "
        "MFU is against the FP8 peak (1,979) for FP8 runs, and Grok-1's halves causal attention: "
        "neither matters for tokens/s."
    ),
    "moezoo": (
        "tokens/s/GPU = global batch tokens / step time / GPUs (the table's Per GPU TF column "
        "uses the zoo's own FLOP count)."
    ),
}

_MCORE_DEFAULTS = [
    "BF16 (the README's MFU is TFLOP/s / 989, the BF16 peak)",
    "GPT shape: ffn 4h, multi-head attention, GELU, tied embeddings (Megatron's defaults)",
    "H100 SXM 80 GB, 8 per node",
    "micro-batch 1; no recomputation (none is named)",
    "1F1B without interleaving (Megatron's default; no virtual stages are named)",
    "distributed optimizer (ZeRO-1), sequence parallelism with tp > 1; tp, dp and pp overlaps "
    "on as the README states (--tp-comm-overlap --overlap-grad-reduce --overlap-param-gather)",
    "strong scaling: tp 8, pp 6 (the 177B row of the weak-scaling table; the plotted GPU "
    "counts are multiples of 48), dp = GPUs/48",
]
DEFAULTS = {
    "narayanan2021": [
        "micro-batch 1 (Table 1 does not print it)",
        "full recomputation (Eq. 3 counts the recompute forward)",
        "ZeRO 0, no sequence parallelism, no interleaving (Megatron-LM, April 2021)",
        "no tp overlap; dp all-reduce after the backward (Megatron-LM's local DDP, 2021); "
        "unfused attention (before FlashAttention)",
        "fp16/bf16 mixed precision scored as BF16 (same peak on A100)",
    ],
    "korthikanti2022": [
        "vocabulary 51,200 (GPT-3's, padded; not transcribed)",
        "ZeRO 0 (no distributed optimizer); no tp overlap; unfused attention (Megatron-LM, 2022)",
        "2,240-GPU runs: ffn 4h, MHA, micro-batch 1, one sequence per GPU (as in Table 3)",
    ],
    "torchtitan": [
        "seq_len 8192 where not printed (train_config default at the benchmark commits)",
        "pipeline runs: 'local batch' split into pp micro-batches (pipeline_parallel_microbatches "
        "defaults to the stage count); interleaved 1F1B = 2 chunks per stage",
        "ZeRO 3 (FSDP2), sequence parallelism whenever tp > 1; tp overlap in the async-TP runs "
        "(the 405B 3D/4D runs name AsyncTP)",
        "Float8 runs: FP8 matmul rate, BF16 state bytes (Float8Linear keeps no FP8 weights)",
        "FSDP2 with pp > 1 scored as ZeRO-1: torchtitan sets reshard_after_forward=False under "
        "PP and syncs gradients on the last micro-batch, so weights and gradients stay unsharded "
        "through the step (one all-gather, one reduce-scatter per step)",
    ],
    "mosaicml": [
        "GELU MLP (expansion 4) and tied embeddings (MPT)",
        "ZeRO 3 (FULL_SHARD), full recomputation as printed; scored with the TORCHTITAN profile "
        "(PyTorch FSDP, the same recipe)",
    ],
    "seed001": [
        "ZeRO 3 (FSDP2), full activation checkpointing, sequence parallelism with tp > 1",
        "micro-batch x grad-accum and seq_len 4096 from KempnerForge's mfu_bench.sh (NOTES.md)",
        "KempnerForge memory recipe (framework KEMPNERFORGE); tp collectives exposed",
    ],
    "mcore_r080": _MCORE_DEFAULTS,
    "nemo2407": [
        "DGX H100 (80 GB, 8 per node); FP8 hybrid recipe of Transformer Engine",
        "no recomputation, sequence parallelism and tp overlap with tp > 1, distributed optimizer "
        "with overlapped grad reduce / param gather (NeMo's performance recipes, e.g. "
        "nemo/collections/llm/recipes/llama3_70b.py @ 8e3d65d: tp_comm_overlap=True)",
        "GPT-3 shapes: vocabulary 51,200 (GPT-2 BPE padded), GELU, tied embeddings; Nemotron: "
        "squared-ReLU MLP (not gated), untied; Llama: SwiGLU, untied",
    ],
    "dgxc2502": [
        "recipes' YAML (NVIDIA/dgxc-benchmarking @ 0b71cfd): no activation checkpointing, "
        "sequence parallelism with tp > 1, distributed optimizer with overlap_grad_sync and "
        "overlap_param_sync; ub_tp_comm_overlap on for GPT-3, Llama 3.1 405B, Nemotron-4 15B, "
        "off for Grok-1 (and Llama 3.1 8B, tp 1)",
        "Grok-1: expert capacity factor 1.0 with padding (balanced experts), expert tensor "
        "parallel = tp (Megatron's default)",
    ],
    "moezoo": [
        "yanring/Megatron-MoE-ModelZoo @ e865051 (model_configs/benchmarking/Qwen3-235B-A22B.yaml):"
        " distributed optimizer with overlapped grad reduce / param gather, sequence parallelism,"
        " no --tp-comm-overlap, force-balanced routing; FSDP runs as ZeRO-3",
        "recompute 'norm, act' (layer norms and the MoE activation only) scored as none in time",
        "1F1B A2A overlap only in the run marked '+1f1b overlap'; DeepEP runs dispatch each "
        "token once per remote node",
    ],
}

# head_dim where it differs from hidden/heads.
HEAD_DIMS = {"Qwen3-235B-A22B": 128}  # HF Qwen/Qwen3-235B-A22B config.json; zoo --kv-channels


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CalibrationRun(_Strict):
    """One published run at its published configuration, with what was measured."""

    id: str = Field(description="Run identifier (the record's id).")
    source: str = Field(description="Source group (one of SOURCES): the unit left out in LOSO.")
    category: Category = Field(description="BF16-dense, FP8-dense or MoE.")
    citation: str = Field(description="Paper and table, or repository, path and commit.")
    model: ModelSpec = Field(description="The transformer as published.")
    cluster: ClusterSpec = Field(description="Catalog GPU, GPU count and node size.")
    training: TrainingSpec = Field(
        description="Sequence length, global batch, precision, framework profile and overlaps."
    )
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


def _category(moe: bool, precision: Precision) -> Category:
    if moe:
        return "MoE"
    return "FP8-dense" if precision is Precision.FP8 else "BF16-dense"


def _recompute(text: str | None, default: Recompute) -> Recompute:
    if not text:
        return default
    t = text.lower()
    if t.startswith("selective: norm") or t.startswith("none"):
        return Recompute.NONE  # the zoo's "norm, act": no attention or GEMM is recomputed
    if t.startswith("selective"):
        return Recompute.SELECTIVE
    if t.startswith("full"):
        return Recompute.FULL
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


def _gpt_flops_hfu(A: Arch, s: int) -> float:
    # Narayanan et al. 2021 Eq. 3, per token: 96·l·h²·(1 + s/6h + V/16lh)
    return 96 * A.L * A.h**2 * (1 + s / (6 * A.h) + A.V / (16 * A.L * A.h))


def _gpt_flops_mfu(A: Arch, s: int) -> float:
    # Korthikanti et al. 2022 App. A, per token: 72·l·h²·(1 + s/6h + V/12lh)
    return 72 * A.L * A.h**2 * (1 + s / (6 * A.h) + A.V / (12 * A.L * A.h))


def megatron_flops_per_token(A: Arch, s: int) -> float:
    """Megatron-LM's num_floating_point_operations per token (training.py @ 937571c)."""
    q = A.a * A.head_dim / A.h  # query projection / hidden
    routed = A.top_k if A.is_moe else 1
    ffn = A.fe if A.is_moe else A.f
    gated = 1.5 if A.gated else 1.0
    per = (1 + A.kv / A.a + s / A.h) * q + ffn / A.h * routed * gated + A.V / (2 * A.L * A.h)
    return 12 * A.L * A.h**2 * per


def _published_source(rec: dict[str, Any]) -> str:
    for s in ("narayanan2021", "korthikanti2022", "torchtitan", "mosaicml"):
        if rec["id"].startswith(s.rstrip("0123456789")):
            return s
    raise ValueError(f"unknown source for run {rec['id']}")


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
        assumptions=used,
    )


def load_published(path: Path | str = DEFAULT_PUBLISHED) -> list[CalibrationRun]:
    """The 48 records of published_runs.json as runs (every record is usable)."""
    records = json.loads(Path(path).read_text(encoding="utf-8"))
    return [_run_from_published(r) for r in records]


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
    b = par["micro_batch"]
    if b is None:
        b = 1
        used.append("micro-batch 1")
    seqs = par["global_batch_seqs"]
    M = seqs // (dp * b)
    if dp * b * M != seqs or (par["grad_accum"] and par["grad_accum"] != M):
        raise ValueError(f"{rid}: dp*b*M = {dp * b * M} != global batch {seqs}")
    v = par["virtual_pipeline_stages"] or 1
    if par["virtual_pipeline_stages"] is None and pp > 1:
        used.append("no interleaving (Megatron's default: no virtual stages)")
    r = _recompute(par["recompute"], Recompute.NONE)
    if par["recompute"] is None:
        used.append("no recomputation")
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
    )


def load_megatron(path: Path | str = DEFAULT_MEGATRON) -> list[CalibrationRun]:
    """The 50 records of megatron_h100_runs.json as runs."""
    records = json.loads(Path(path).read_text(encoding="utf-8"))
    return [_run_from_megatron(r) for r in records]


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
        prec = Precision(c["precision"])
        out.append(
            CalibrationRun(
                id=r["id"],
                source="seed001",
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
    """Every calibration run: published_runs.json, megatron_h100_runs.json and seed 001 (a file
    passed as None is skipped)."""
    runs = load_published(published) if published is not None else []
    runs += load_megatron(megatron) if megatron is not None else []
    return runs + load_seed001()
