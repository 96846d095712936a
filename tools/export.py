"""Render a plan as a launcher snippet: Megatron-LM flags, torchtitan TOML, DeepSpeed JSON or
KempnerForge TOML. What a launcher cannot express is said in the snippet (a comment, or the
`_meshplan_note` key in JSON), never dropped silently.

Conventions shared with the planner: the GPU count is tp*pp*dp*cp; ep borrows ranks from dp*cp;
the global batch is dp * micro_batch_size * num_microbatches sequences of seq_len tokens.
"""

from __future__ import annotations

import json
import shlex

from meshplan.solver.schema import ModelSpec, ParallelConfig, Precision, Recompute, TrainingSpec

KINDS: tuple[str, ...] = ("megatron", "torchtitan", "deepspeed", "kempnerforge")


def emit(
    kind: str,
    config: ParallelConfig,
    model: ModelSpec,
    training: TrainingSpec,
    global_batch_tokens: int,
) -> str:
    """The plan `config` as a `kind` snippet (one of KINDS); ValueError on an unknown kind or a
    global batch that does not equal dp * micro_batch_size * num_microbatches * seq_len."""
    renderers = {
        "megatron": _megatron,
        "torchtitan": _torchtitan,
        "deepspeed": _deepspeed,
        "kempnerforge": _kempnerforge,
    }
    if kind not in renderers:
        raise ValueError(f"unknown export kind {kind!r}; supported kinds: {', '.join(KINDS)}")
    c, s = config, training.seq_len
    seqs = c.dp * c.micro_batch_size * c.num_microbatches
    if global_batch_tokens != seqs * s:
        raise ValueError(
            f"global_batch_tokens ({global_batch_tokens}) != dp({c.dp}) * micro_batch_size"
            f"({c.micro_batch_size}) * num_microbatches({c.num_microbatches}) * seq_len({s})"
            f" = {seqs * s}"
        )
    return renderers[kind](c, model, training, seqs)


def _summary(c: ParallelConfig, t: TrainingSpec, seqs: int) -> str:
    return (
        f"meshplan plan: tp={c.tp} pp={c.pp} virtual_stages={c.virtual_stages} dp={c.dp} "
        f"cp={c.cp} ep={c.ep}; micro_batch_size={c.micro_batch_size} x {c.num_microbatches} "
        f"micro-batches; ZeRO-{c.zero_stage}; recompute {c.recompute.value}; "
        f"{t.precision.value}; global batch {seqs} sequences x {t.seq_len} tokens"
    )


def _layers_per_chunk(c: ParallelConfig, model: ModelSpec, notes: list[str]) -> int | None:
    """Layers per virtual pipeline chunk, or None (with a note) when it is not an integer."""
    L, chunks = model.num_layers, c.pp * c.virtual_stages
    if L is None:
        notes.append(f"num_layers unknown (preset model): split {chunks} chunks by hand")
        return None
    if L % chunks:
        notes.append(
            f"NOT EXPRESSIBLE as planned: num_layers {L} is not divisible by pp*virtual_stages "
            f"= {chunks}, so interleaving is left out (equal chunks needed, or a custom layout)"
        )
        return None
    return L // chunks


def _toml(lines: list[str], notes: list[str], header: str) -> str:
    out = [f"# {header}"] + [f"# NOTE: {n}" for n in notes] + [""] + lines
    return "\n".join(out) + "\n"


