"""The argument-list launcher formats of tools/export/emit.py (Megatron-LM, DeepSpeed with
Megatron-DeepSpeed) and what the formats share; the TOML ones are in tools/export/toml_formats.py (names
and values as the frameworks define them at the commits solver/profiles/ cites)."""

from __future__ import annotations

import json
import math
import shlex

from meshplan.solver.arch import Arch
from meshplan.solver.profiles import Profile
from meshplan.solver.schema import ParallelConfig, Precision, Recompute, TrainingSpec
from meshplan.tools.export import overlaps
from meshplan.tools.export.attention import rotary, unknown_note


def summary(c: ParallelConfig, t: TrainingSpec, seqs: int, prof: Profile) -> str:
    return (
        f"meshplan plan: tp={c.tp} pp={c.pp} virtual_stages={c.virtual_stages} dp={c.dp} "
        f"cp={c.cp} ep={c.ep} etp={c.etp}; micro_batch_size={c.micro_batch_size} x "
        f"{c.num_microbatches} micro-batches; ZeRO-{c.zero_stage} "
        f"({prof.zero_names.get(c.zero_stage, c.zero_stage)}); recompute {c.recompute.value}; "
        f"{t.precision.value}; global batch {seqs} sequences x {t.seq_len} tokens"
    )


