"""What a replan moves and whether it restarts: the state the worst-placed GPU receives when
data-parallel shards are recut, and the changes that re-shard the model."""

from __future__ import annotations

from meshplan.solver.results import MemoryBill
from meshplan.solver.scheduler.answers import StateMove
from meshplan.solver.schema import ParallelConfig

SHAPE = ("tp", "pp", "cp", "ep", "virtual_stages")  # the model-parallel shape


def _worst_receive(need_after: int, s0: int, s1: int, old_ranks: int) -> int:
    """Bytes the worst GPU receives of a tenant sharded s0 ways before and s1 ways after (1:
    replicated), each rank holding a contiguous 1/s share, ranks keeping their order; rank r of
    the s1 existed before iff r < old_ranks. Exact: shares in units of 1/(s0*s1)."""
    worst = 0
    for r in range(s1):
        lo, hi = r * s0, (r + 1) * s0  # the new share
        if r >= old_ranks:
            kept = 0
        elif s0 == 1:
            kept = hi - lo  # it held everything
        else:
            olo, ohi = r * s1, (r + 1) * s1
            kept = max(0, min(hi, ohi) - max(lo, olo)) if r < s0 else 0
        worst = max(worst, s0 - kept)
    return -(-worst * need_after // s0)


def state_move(before: ParallelConfig, after: ParallelConfig, mem: MemoryBill) -> StateMove:
    """What the worst GPU receives: everything when the model-parallel shape changes, else the
    part of each data-parallel shard it did not hold (ZeRO-1+ shards the optimizer, ZeRO-3 the
    weights, over dp*cp)."""
    same = all(getattr(before, k) == getattr(after, k) for k in SHAPE)
    if not same:
        w, o = mem.weights, mem.optimizer
    else:
        g0, g1 = before.dp * before.cp, after.dp * after.cp
        o = _worst_receive(
            mem.optimizer,
            g0 if before.zero_stage >= 1 else 1,
            g1 if after.zero_stage >= 1 else 1,
            g0,
        )
        w = _worst_receive(
            mem.weights, g0 if before.zero_stage == 3 else 1, g1 if after.zero_stage == 3 else 1, g0
        )
    return StateMove(
        weights_bytes=w,
        optimizer_bytes=o,
        total_bytes=w + o,
        state_bytes_per_gpu=mem.weights + mem.optimizer,
    )


def restart(before: ParallelConfig, after: ParallelConfig) -> tuple[bool, str]:
    changed = [k for k in SHAPE if getattr(before, k) != getattr(after, k)]
    if changed:
        return True, f"{', '.join(changed)} change: the model is re-sharded from a checkpoint"
    z0, z1 = before.zero_stage, after.zero_stage
    if (z0 >= 1) != (z1 >= 1) or (z0 == 3) != (z1 == 3):
        return True, f"the ZeRO stage changes what is sharded ({z0} -> {z1})"
    return False, (
        "only data parallelism and the batch split change: an elastic data-parallel resize "
        "(torchft, Bamboo) keeps the model shards in place"
    )
