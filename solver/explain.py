"""Why nothing fits, the least memory any layout needs, and the smallest cluster that fits."""

from __future__ import annotations

from meshplan.solver.costmodel import Point
from meshplan.solver.costmodel.model import MEMORY_UNIT
from meshplan.solver.hardware import GIB
from meshplan.solver.results import Explanation
from meshplan.solver.space import Space


def frugal(sp: Space) -> tuple[Point, int] | None:
    """The least-memory point of the space (memory falls monotonically along each axis chosen:
    the highest ZeRO stage, full recomputation, the smallest micro-batch and count, the most
    experts per rank, one model chunk); None when the space has no layout at all."""
    best: tuple[Point, int] | None = None
    for lay in sp.all_layouts:
        p = sp.least_memory_point(lay)
        if p is None:
            continue
        need = max(sp.cm.stage_bytes(p, st) for st in ("first", "last"))
        if best is None or need < best[1]:
            best = (p, need)
    return best


def feasible_at(sp: Space) -> bool:
    f = frugal(sp)
    return f is not None and f[1] <= sp.cm.budget


def _gib(x: float) -> str:
    return f"{x / GIB:.1f} GiB"


def reason(sp: Space) -> tuple[str, int]:
    """Words a person acts on, and the least bytes per GPU any layout needs (0 if none)."""
    n = sp.H.num_gpus
    f = frugal(sp)
    if f is None:
        if not sp.tp_values():
            return (
                "no tensor-parallel degree divides the heads, the KV heads, the FFN width and "
                "seq_len/2 within a node (or matches the pin)"
            ), 0
        if sp.batch.fixed_seqs:
            return (
                f"no layout of {n} GPUs splits the global batch of {sp.batch.fixed_seqs} "
                f"sequences into dp x micro_batch_size x num_microbatches under the pins"
            ), 0
        return f"no tp*pp*cp*dp factorisation of {n} GPUs satisfies the rules and pins", 0
    p, need = f
    need *= MEMORY_UNIT
    c = p.config()
    return (
        f"even tp={c.tp}, pp={c.pp}, cp={c.cp}, dp={c.dp}, ZeRO-{c.zero_stage}, "
        f"{c.recompute.value.lower()} recomputation and micro-batch {c.micro_batch_size} need "
        f"{_gib(need)} per GPU against {_gib(sp.cm.ctx.budget)} usable of {_gib(sp.H.hbm)} HBM "
        f"(after the {_gib(sp.cm.ctx.reserve_bytes)} reserve and "
        f"{sp.cm.ctx.fragmentation:.0%} fragmentation)"
    ), need


def min_gpus(rebuild, n: int, gpn: int, limit: int = 1 << 21) -> int:  # noqa: ANN001
    """Smallest whole-node count (or sub-node power of two) that fits: doubling, then bisection.

    `rebuild(count) -> Space` builds the same request on `count` GPUs."""

    def ok(k: int) -> bool:
        return feasible_at(rebuild(k))

    hi = max(n, 1)
    while not ok(hi):
        hi *= 2
        if hi > limit:
            return 0
    cands = sorted(
        {k for k in range(gpn, hi + 1, gpn)}
        | {1 << i for i in range(hi.bit_length()) if (1 << i) <= hi and (1 << i) < gpn}
    )
    cands = [k for k in cands if k > (hi // 2 if hi > n else 0)]
    lo_i, hi_i = 0, len(cands) - 1
    while lo_i < hi_i:  # memory falls with more GPUs; divisibility can break it, so verify below
        mid = (lo_i + hi_i) // 2
        if ok(cands[mid]):
            hi_i = mid
        else:
            lo_i = mid + 1
    return cands[lo_i] if ok(cands[lo_i]) else hi


def explain(sp: Space, rebuild, search_min: bool) -> Explanation:  # noqa: ANN001
    text, need = reason(sp)
    m = min_gpus(rebuild, sp.H.num_gpus, sp.H.gpn) if search_min else 0
    if m:
        text += f"; the smallest cluster that fits is {m} GPUs"
    return Explanation(reason=text, min_gpus=m, min_memory_bytes=need)
