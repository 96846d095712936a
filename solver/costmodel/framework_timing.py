"""The overlaps one request runs with: its framework profile's defaults (`Profile.timing` in
solver/profiles/, with sources), overridden by the request's `training.*_comm_overlap`."""

from __future__ import annotations

from meshplan.solver.profiles import ALL_STAGES, profile_of
from meshplan.solver.record import record
from meshplan.solver.schema import PipelineSchedule, TrainingSpec


@record(frozen=True)
class Overlaps:
    """The overlaps one request runs with: the profile's defaults, overridden by the request."""

    tp: bool
    dp_stages: frozenset[int]
    cp: bool
    ep: bool
    pp: bool
    ep_dedup: bool = False
    cp_ring: bool = True
    ep_needs_chunks: bool = False  # the ep overlap runs only with v > 1 (pp > 1), no full recompute
    ep_balanced: bool = False  # routing forced to balance: every ep rank gets the mean load
    # DualPipeV (training.pipeline_schedule): with pp > 1 each rank runs a forward and a backward
    # chunk of two micro-batches at once, and their all-to-alls and stage sends hide behind each
    # other's compute (DeepSeek-V3 report §3.2.1; deepseek-ai/DualPipe @ 3da1bbe dualpipe/
    # dualpipev.py _forward_backward_chunk -> overlapped_forward_backward)
    dualpipe: bool = False
    dp_per_chunk: bool = False  # FrameworkTiming.dp_per_chunk
    tp_own_shard: bool = False  # FrameworkTiming.tp_own_shard

    def ep_runs(self, pp: int, v: int, full_recompute: bool) -> bool:
        """Whether the ep overlap holds on this layout (else the all-to-all is exposed)."""
        if self.dualpipe and pp > 1:
            return True
        if not self.ep:
            return False
        return not self.ep_needs_chunks or ((pp == 1 or v > 1) and not full_recompute)


def overlaps_for(training: TrainingSpec) -> Overlaps:
    f = profile_of(training.framework).timing

    def pick(asked: bool | None, default: bool) -> bool:
        return default if asked is None else asked

    dp = f.dp_stages
    if training.dp_comm_overlap is not None:
        dp = ALL_STAGES if training.dp_comm_overlap else frozenset()
    dual = training.pipeline_schedule is PipelineSchedule.DUALPIPE_V
    return Overlaps(
        tp=pick(training.tp_comm_overlap, f.tp),
        dp_stages=dp,
        cp=pick(training.cp_comm_overlap, f.cp),
        ep=pick(training.ep_comm_overlap, f.ep),
        pp=f.pp or dual,
        ep_dedup=pick(training.ep_dispatch_dedup, f.ep_dedup),
        cp_ring=f.cp_ring,
        ep_needs_chunks=f.ep_overlap_needs_chunks,
        ep_balanced=training.moe_router_force_balance,
        dualpipe=dual,
        dp_per_chunk=f.dp_per_chunk,
        tp_own_shard=f.tp_own_shard,
    )