def _megatron(c: ParallelConfig, m: ModelSpec, t: TrainingSpec, seqs: int) -> str:
    # Flag names from NVIDIA/Megatron-LM megatron/training/arguments.py.
    notes: list[str] = []
    args: list[tuple[str, object]] = [
        ("--tensor-model-parallel-size", c.tp),
        ("--pipeline-model-parallel-size", c.pp),
        ("--context-parallel-size", c.cp),
    ]
    if c.ep > 1 or m.moe is not None:
        args.append(("--expert-model-parallel-size", c.ep))
    if c.pp > 1 and m.num_layers is not None and m.num_layers % c.pp:
        notes.append(f"Megatron needs num_layers ({m.num_layers}) divisible by pp ({c.pp})")
    if c.virtual_stages > 1 and c.pp == 1:
        notes.append("virtual_stages ignored: interleaving needs pp > 1")
    elif c.virtual_stages > 1:
        # The older flag (still in current Megatron) is chosen; its newer equivalent is
        # --num-virtual-stages-per-pipeline-rank, and Megatron accepts only one of the two.
        per_chunk = _layers_per_chunk(c, m, notes)
        if per_chunk is not None:
            args.append(("--num-layers-per-virtual-pipeline-stage", per_chunk))
            notes.append(
                "newer Megatron also takes --num-virtual-stages-per-pipeline-rank "
                f"{c.virtual_stages} in place of --num-layers-per-virtual-pipeline-stage"
            )
    if c.sequence_parallel and c.tp > 1:
        args.append(("--sequence-parallel", None))
    elif c.tp > 1 and m.moe is not None:
        notes.append("Megatron requires --sequence-parallel for MoE with tp > 1")
    args += [
        ("--micro-batch-size", c.micro_batch_size),
        ("--global-batch-size", seqs),  # sequences; Megatron derives num_microbatches from it
        ("--seq-length", t.seq_len),
    ]
    if c.recompute is Recompute.SELECTIVE:
        args.append(("--recompute-granularity", "selective"))
    elif c.recompute is Recompute.FULL:
        args += [
            ("--recompute-granularity", "full"),
            ("--recompute-method", "uniform"),
            ("--recompute-num-layers", 1),
        ]
    if c.zero_stage >= 1:
        args.append(("--use-distributed-optimizer", None))
    if c.zero_stage >= 2:
        notes.append(
            f"ZeRO-{c.zero_stage} is not a Megatron concept: --use-distributed-optimizer shards "
            "the optimizer state (ZeRO-1-like; gradients are reduce-scattered but buffered in "
            "full). Sharded weights need newer Megatron: --use-megatron-fsdp "
            "--data-parallel-sharding-strategy optim_grads_params, or --use-torch-fsdp2 (pp=1, "
            "ep=1, without the distributed optimizer)"
        )
    args.append(("--bf16", None))
    if t.precision is Precision.FP8:
        args.append(("--fp8-format", "hybrid"))  # Transformer Engine FP8 GEMMs, bf16 params
    args += _megatron_model(m)
    lines = [f"# {_summary(c, t, seqs)}", "# Megatron-LM arguments for pretrain_gpt.py"]
    lines += [f"# NOTE: {n}" for n in notes]
    flags = [f"{k} {shlex.quote(str(v))}" if v is not None else k for k, v in args]
    return "\n".join(lines + [" \\\n".join(flags)]) + "\n"


def _megatron_model(m: ModelSpec) -> list[tuple[str, object]]:
    """Shape flags for the fields the ModelSpec sets (vocab comes from the tokenizer)."""
    out: list[tuple[str, object]] = []
    for flag, v in (
        ("--num-layers", m.num_layers),
        ("--hidden-size", m.hidden_size),
        ("--ffn-hidden-size", m.ffn_hidden_size),
        ("--num-attention-heads", m.num_attention_heads),
    ):
        if v is not None:
            out.append((flag, v))
    if m.num_kv_heads is not None and m.num_kv_heads != m.num_attention_heads:
        out += [("--group-query-attention", None), ("--num-query-groups", m.num_kv_heads)]
    if m.gated_mlp:
        out.append(("--swiglu", None))
    if m.tie_embeddings is False:
        out.append(("--untie-embeddings-and-output-weights", None))
    if m.moe is not None:
        e = m.moe
        out += [
            ("--num-experts", e.num_experts),
            ("--moe-router-topk", e.top_k),
            ("--moe-ffn-hidden-size", e.expert_ffn_hidden_size),
        ]
        if e.num_shared_experts:  # total width of the shared experts
            shared = e.num_shared_experts * e.expert_ffn_hidden_size
            out.append(("--moe-shared-expert-intermediate-size", shared))
        if e.num_dense_layers and m.num_layers is not None:
            k = e.num_dense_layers
            out.append(("--moe-layer-freq", f"([0]*{k}+[1]*{m.num_layers - k})"))
    return out


