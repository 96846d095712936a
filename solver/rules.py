"""The rules a point must obey: the specification of the search space.

`violations` lists what a point breaks, in words; `space.Space` generates exactly the points that
break nothing, and the oracle checks that by enumerating raw ranges against these rules. The
framework rules come from the request's profile (solver/profiles/, which cites the code).
"""

from __future__ import annotations

from meshplan.solver.arch import Arch
from meshplan.solver.costmodel import Point
from meshplan.solver.hardware import Hardware
from meshplan.solver.profiles import Profile, profile_of
from meshplan.solver.schema import (
    Framework,
    PipelineSchedule,
    Precision,
    Recompute,
    SearchSpec,
    TrainingSpec,
)


def tp_divides_model(A: Arch, tp: int) -> bool:
    """tp splits the heads, the KV heads, the dense FFN and the shared experts."""
    if A.a % tp or A.kv % tp:
        return False
    if A.n_dense_layers and A.f % tp:
        return False
    return not (A.is_moe and A.shared and A.fe % tp)


def expert_group_ok(A: Arch, prof: Profile, tp: int, ep: int, etp: int) -> bool:
    """(tp, ep, etp) on its own, before the layout: experts divide over ep, their FFN over etp,
    and etp is one the framework pairs with tp."""
    if not A.is_moe:
        return ep == 1 and etp == tp
    if A.E % ep or A.fe % etp or etp not in prof.etp_values(tp, True):
        return False
    return ep == 1 or prof.expert_parallel


def folds(tp: int, cp: int, dp: int, ep: int, etp: int) -> bool:
    """The expert group ep·etp is carved out of the tp·cp·dp ranks of a stage (Megatron-Core's
    MoE parallel folding; torchtitan's efsdp = dp·cp·tp/(etp·ep))."""
    return (tp * cp * dp) % (ep * etp) == 0