def hsdp_degrees(c: ParallelConfig, hybrid: bool, gpus_per_node: int) -> tuple[int, int]:
    """(data-parallel shard degree, replicate degree) of a plan: the data-parallel ranks that
    share a node shard, the nodes replicate (the shard group of solver/costmodel/memory.py
    shard_group, gcd(dp·cp, GPUs per node / tp), over cp); without hybrid sharding all dp ranks
    shard."""
    if not hybrid:
        return c.dp, 1
    group = math.gcd(c.dp * c.cp, max(1, gpus_per_node // c.tp))
    shard = group // c.cp if group % c.cp == 0 else 1
    return shard, c.dp // shard


def chunk_sizes(L: int, chunks: int) -> list[int]:
    """Layers per pipeline chunk, in order: as even as can be, the first and last chunks (which
    hold the embedding and the loss) taking the fewer layers."""
    base, extra = divmod(L, chunks)
    sizes = [base] * chunks
    order = list(range(1, chunks - 1)) + [chunks - 1, 0] if chunks > 2 else list(range(chunks))
    for i in order[:extra]:
        sizes[i] += 1
    return sizes


def _flags(args: list[tuple[str, object]]) -> str:
    """Shell words, one argument a line; a list value is several words (argparse nargs)."""

    def word(v: object) -> str:
        if isinstance(v, list):
            return " ".join(shlex.quote(str(x)) for x in v)
        return shlex.quote(str(v))

    return " \\\n".join(f"{k} {word(v)}" if v is not None else k for k, v in args)


# --- Megatron-LM ------------------------------------------------------------------------------


def megatron(c: ParallelConfig, A: Arch, t: TrainingSpec, seqs: int, prof: Profile) -> str:
    args: list[tuple[str, object]] = [
        ("--tensor-model-parallel-size", c.tp),
        ("--pipeline-model-parallel-size", c.pp),
        ("--context-parallel-size", c.cp),
    ]
    if A.is_moe:
        args += [("--expert-model-parallel-size", c.ep), ("--expert-tensor-parallel-size", c.etp)]
    chunks = c.pp * c.virtual_stages
    if c.pp > 1 and A.L % chunks:
        # --pipeline-model-parallel-layout (core v0.13+): E embedding, t layer, L loss, | chunk
        sizes = chunk_sizes(A.L, chunks)
        parts = [(f"t*{n}" if n > 1 else "t" * n) for n in sizes]
        args.append(("--pipeline-model-parallel-layout", "E" + "|".join(parts) + "L"))
    elif c.virtual_stages > 1:
        args.append(("--num-virtual-stages-per-pipeline-rank", c.virtual_stages))
    if c.sequence_parallel and c.tp > 1:
        args.append(("--sequence-parallel", None))
    args += [
        ("--micro-batch-size", c.micro_batch_size),
        ("--global-batch-size", seqs),  # sequences; Megatron derives num_microbatches from it
        ("--seq-length", t.seq_len),
        ("--max-position-embeddings", t.seq_len),
    ]
    if c.recompute is Recompute.SELECTIVE:  # the attention core (and the experts' activation)
        modules = ["core_attn", "moe_act"] if A.is_moe else ["core_attn"]
        args += [("--recompute-granularity", "selective"), ("--recompute-modules", modules)]
    elif c.recompute is Recompute.FULL:
        args += [
            ("--recompute-granularity", "full"),
            ("--recompute-method", "uniform"),
            ("--recompute-num-layers", 1),
        ]
    if c.zero_stage >= 1:
        args.append(("--use-distributed-optimizer", None))
    if c.zero_stage >= 2:  # Megatron-FSDP (docs/user-guide/features/megatron_fsdp.md)
        strategy = "optim_grads_params" if c.zero_stage == 3 else "optim_grads"
        args += [
            ("--use-megatron-fsdp", None),
            ("--data-parallel-sharding-strategy", strategy),
            ("--ckpt-format", "fsdp_dtensor"),
        ]
    args += [("--bf16", None), ("--transformer-impl", "transformer_engine")]
    if t.precision is Precision.FP8:  # TE FP8 GEMMs with FP8 parameters (the profile's recipe)
        args += [
            ("--fp8-format", "hybrid"),
            ("--fp8-recipe", "tensorwise"),  # current scaling: moe_act recompute needs it
            ("--fp8-param-gather", None),
        ]
    if t.grad_reduce_in_bf16:
        args.append(("--grad-reduce-in-bf16", None))
    args.append(("--attention-backend", "flash" if t.fused_attention else "unfused"))
    overlap_args, notes = overlaps.megatron(c, A, t)
    args += overlap_args
    deepep = ("--moe-enable-deepep", None) in overlap_args
    args += _megatron_model(A, dispatcher=None if deepep else "alltoall")
    head = [summary(c, t, seqs, prof), "Megatron-LM arguments for pretrain_gpt.py"]
    head += [overlaps.describe(c, A, t), *overlaps.note_lines(notes)]
    if A.attention is None:
        head.append(unknown_note(A))
    return "\n".join([f"# {h}" for h in head] + [_flags(args)]) + "\n"


def _megatron_model(A: Arch, dispatcher: str | None) -> list[tuple[str, object]]:
    """The model's shape; `dispatcher`: the MoE token dispatcher (None: set elsewhere)."""
    out: list[tuple[str, object]] = [
        ("--num-layers", A.L),
        ("--hidden-size", A.h),
        ("--ffn-hidden-size", A.f),
        ("--num-attention-heads", A.a),
        ("--vocab-size", A.V),
    ]
    att = A.attention
    mla = att.mla if att is not None else None
    if A.kv != A.a and mla is None:
        out += [("--group-query-attention", None), ("--num-query-groups", A.kv)]
    if A.hd and mla is None:
        out.append(("--kv-channels", A.hd))
    if A.gated:
        out += [("--swiglu", None), ("--normalization", "RMSNorm")]
    if rotary(A):
        out.append(("--position-embedding-type", "rope"))
    if A.gated:
        out.append(("--disable-bias-linear", None))
    if att is not None and att.rope_theta is not None and rotary(A):
        out.append(("--rotary-base", int(att.rope_theta)))  # arguments.py: type=int
    if att is not None and att.qk_norm:
        out.append(("--qk-layernorm", None))
    if mla is not None:  # megatron/core/transformer/multi_latent_attention.py
        out += [
            ("--multi-latent-attention", None),
            ("--q-lora-rank", mla.q_lora_rank),
            ("--kv-lora-rank", mla.kv_lora_rank),
            ("--qk-head-dim", mla.qk_nope_head_dim),
            ("--qk-pos-emb-head-dim", mla.qk_rope_head_dim),
            ("--v-head-dim", mla.v_head_dim),
        ]
    if not A.tied:
        out.append(("--untie-embeddings-and-output-weights", None))
    if A.is_moe:
        out += [
            ("--num-experts", A.E),
            ("--moe-router-topk", A.top_k),
            ("--moe-ffn-hidden-size", A.fe),
            ("--moe-grouped-gemm", None),
        ]
        if dispatcher:
            out.append(("--moe-token-dispatcher-type", dispatcher))
        if A.shared:  # one shared MLP of the summed width
            out.append(("--moe-shared-expert-intermediate-size", A.shared * A.fe))
        if A.n_dense:
            out.append(("--moe-layer-freq", f"([0]*{A.n_dense}+[1]*{A.L - A.n_dense})"))
    return out


# --- DeepSpeed (with Megatron-DeepSpeed) ------------------------------------------------------


def deepspeed(c: ParallelConfig, A: Arch, t: TrainingSpec, seqs: int, prof: Profile) -> str:
    args: list[tuple[str, object]] = [("--tensor-model-parallel-size", c.tp)]
    if c.pp > 1:
        args.append(("--pipeline-model-parallel-size", c.pp))
    else:
        args.append(("--no-pipeline-parallel", None))
    if c.sequence_parallel and c.tp > 1:
        args.append(("--sequence-parallel", None))
    args += [
        ("--micro-batch-size", c.micro_batch_size),
        ("--global-batch-size", seqs),
        ("--seq-length", t.seq_len),
        ("--max-position-embeddings", t.seq_len),
        ("--num-layers", A.L),
        ("--hidden-size", A.h),
        ("--ffn-hidden-size", A.f),
        ("--num-attention-heads", A.a),
        ("--num-key-value-heads", A.kv),
    ]
    if A.hd:
        args.append(("--kv-channels", A.hd))
    att = A.attention
    if A.gated:
        args += [("--swiglu", None), ("--normalization", "rmsnorm")]
    if rotary(A):
        args += [("--use-rotary-position-embeddings", None), ("--no-position-embedding", None)]
    if A.gated:
        args.append(("--disable-bias-linear", None))
    if att is not None and att.rope_theta is not None and rotary(A):
        args.append(("--rotary-position-embeddings-theta", int(att.rope_theta)))
    if not A.tied:
        args.append(("--untie-embeddings-and-output-weights", None))
    if A.is_moe:
        # one count per layer when leading layers are dense (1 = no experts), else one for all
        experts = [1] * A.n_dense + [A.E] * (A.L - A.n_dense) if A.n_dense else A.E
        args += [("--num-experts", experts), ("--expert-interval", 1), ("--topk", A.top_k)]
        args.append(("--moe-expert-parallel-size", c.ep))
        if c.tp > 1:
            args.append(("--enable-expert-tensor-parallelism", None))
    if c.recompute is Recompute.SELECTIVE:
        args.append(("--recompute-granularity", "selective"))
    elif c.recompute is Recompute.FULL:
        args += [
            ("--recompute-granularity", "full"),
            ("--recompute-method", "uniform"),
            ("--recompute-num-layers", 1),
        ]
    if t.fused_attention:
        args.append(("--use-flash-attn-v2", None))
    args += [("--bf16", None), ("--deepspeed", None), ("--deepspeed_config", "ds_config.json")]
    overlap_comm, notes = overlaps.deepspeed(c, A, t)
    cfg: dict[str, object] = {
        "_meshplan": summary(c, t, seqs, prof),
        "_overlaps": [overlaps.describe(c, A, t), *overlaps.note_lines(notes)]
        + ([] if att is not None else [unknown_note(A)]),
        "_megatron_deepspeed": "pretrain_gpt.py " + " ".join(_flags(args).split(" \\\n")),
        "train_batch_size": seqs,  # sequences over dp replicas
        "train_micro_batch_size_per_gpu": c.micro_batch_size,
        "gradient_accumulation_steps": c.num_microbatches,
        "zero_optimization": {"stage": c.zero_stage, "overlap_comm": overlap_comm},
        "bf16": {"enabled": True},
    }
    return json.dumps(cfg, indent=2) + "\n"