def _torchtitan(c: ParallelConfig, m: ModelSpec, t: TrainingSpec, seqs: int) -> str:
    # Keys from pytorch/torchtitan torchtitan/config/job_config.py.
    notes: list[str] = []
    if c.zero_stage == 0:  # DDP: replicate everything over dp
        replicate, shard = c.dp, 1
    else:  # FSDP2 over dp
        replicate, shard = 1, c.dp
    par = [
        f"data_parallel_replicate_degree = {replicate}",
        f"data_parallel_shard_degree = {shard}",
    ]
    if c.zero_stage in (1, 2):
        notes.append(
            f"ZeRO-{c.zero_stage} has no exact torchtitan equivalent: FSDP2 also shards the "
            "weights (ZeRO-3-like); fsdp_reshard_after_forward = never keeps them gathered "
            "from forward to backward, the closest match"
        )
        par.append('fsdp_reshard_after_forward = "never"')
    if c.tp > 1 and not c.sequence_parallel:
        notes.append("torchtitan's TP always shards the sequence; sequence_parallel=false is lost")
    par += [
        f"tensor_parallel_degree = {c.tp}",
        f"pipeline_parallel_degree = {c.pp}",
        f"context_parallel_degree = {c.cp}",
        f"expert_parallel_degree = {c.ep}",
    ]
    if c.ep > 1 and not c.cp <= c.ep <= shard * c.cp:
        notes.append(
            f"torchtitan needs cp <= ep <= data_parallel_shard_degree*cp ({c.cp} <= {c.ep} "
            f"<= {shard * c.cp} fails)"
        )
    if c.pp > 1:
        interleaved = c.virtual_stages > 1
        par.append(f'pipeline_parallel_schedule = "{"Interleaved1F1B" if interleaved else "1F1B"}"')
        if interleaved:
            per_chunk = _layers_per_chunk(c, m, notes)
            if per_chunk is not None:
                par.append(f"pipeline_parallel_layers_per_stage = {per_chunk}")
        par.append(f"pipeline_parallel_microbatch_size = {c.micro_batch_size}")
        local = c.micro_batch_size * c.num_microbatches  # the schedule splits it into M chunks
    else:
        if c.virtual_stages > 1:
            notes.append("virtual_stages ignored: interleaving needs pp > 1")
        local = c.micro_batch_size  # gradient accumulation = global / (local * dp)
    mode = {Recompute.NONE: "none", Recompute.SELECTIVE: "selective", Recompute.FULL: "full"}
    lines = ["[parallelism]", *par, "", "[training]", f"local_batch_size = {local}"]
    lines += [f"global_batch_size = {seqs}", f"seq_len = {t.seq_len}", ""]
    lines += ["[activation_checkpoint]", f'mode = "{mode[c.recompute]}"']
    if c.recompute is Recompute.SELECTIVE:
        lines.append('selective_ac_option = "op"')  # op-level SAC, closest to Korthikanti's
    if t.precision is Precision.FP8:
        lines += ["", "[model]", 'converters = ["float8"]  # merge into your [model] table']
    return _toml(lines, notes, _summary(c, t, seqs) + " -- torchtitan job config fragment")


