"""The overlaps a plan was timed with, as each framework's switches (tools/export/emit.py).

The time model assumes the overlaps of the request's framework profile (`Profile.timing` in
solver/profiles/), overridden by the request's `training.*_comm_overlap` and
`ep_dispatch_dedup` (solver/costmodel/framework_timing.py). An export turns them on in the target
framework's own switches, names at the commits solver/profiles/ cites:

- Megatron-LM (megatron/training/arguments.py, megatron/core/transformer/transformer_config.py
  @ d98e8a6): --tp-comm-overlap (needs --sequence-parallel), --overlap-grad-reduce and, with the
  distributed optimizer or Megatron-FSDP, --overlap-param-gather; --cp-comm-type p2p (the ring
  Transformer Engine overlaps hop by hop); --overlap-moe-expert-parallel-comm (the 1F1B
  all-to-all overlap: needs ep > 1, virtual stages when pp > 1, no full recomputation);
  --moe-token-dispatcher-type flex with --moe-enable-deepep (DeepEP's per-node dispatch). Pipeline
  sends overlap only in the interleaved schedule (overlap_p2p_comm is forced off without it).
- torchtitan (torchtitan/config/job_config.py @ e347b1e): parallelism.enable_async_tensor_parallel,
  which "requires 'model' in --compile.components and --compile.enable"
  (torchtitan/distributed/tensor_parallel.py); compile.components also follow the memory bill
  (training.compiled: 'model'; loss_kernel COMPILED: 'loss'); parallelism.context_parallel_rotate_method
  "allgather"; FSDP2 prefetches its all-gathers on its own.
- DeepSpeed (deepspeed/runtime/zero/config.py @ 38327e0): zero_optimization.overlap_comm.
- KempnerForge: FSDP2 overlaps on its own; nothing else is switchable.

Where the target framework has no switch for an assumed overlap, the snippet says so in a
comment (its run will be slower than the plan says); where Megatron refuses the combination
outright, `megatron_conflicts` names it and the export is refused.
"""

from __future__ import annotations

from meshplan.solver.arch import Arch
from meshplan.solver.costmodel.framework_timing import Overlaps, overlaps_for
from meshplan.solver.schema import LossKernel, ParallelConfig, Recompute, TrainingSpec

Args = list[tuple[str, object]]


def assumed(t: TrainingSpec) -> Overlaps:
    """The overlaps the time model scored the plan with."""
    return overlaps_for(t)


def _dp_overlapped(c: ParallelConfig, ov: Overlaps) -> bool:
    return c.dp * c.cp > 1 and c.zero_stage in ov.dp_stages


def describe(c: ParallelConfig, A: Arch, t: TrainingSpec) -> str:
    """One header line: what the time model overlapped for this layout."""
    ov = assumed(t)
    parts = []
    if c.tp > 1:
        parts.append(f"tp {'overlapped' if ov.tp else 'exposed'}")
    if c.dp * c.cp > 1:
        parts.append(f"dp/FSDP {'overlapped' if _dp_overlapped(c, ov) else 'exposed'}")
    if c.cp > 1:
        how = "ring hop by hop" if ov.cp_ring else "all-gather behind the first block"
        parts.append(f"cp {how if ov.cp else 'exposed'}")
    if A.is_moe and c.ep > 1:
        ep = "overlapped with another micro-batch" if _ep_overlapped(c, ov) else "exposed"
        parts.append(f"ep all-to-all {ep}{', DeepEP dispatch' if ov.ep_dedup else ''}")
    if c.pp > 1:
        parts.append(f"pipeline sends {'overlapped' if ov.pp else 'exposed'}")
    return "time model overlaps: " + ("; ".join(parts) if parts else "no communication")


def megatron_conflicts(c: ParallelConfig, A: Arch, t: TrainingSpec) -> list[str]:
    """Overlaps the plan was timed with that Megatron-LM refuses for this layout."""
    ov, out = assumed(t), []
    if ov.tp and c.tp > 1 and not c.sequence_parallel:
        out.append(
            "training.tp_comm_overlap (--tp-comm-overlap) needs sequence parallelism "
            "(arguments.py: 'Tensor parallel communication/GEMM overlap can happen only when "
            "sequence parallelism is enabled')"
        )
    return out


def _ep_overlapped(c: ParallelConfig, ov: Overlaps) -> bool:
    """The ep overlap the time model credited this layout with (none where the framework
    refuses it: Megatron's needs virtual stages when pp > 1 and no full recomputation)."""
    return ov.ep_runs(c.pp, c.virtual_stages, c.recompute is Recompute.FULL)