def interleave_ok(prof: Profile, pp: int, v: int, M: int, dualpipe: bool = False) -> bool:
    """Megatron's interleaved schedule runs micro-batches in groups of pp (schedules.py);
    PyTorch's in max(1, M // pp) rounds of equal size (ScheduleInterleaved1F1B, torch 2.13.0);
    DualPipeV (its two stages per rank) at least 2·pp of them (deepseek-ai/DualPipe @ 3da1bbe
    dualpipe/dualpipev.py step: num_chunks >= num_ranks * 2)."""
    if v == 1:
        return True
    if dualpipe:
        return 2 * pp <= M
    if prof.interleave_whole_rounds and M % pp:
        return False
    return not prof.interleave_torch_rounds or M % max(1, M // pp) == 0


def dualpipe(training: TrainingSpec) -> bool:
    """The request runs DualPipeV (training.pipeline_schedule)."""
    return training.pipeline_schedule is PipelineSchedule.DUALPIPE_V


def model_limits(A: Arch, prof: Profile) -> list[str]:
    """Model shapes a framework cannot build in any layout (its model config has no field for
    them); the planner refuses them as bad input naming training.framework, so it never plans
    a model the framework's export then refuses."""
    out, fw = [], prof.framework
    if fw is Framework.KEMPNERFORGE:  # kempnerforge/config/model.py @ 5666d0d
        if A.hd:
            out.append("KempnerForge's ModelConfig has no head_dim (it is dim / n_heads)")
        if A.is_moe and A.n_dense:
            out.append("KempnerForge's moe_frequency cannot place leading dense layers")
        if A.is_moe and A.fe % 16:
            out.append("KempnerForge rounds the expert FFN width to a multiple of 16")
    if fw is Framework.DEEPSPEED and A.is_moe and (A.fe != A.f or A.shared):
        # Megatron-DeepSpeed @ f4157be megatron/model/transformer.py: experts are copies of the
        # dense MLP (--ffn-hidden-size), with no shared expert
        out.append(
            "Megatron-DeepSpeed experts have the dense FFN width and no shared experts "
            f"(this model: experts {A.fe} wide against {A.f}, {A.shared} shared)"
        )
    return out


def check_model(A: Arch, framework: Framework) -> None:
    """ValueError naming training.framework for a model its framework cannot build."""
    limits = model_limits(A, profile_of(framework))
    if limits:
        raise ValueError(
            f"training.framework: {framework.value} cannot build this model: " + "; ".join(limits)
        )


def sp_required(prof: Profile, A: Arch) -> bool:
    """tp > 1 needs sequence parallelism in this framework (for this model)."""
    return prof.sequence_parallel_required or (prof.moe_tp_needs_sp and A.is_moe)


def violations(
    p: Point,
    A: Arch,
    H: Hardware,
    training: TrainingSpec,
    search: SearchSpec,
    batch,  # noqa: ANN001  (space.Batch: fixed_seqs, cap_seqs)
    *,
    check_pins: bool = True,
) -> list[str]:
    """Structural rules a point breaks (memory is checked by the cost model)."""
    c, lay, out = p, p.lay, []
    s = training.seq_len
    prof = profile_of(training.framework)
    if lay.tp * lay.pp * lay.cp * lay.dp != lay.gpus:
        out.append(
            f"tp({lay.tp})*pp({lay.pp})*cp({lay.cp})*dp({lay.dp})={lay.gpus} is not the GPU count"
        )
    if lay.gpus > H.num_gpus:
        out.append(f"the layout needs {lay.gpus} GPUs but the cluster has {H.num_gpus}")
    elif lay.gpus != H.num_gpus and not search.allow_fewer_gpus:
        out.append(
            f"the layout uses {lay.gpus} of {H.num_gpus} GPUs (search.allow_fewer_gpus is off)"
        )
    if A.a % lay.tp or A.kv % lay.tp:
        out.append(f"tp ({lay.tp}) must divide the attention heads ({A.a}) and KV heads ({A.kv})")
    elif not tp_divides_model(A, lay.tp):
        out.append(f"tp ({lay.tp}) must divide the FFN width")
    if s % (2 * lay.tp * lay.cp):
        out.append(f"seq_len ({s}) must be divisible by 2*tp*cp = {2 * lay.tp * lay.cp}")
    if lay.pp * c.v > A.L + prof.extra_chunks:
        out.append(f"pp*virtual_stages ({lay.pp}*{c.v}) exceeds {_chunks(A, prof)}")
    if lay.pp == 1 and c.v > 1:
        out.append("virtual_stages > 1 needs pp > 1")
    out += _expert_violations(p, A, prof)
    if lay.sp and lay.tp == 1:
        out.append("sequence_parallel needs tp > 1")
    tokens = lay.dp * c.b * c.M * s
    if batch.fixed_seqs and tokens != batch.fixed_seqs * s:
        out.append(
            f"dp*micro_batch_size*num_microbatches*seq_len = {tokens} != global_batch_tokens ({batch.fixed_seqs * s})"
        )
    if batch.cap_seqs and tokens > batch.cap_seqs * s:
        out.append(
            f"global batch {tokens} tokens exceeds the critical batch ({batch.cap_seqs * s})"
        )
    out += _framework_violations(p, A, training, prof)
    if check_pins:
        out += _pin_violations(p, search)
    return out


def launcher_violations(p: Point, A: Arch, training: TrainingSpec, prof: Profile) -> list[str]:
    """What a framework cannot express in a layout, the cluster aside (tools/export/emit.py)."""
    lay, out = p.lay, []
    if not tp_divides_model(A, lay.tp):
        out.append(f"tp ({lay.tp}) must divide the heads, KV heads and FFN width")
    if lay.pp * p.v > A.L + prof.extra_chunks:
        out.append(f"pp*virtual_stages ({lay.pp}*{p.v}) exceeds {_chunks(A, prof)}")
    if lay.pp == 1 and p.v > 1:
        out.append("virtual_stages > 1 needs pp > 1")
    if training.precision is Precision.FP8 and not prof.fp8:
        out.append(f"{prof.title} has no FP8 training recipe")
    return out + _expert_violations(p, A, prof) + _framework_violations(p, A, training, prof)


def framework_violations(p: Point, A: Arch, training: TrainingSpec) -> list[str]:
    """The rules of the request's framework profile alone that a point breaks (what a layout
    the textbook would run loses under this framework)."""
    prof = profile_of(training.framework)
    out = _expert_violations(p, A, prof) + _framework_violations(p, A, training, prof)
    if p.lay.pp * p.v > A.L + prof.extra_chunks:
        out.append(f"{prof.title} runs at most {_chunks(A, prof)} pipeline chunks")
    return out


def _chunks(A: Arch, prof: Profile) -> str:
    if prof.extra_chunks:
        return f"the layers ({A.L}) + {prof.extra_chunks} (embedding and loss chunks)"
    return f"the layers ({A.L})"


def _expert_violations(p: Point, A: Arch, prof: Profile) -> list[str]:
    lay, out = p.lay, []
    if not A.is_moe:
        if p.ep != 1:
            out.append(f"ep ({p.ep}) > 1 needs an MoE model")
        if p.etp != lay.tp:
            out.append(f"etp ({p.etp}) must equal tp ({lay.tp}) for a dense model")
        return out
    if A.E % p.ep:
        out.append(f"ep ({p.ep}) must divide the experts ({A.E})")
    if A.fe % p.etp:
        out.append(f"etp ({p.etp}) must divide the expert FFN width ({A.fe})")
    if p.etp not in prof.etp_values(lay.tp, True):
        allowed = " or ".join(str(e) for e in prof.etp_values(lay.tp, True))
        out.append(f"{prof.title} splits experts with etp = {allowed} at tp={lay.tp}, not {p.etp}")
    if p.ep > 1 and not prof.expert_parallel:
        out.append(
            f"{prof.title} cannot place ep={p.ep} inside data parallelism: its expert-parallel "
            "ranks share a batch"
        )
    if not folds(lay.tp, lay.cp, lay.dp, p.ep, p.etp):
        out.append(
            f"ep*etp ({p.ep}*{p.etp}) must divide tp*cp*dp "
            f"({lay.tp}*{lay.cp}*{lay.dp} = {lay.tp * lay.cp * lay.dp})"
        )
    return out


def _framework_violations(p: Point, A: Arch, training: TrainingSpec, prof: Profile) -> list[str]:
    """What the framework of the request cannot express (solver/profiles/ cites each rule)."""
    lay, out, name = p.lay, [], prof.title
    fp8 = training.precision is Precision.FP8
    zs = prof.zero_allowed(lay.pp, lay.dp * lay.cp, fp8)
    if p.z not in zs:
        if lay.dp * lay.cp == 1:
            out.append(f"zero_stage {p.z} has nothing to shard over a single data-parallel rank")
        else:
            ok = " or ".join(f"{z} ({prof.zero_names.get(z, z)})" for z in sorted(zs))
            where = "with pipelining" if lay.pp > 1 else "without pipelining"
            why = ""
            if fp8 and p.z < prof.fp8_zero_min:
                why = " (its FP8 parameters need the distributed optimizer)"
            out.append(f"{name} runs zero_stage {ok} {where}, not zero_stage {p.z}{why}")
    dual = dualpipe(training)
    if dual and lay.pp > 1 and p.v != 2:
        out.append(f"DualPipeV runs two stages per rank (virtual_stages 2), not {p.v}")
    elif dual and lay.pp > 1 and not interleave_ok(prof, lay.pp, p.v, p.M, True):
        out.append(f"DualPipeV needs num_microbatches ({p.M}) >= 2*pp = {2 * lay.pp}")
    elif dual:
        pass
    elif p.v > 1 and not prof.interleaving:
        out.append(f"{name} has no interleaved pipeline (virtual_stages {p.v})")
    elif not interleave_ok(prof, lay.pp, p.v, p.M):
        out.append(
            f"{name}'s interleaved schedule needs num_microbatches ({p.M}) to be a multiple "
            + (
                f"of its rounds, max(1, M // pp) = {max(1, p.M // lay.pp)}"
                if prof.interleave_torch_rounds
                else f"of pp ({lay.pp})"
            )
        )
    if lay.cp > 1 and not prof.context_parallel:
        out.append(f"{name} has no context parallelism (cp {lay.cp})")
    if lay.tp > 1 and not prof.tensor_parallel:
        out.append(f"{name} has no tensor parallelism (tp {lay.tp})")
    if lay.pp > 1 and not prof.pipeline_parallel:
        out.append(f"{name} has no pipeline parallelism (pp {lay.pp})")
    if p.r is Recompute.SELECTIVE and not prof.selective_recompute:
        out.append(f"{name} recomputes whole layers or nothing (recompute SELECTIVE)")
    if lay.tp > 1 and not lay.sp and sp_required(prof, A):
        out.append(f"{name} needs sequence_parallel with tp > 1")
    if training.precision is Precision.FP8 and lay.tp > 1 and not prof.fp8_with_tp:
        out.append(f"{name} rejects FP8 with tp > 1")
    if A.is_moe and lay.pp > 1 and not prof.moe_with_pp:
        out.append(f"{name} rejects MoE with pp > 1")
    if A.tied and lay.pp > 1 and not prof.tied_with_pp:
        out.append(f"{name} rejects tied embeddings with pp > 1")
    return out


def _pin_violations(p: Point, q: SearchSpec) -> list[str]:
    got = {
        "tp": p.lay.tp,
        "pp": p.lay.pp,
        "dp": p.lay.dp,
        "cp": p.lay.cp,
        "ep": p.ep,
        "etp": p.etp,
        "virtual_stages": p.v,
        "micro_batch_size": p.b,
        "num_microbatches": p.M,
    }
    out = [
        f"search.{k} is pinned to {getattr(q, k)}"
        for k, v in got.items()
        if getattr(q, k) and getattr(q, k) != v
    ]
    if q.zero_stage is not None and q.zero_stage != p.z:
        out.append(f"search.zero_stage is pinned to {q.zero_stage}")
    if q.recompute is not None and q.recompute is not p.r:
        out.append(f"search.recompute is pinned to {q.recompute.value}")
    if q.sequence_parallel is not None and p.lay.tp > 1 and q.sequence_parallel != p.lay.sp:
        out.append(f"search.sequence_parallel is pinned to {q.sequence_parallel}")
    if p.lay.tp > 1 and q.sequence_parallel is None and not p.lay.sp:
        out.append("sequence_parallel is on whenever tp > 1 unless pinned off")
    return out