def _deepspeed(c: ParallelConfig, m: ModelSpec, t: TrainingSpec, seqs: int) -> str:
    # Keys from the DeepSpeed config reference (deepspeed.ai/docs/config-json).
    notes = [_summary(c, t, seqs), f"train_batch_size counts sequences over dp={c.dp} replicas"]
    cfg: dict[str, object] = {
        "_meshplan_note": notes,
        "train_batch_size": seqs,
        "train_micro_batch_size_per_gpu": c.micro_batch_size,
        "gradient_accumulation_steps": c.num_microbatches,
        "zero_optimization": {"stage": c.zero_stage},
        "bf16": {"enabled": True},
    }
    if c.tp > 1:
        cfg["tensor_parallel"] = {"autotp_size": c.tp}  # AutoTP training (DeepSpeed >= 0.16.4)
        if c.zero_stage == 3:
            notes.append("AutoTP training supports ZeRO stages 0-2 only, not ZeRO-3 with tp > 1")
    if c.pp > 1:
        notes.append(f"pp={c.pp} is set in code: deepspeed.pipe.PipelineModule(num_stages={c.pp})")
        if c.zero_stage >= 2:
            notes.append("DeepSpeed's pipeline engine rejects ZeRO-2/3 (stages 0-1 only)")
        if c.virtual_stages > 1:
            notes.append(f"virtual_stages={c.virtual_stages} not expressible: no interleaving")
    if c.cp > 1:
        notes.append(
            f"cp={c.cp} not expressible in the JSON: set up Ulysses/ring attention in code"
        )
    if c.ep > 1:
        notes.append(f"ep={c.ep} is set in code: deepspeed.moe.layer.MoE(ep_size={c.ep})")
    if c.recompute is not Recompute.NONE:
        notes.append(
            f"recompute {c.recompute.value} is applied in model code "
            "(deepspeed.checkpointing.checkpoint); the JSON has no switch for it"
        )
    if t.precision is Precision.FP8:
        notes.append("FP8 not expressible in the JSON: wrap the model in Transformer Engine")
    return json.dumps(cfg, indent=2) + "\n"


def _kempnerforge(c: ParallelConfig, m: ModelSpec, t: TrainingSpec, seqs: int) -> str:
    # Keys from KempnerInstitute/KempnerForge kempnerforge/config/{distributed,training}.py;
    # its world size is dp_replicate*dp_shard*tp*pp*cp*ep, so ep is a factor of its own there.
    notes: list[str] = []
    ep, data = c.ep, c.dp
    if c.dp % c.ep:
        notes.append(
            f"NOT EXPRESSIBLE: ep={c.ep} borrows cp ranks (dp={c.dp}); KempnerForge's ep is a "
            "separate mesh factor that must divide out of dp; emitted ep = 1"
        )
        ep = 1
    else:
        data = c.dp // c.ep
    shard, replicate = (1, data) if c.zero_stage == 0 else (data, 1)
    if c.zero_stage in (1, 2):
        notes.append(f"ZeRO-{c.zero_stage} has no exact equivalent: FSDP2 also shards weights")
    if m.moe is not None and c.pp > 1:
        notes.append("KempnerForge rejects MoE with pp > 1 (JobConfig.validate)")
    if t.precision is Precision.FP8 and c.tp > 1:
        notes.append("KempnerForge rejects FP8 with tp > 1 (JobConfig.validate)")
    if c.cp > 1:
        notes.append("context parallelism is a stub in KempnerForge (seed 001: not wired up)")
    if m.tie_embeddings and c.pp > 1:
        notes.append("KempnerForge rejects tied embeddings with pp > 1")
    if c.virtual_stages > 1:
        notes.append(
            f"virtual_stages={c.virtual_stages} not expressible: KempnerForge builds one stage "
            'per pp rank, so pp_schedule stays "1f1b"'
        )
    if c.pp > 1:
        notes.append(
            f"pp > 1: check that your KempnerForge version feeds the pipeline "
            f"{c.num_microbatches} micro-batches of {c.micro_batch_size} sequences per step"
        )
    ac = {Recompute.NONE: "none", Recompute.SELECTIVE: "selective", Recompute.FULL: "full"}
    precision = "fp8" if t.precision is Precision.FP8 else "bf16"
    lines = [
        "[distributed]",
        f"dp_shard = {shard}",
        f"dp_replicate = {replicate}",
        f"tp = {c.tp}",
        f"pp = {c.pp}",
        'pp_schedule = "1f1b"',
        f"cp = {c.cp}",
        f"ep = {ep}",
        "",
        "[train]",
        f"batch_size = {c.micro_batch_size}",
        f"grad_accum_steps = {c.num_microbatches}",
        f"seq_len = {t.seq_len}",
        f'activation_checkpointing = "{ac[c.recompute]}"',
        f'mixed_precision = "{precision}"',
    ]
    return _toml(lines, notes, _summary(c, t, seqs) + " -- KempnerForge config fragment")