def megatron(c: ParallelConfig, A: Arch, t: TrainingSpec) -> tuple[Args, list[str]]:
    """Megatron-LM arguments for the assumed overlaps, and notes for what it cannot do."""
    ov, args, notes = assumed(t), [], []
    if ov.tp and c.tp > 1:
        args.append(("--tp-comm-overlap", None))
    if _dp_overlapped(c, ov):
        args.append(("--overlap-grad-reduce", None))
        if c.zero_stage >= 1:  # distributed optimizer or Megatron-FSDP
            args.append(("--overlap-param-gather", None))
    elif c.dp * c.cp > 1 and c.zero_stage >= 2:
        notes.append("Megatron-FSDP always overlaps its gathers and reductions")
    if c.cp > 1:
        args.append(("--cp-comm-type", "p2p"))
        if not ov.cp:
            notes.append("Transformer Engine's p2p ring always overlaps the K/V exchange")
    if A.is_moe and c.ep > 1:
        if _ep_overlapped(c, ov):
            args.append(("--overlap-moe-expert-parallel-comm", None))
        elif ov.ep:
            notes.append(
                "the expert all-to-all is timed exposed: --overlap-moe-expert-parallel-comm "
                "needs virtual stages when pp > 1 and no full recomputation (transformer_config.py)"
            )
        if ov.ep_dedup:
            args += [("--moe-token-dispatcher-type", "flex"), ("--moe-enable-deepep", None)]
    if ov.pp and c.pp > 1 and c.virtual_stages == 1:
        notes.append("Megatron overlaps pipeline sends only in the interleaved schedule")
    connections = device_connections(c, "--overlap-moe-expert-parallel-comm" in dict(args))
    if connections:
        notes.append(connections)
    return args, notes


def device_connections(c: ParallelConfig, ep_overlap: bool) -> str:
    """What Megatron-LM's validate_args asks of CUDA_DEVICE_MAX_CONNECTIONS for this layout
    (megatron/training/arguments.py @ d98e8a6, lines 1166 and 1452-1480; Hopper and before)."""
    if c.zero_stage >= 2:  # Megatron-FSDP: asserted in any layout, on any GPU
        return (
            "leave CUDA_DEVICE_MAX_CONNECTIONS unset (or above 1): Megatron-FSDP refuses 1 "
            "('FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset', arguments.py)"
        )
    if c.tp == 1 and c.cp == 1:
        return ""
    if ep_overlap:  # only warned: 1 favours tp/cp, a larger value the all-to-all overlap
        return (
            "CUDA_DEVICE_MAX_CONNECTIONS: 1 favours tp/cp, 32 the expert all-to-all overlap "
            "(arguments.py warns; either runs)"
        )
    return "run with CUDA_DEVICE_MAX_CONNECTIONS=1 (tp or cp > 1; arguments.py asserts it before Blackwell)"


def torchtitan(c: ParallelConfig, A: Arch, t: TrainingSpec) -> tuple[dict, dict, list[str]]:
    """(parallelism keys, other sections, notes) for the assumed overlaps in torchtitan."""
    ov, par, other, notes = assumed(t), {}, {}, []
    async_tp = ov.tp and c.tp > 1
    if async_tp:
        par["enable_async_tensor_parallel"] = True
    # compile.components as the plan was billed: the blocks when training.compiled (or async
    # TP, which needs them compiled), the loss when its kernel is LossKernel.COMPILED
    components = ["model"] if (t.compiled or async_tp) else []
    if t.loss_kernel is LossKernel.COMPILED:
        components.append("loss")
    if components:
        other["compile"] = {"enable": True, "components": components}
    if async_tp and not t.compiled:
        notes.append(
            "async TP compiles the blocks, whose activations the plan billed eager "
            "(training.compiled bills them compiled)"
        )
    if c.cp > 1:
        par["context_parallel_rotate_method"] = "allgather"
        if ov.cp and ov.cp_ring:
            notes.append("torchtitan has no ring K/V exchange: it all-gathers after one block")
    if c.dp * c.cp > 1 and not _dp_overlapped(c, ov):
        notes.append("FSDP2 always prefetches its all-gathers")
    if A.is_moe and c.ep > 1 and (ov.ep or ov.ep_dedup):
        notes.append("torchtitan has no all-to-all overlap or DeepEP dispatch for this schedule")
    if ov.pp and c.pp > 1:
        notes.append("torch.distributed.pipelining does not overlap its sends")
    return par, other, notes


def deepspeed(c: ParallelConfig, A: Arch, t: TrainingSpec) -> tuple[bool, list[str]]:
    """(zero_optimization.overlap_comm, notes) for the assumed overlaps in DeepSpeed."""
    ov, notes = assumed(t), []
    if ov.tp and c.tp > 1:
        notes.append("Megatron-DeepSpeed has no tensor-parallel overlap")
    if A.is_moe and c.ep > 1 and (ov.ep or ov.ep_dedup):
        notes.append("DeepSpeed-MoE has no all-to-all overlap or DeepEP dispatch")
    return _dp_overlapped(c, ov), notes


def kempnerforge(c: ParallelConfig, A: Arch, t: TrainingSpec) -> list[str]:
    """Notes for the assumed overlaps KempnerForge cannot switch on."""
    ov, notes = assumed(t), []
    if ov.tp and c.tp > 1:
        notes.append("KempnerForge's DTensor TP has no async overlap")
    if c.dp * c.cp > 1 and not _dp_overlapped(c, ov):
        notes.append("FSDP2 always prefetches its all-gathers")
    return notes


def note_lines(notes: list[str]) -> list[str]:
    return [f"note: {n}" for n in notes]
