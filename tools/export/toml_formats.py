"""The TOML launcher formats of tools/export/emit.py: torchtitan's job config up to 0.2.2
(`--emit torchtitan-toml`; 0.3.0's Python configuration is tools/export/torchtitan.py) and
KempnerForge's, keys as the frameworks define them at the commits solver/profiles/ cites,
written by tomli-w."""

from __future__ import annotations

import tomli_w

from meshplan.solver.arch import Arch
from meshplan.solver.profiles import Profile
from meshplan.solver.schema import (
    ParallelConfig,
    PipelineSchedule,
    Precision,
    Recompute,
    TrainingSpec,
)
from meshplan.tools.export import overlaps
from meshplan.tools.export.attention import unknown_note
from meshplan.tools.export.formats import summary
from meshplan.tools.export.torchtitan import baseline_of, pipeline_keys
from meshplan.tools.export.torchtitan import limits as torchtitan_limits

# --- torchtitan up to 0.2.2 ----------------------------------------------------------------------


def _toml(header: list[str], sections: dict[str, dict[str, object]]) -> str:
    """The sections as TOML (tomli-w), after the header as comments."""
    lines = "\n".join(f"# {h}" for h in header)
    return f"{lines}\n\n{tomli_w.dumps(sections)}"


def torchtitan_limits_toml(A: Arch) -> list[str]:
    """The job config names a flavour of torchtitan's registry (a TOML without [model] would
    train the llama3 debug model): the same flavours as 0.3.0's."""
    return [x.replace("torchtitan 0.3.0", "torchtitan") for x in torchtitan_limits(A)]


def torchtitan(
    c: ParallelConfig,
    A: Arch,
    t: TrainingSpec,
    seqs: int,
    prof: Profile,
    hsdp: tuple[int, int] | None = None,
) -> str:
    shard, replicate = hsdp or (c.dp, 1)  # data-parallel (shard, replicate) degrees: HSDP
    header = [
        summary(c, t, seqs, prof),
        "torchtitan job config (TOML) for torchtitan up to 0.2.2 (pytorch/torchtitan @ e347b1e); "
        "0.3.0 reads Python: --emit torchtitan",
    ]
    overlap_par, overlap_sections, notes = overlaps.torchtitan(c, A, t)
    header += [overlaps.describe(c, A, t), *overlaps.note_lines(notes)]
    found = baseline_of(A)
    if found is None:  # emit.py refuses first; never the debug model a missing [model] means
        raise ValueError("; ".join(torchtitan_limits_toml(A)))
    base = found[1]
    model: dict[str, object] = {"name": base.package, "flavor": base.flavor}
    if t.precision is Precision.FP8:
        model["converters"] = ["quantize.linear.float8"]
    par: dict[str, object] = {
        "data_parallel_replicate_degree": replicate,  # HSDP: replicas across nodes
        "data_parallel_shard_degree": shard,  # FSDP2 (ZeRO-3; under pipelining: ZeRO-1)
        # FSDP2's own policy: reshard after forward without PP, keep the weights gathered with it
        "fsdp_reshard_after_forward": "default",
        "tensor_parallel_degree": c.tp,  # sequence parallel whenever tp > 1
        "pipeline_parallel_degree": c.pp,
        "context_parallel_degree": c.cp,
        "expert_parallel_degree": c.ep,
    }
    if A.is_moe:
        par["expert_tensor_parallel_degree"] = c.etp
    par |= overlap_par
    dual = t.pipeline_schedule is PipelineSchedule.DUALPIPE_V
    pipe, local = pipeline_keys(A, c, "output", dual)
    par |= pipe
    mode = {Recompute.NONE: "none", Recompute.SELECTIVE: "selective", Recompute.FULL: "full"}
    ac: dict[str, object] = {"mode": mode[c.recompute]}
    if c.recompute is Recompute.SELECTIVE:
        ac["selective_ac_option"] = "op"  # op-level policy (the memory model's)
    sections: dict[str, dict[str, object]] = {"model": model, "parallelism": par}
    sections["training"] = {
        "local_batch_size": local,
        "global_batch_size": seqs,
        "seq_len": t.seq_len,
        "mixed_precision_param": "bfloat16",
    }
    sections["activation_checkpoint"] = ac
    sections |= overlap_sections
    if t.precision is Precision.FP8:
        float8 = {"recipe_name": "tensorwise", "filter_fqns": ["output"]}
        sections["quantize"] = {"linear": {"float8": float8}}  # [quantize.linear.float8]
    return _toml(header, sections)


# --- KempnerForge -----------------------------------------------------------------------------


def kempnerforge(
    c: ParallelConfig,
    A: Arch,
    t: TrainingSpec,
    seqs: int,
    prof: Profile,
    hsdp: tuple[int, int] | None = None,
) -> str:
    model: dict[str, object] = {
        "dim": A.h,
        "n_layers": A.L,
        "n_heads": A.a,
        "n_kv_heads": A.kv,
        "vocab_size": A.V,
        "ffn_hidden_dim": A.f,
        "activation": "silu" if A.gated else "gelu",
        "tie_embeddings": A.tied,
        "max_seq_len": t.seq_len,
    }
    att = A.attention
    if att is not None and att.rope_theta is not None:
        model["rope_theta"] = att.rope_theta
    if att is not None and att.qk_norm:
        model["qk_norm"] = True
    if A.is_moe:
        model |= {
            "num_experts": A.E,
            "moe_top_k": A.top_k,
            "moe_shared_experts": A.shared,
            "moe_frequency": 1,
            "moe_expert_ffn_multiplier": A.fe / A.f,
        }
    shard, replicate = (1, c.dp) if c.zero_stage == 0 and c.dp > 1 else (hsdp or (c.dp, 1))
    ac = {Recompute.NONE: "none", Recompute.SELECTIVE: "selective", Recompute.FULL: "full"}
    sections: dict[str, dict[str, object]] = {
        "model": model,
        "distributed": {
            "dp_shard": shard,
            "dp_replicate": replicate,
            "tp": c.tp,  # DTensor TP with sequence parallelism
            "pp": c.pp,
            "pp_schedule": "1f1b",
            "cp": c.cp,
            "ep": c.ep,
        },
        "train": {
            "batch_size": c.micro_batch_size,
            "grad_accum_steps": c.num_microbatches,  # the pipeline's micro-batch count with pp
            "seq_len": t.seq_len,
            "activation_checkpointing": ac[c.recompute],
            "mixed_precision": "fp8" if t.precision is Precision.FP8 else "bf16",
            # as the plan was timed (KempnerForge @ 5666d0d config/training.py: default true)
            "compile_model": prof.recipe_for(t).compiled,
        },
    }
    header = [summary(c, t, seqs, prof), "KempnerForge job config (TOML)"]
    header += [overlaps.describe(c, A, t), *overlaps.note_lines(overlaps.kempnerforge(c, A, t))]
    if att is None:
        header.append(unknown_note(A))
    return _toml(header, sections)
