"""Why nothing fits, the least memory any layout needs, and the smallest cluster that fits.

Every loop here calls `check()` (the solve's stop event and deadline: it raises Stopped), so an
explanation never outlives the request's time limit or a cancelled call; what it could not
finish in time it says it did not finish.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

from annotated_types import Le

from meshplan.solver.costmodel import CostModel, Point
from meshplan.solver.costmodel.model import MEMORY_UNIT
from meshplan.solver.cpsat.tables import Stopped
from meshplan.solver.hardware import GIB
from meshplan.solver.results import Explanation
from meshplan.solver.rules import framework_violations
from meshplan.solver.schema import ClusterSpec, Framework
from meshplan.solver.space import Space, fewer_gpu_counts, fit_order

Check = Callable[[], None]
_CHECK_EVERY = 512  # layouts between two looks at the stop event and the deadline
_REFUSAL_POINTS = 20_000  # points of the textbook's space read for the framework's refusal
# Layouts feasible_at scores one by one before the rest at once (one point costs a fraction of a
# batch's array operations): of the counts that fit in the throughput sweep's searches, the first
# layout in fit order fits in 62 of 84, the second in 15.
_ONE_BY_ONE = 2


def _never() -> None:
    return None


def max_gpus() -> int:
    """The largest cluster a request may name (the schema's cap on cluster.num_gpus)."""
    caps = [m.le for m in ClusterSpec.model_fields["num_gpus"].metadata if isinstance(m, Le)]
    return int(min(caps))


def _needs(sp: Space, check: Check) -> Iterator[tuple[Point, int]]:
    """Each layout's least-memory point and the memory it needs (model units), computed for
    _CHECK_EVERY layouts at a time, checking the stop event between them."""
    lays = sp.layouts
    for i in range(0, len(lays), _CHECK_EVERY):
        check()
        yield from sp.least_memory_needs(lays[i : i + _CHECK_EVERY])


def frugal(sp: Space, check: Check = _never) -> tuple[Point, int] | None:
    """The least-memory point of the space (memory falls monotonically along each axis chosen:
    full recomputation, the smallest micro-batch and count, the most experts per rank, one model
    chunk; of the ZeRO stages, the one of `least_zero_stages` that needs least); None when the
    space has no layout at all."""
    return min(_needs(sp, check), key=lambda pn: pn[1], default=None)


def feasible_at(sp: Space, check: Check = _never) -> bool:
    """Whether some layout's least-memory point fits, _CHECK_EVERY layouts at a time (the first
    _ONE_BY_ONE one by one), stopping at the first batch where one does; those that split
    activations most (the largest tp·cp, then the fewest stages) first: they fit most often
    (measured on the throughput sweep's searches: the first that fits is among the first 8 in
    this order, median the first)."""
    lays = sorted(sp.layouts, key=fit_order)
    for i in range(0, len(lays), _CHECK_EVERY):
        check()
        if sp.least_memory_fits(lays[i : i + _CHECK_EVERY], first=_ONE_BY_ONE if i == 0 else 0):
            return True
    return False


def space_counts(sp: Space) -> list[int]:
    """The GPU counts the space's layouts use: the request's, and fewer when it allows them."""
    n = sp.H.num_gpus
    return fewer_gpu_counts(n, sp.H.gpn) if sp.search.allow_fewer_gpus else [n]


def known_infeasible(sp: Space, known: dict[int, bool]) -> bool:
    """Whether every count of the space is known not to fit (`known`: cache.fits_by_count):
    then no layout's least-memory point fits, and nothing does."""
    return all(known.get(g) is False for g in space_counts(sp))


def known_feasible(sp: Space, known: dict[int, bool]) -> bool:
    """Whether some count of the space is known to fit (`known`: cache.fits_by_count)."""
    return any(known.get(g) for g in space_counts(sp))


def _gib(x: float) -> str:
    return f"{x / GIB:.1f} GiB"


def framework_refusal(sp: Space, check: Check = _never) -> str | None:
    """When the request's framework profile is what leaves no layout: the rules it applies to
    the layouts the textbook (the GENERIC profile) would run under the same pins, in words; None
    when the textbook has no layout either, or its layouts break no rule of the framework."""
    if sp.training.framework is Framework.GENERIC:
        return None
    tr = sp.training.model_copy(update={"framework": Framework.GENERIC})
    cm = CostModel(sp.A, sp.H, tr, sp.search, sp.cm.ctx.K)
    gen = Space.build(sp.A, sp.H, tr, sp.search, cm, prune=False)
    counts: Counter[str] = Counter()
    seen = 0
    for i, p in enumerate(gen.points()):
        if i % _CHECK_EVERY == 0:
            check()
        if i >= _REFUSAL_POINTS:
            break
        broken = framework_violations(p, sp.A, sp.training)
        if not broken:
            continue
        counts.update(set(broken))
        seen += 1
    if not seen:
        return None
    always = [m for m, k in counts.most_common() if k == seen]
    fw = f"training.framework {sp.training.framework.value}"
    if always:
        return f"no layout these pins leave runs under {fw}: " + "; ".join(always[:2])
    common = "; ".join(m for m, _ in counts.most_common(3))
    return f"no layout these pins leave runs under {fw}, each breaks one of: {common}"


def reason(sp: Space, check: Check = _never) -> tuple[str, int]:
    """Words a person acts on, and the least bytes per GPU any layout needs (0 if none)."""
    n = sp.H.num_gpus
    f = frugal(sp, check)
    if f is None or not sp.layouts or f[1] <= sp.cm.budget:
        # the rules refuse (the least-memory point of a layout they leave would fit)
        refusal = framework_refusal(sp, check)
        if refusal is not None:
            return refusal, 0
    if f is not None and (not sp.layouts or f[1] <= sp.cm.budget):
        return (
            f"no layout of {n} GPUs obeys the rules and pins together (virtual stages, "
            "micro-batches and the batch); memory is not what refuses"
        ), 0
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
    if sp.cm.ctx.budget <= 0:
        return sp.cm.ctx.usable_words(), need
    c = p.config()
    chunks = f" with {c.virtual_stages} virtual stages" if c.virtual_stages > 1 else ""
    return (
        f"even tp={c.tp}, pp={c.pp}{chunks}, cp={c.cp}, dp={c.dp}, ZeRO-{c.zero_stage}, "
        f"{c.recompute.value.lower()} recomputation and micro-batch {c.micro_batch_size} need "
        f"{_gib(need)} per GPU against {_gib(sp.cm.ctx.budget)} usable of {_gib(sp.H.hbm)} HBM "
        f"(after the {_gib(sp.cm.ctx.reserve_bytes)} reserve and "
        f"{sp.cm.ctx.fragmentation:.0%} fragmentation)"
    ), need


class MinGpus:
    """The smallest whole-node count (or sub-node power of two) that fits, found by doubling
    from the request's count up to the schema's cap, then bisection; `searched_to` is the
    largest count tried so far (kept when the search is stopped)."""

    def __init__(
        self,
        rebuild: Callable[[int], Space],
        check: Check = _never,
        known: dict[int, bool] | None = None,
    ) -> None:
        self.rebuild, self.check = rebuild, check
        self.known = {} if known is None else known  # count -> fits (cache.fits_by_count)
        self.searched_to = 0

    def ok(self, k: int) -> bool:
        self.check()
        self.searched_to = max(self.searched_to, k)
        got = self.known.get(k)
        if got is None:  # only a finished answer is kept (Stopped leaves none)
            got = self.known[k] = feasible_at(self.rebuild(k), self.check)
        return got

    def find(self, n: int, gpn: int, limit: int) -> int:
        """0 when no count up to `limit` fits."""
        lo, hi = 0, min(max(n, 1), limit)
        while not self.ok(hi):
            if hi >= limit:
                return 0
            lo, hi = hi, min(hi * 2, limit)
        cands = sorted(
            {k for k in range(gpn, hi + 1, gpn)}
            | {1 << i for i in range(hi.bit_length()) if (1 << i) <= hi and (1 << i) < gpn}
        )
        cands = [k for k in cands if k > lo] or [hi]
        lo_i, hi_i = 0, len(cands) - 1
        while lo_i < hi_i:  # memory falls with more GPUs; divisibility can break it: verify below
            mid = (lo_i + hi_i) // 2
            if self.ok(cands[mid]):
                hi_i = mid
            else:
                lo_i = mid + 1
        best = cands[lo_i] if self.ok(cands[lo_i]) else hi
        # Divisibility breaks bisection most at counts with few factors (40 GPUs: pp of 5):
        # the power-of-two counts below the answer, which admit the most layouts, are tried too.
        return next((k for k in cands if k < best and k & (k - 1) == 0 and self.ok(k)), best)


def min_gpus(rebuild: Callable[[int], Space], n: int, gpn: int, limit: int | None = None) -> int:
    """Smallest whole-node count (or sub-node power of two) that fits, up to `limit` (default:
    the schema's cap on cluster.num_gpus); 0 if none does. `rebuild(count) -> Space` builds the
    same request on `count` GPUs."""
    return MinGpus(rebuild).find(n, gpn, limit or max_gpus())


def explain(
    sp: Space,
    rebuild: Callable[[int], Space],
    search_min: bool,
    check: Check = _never,
    known: dict[int, bool] | None = None,
) -> Explanation:
    """The explanation of an infeasible request, computed under `check` (the solve's stop event
    and deadline); a part cut short says so instead of running on. `known`: whether the request
    fits on k GPUs, by k, as far as known (read and filled by the search for the smallest
    cluster)."""
    try:  # a pure function of the space: kept with it for a request that repeats it
        text, need = sp.kept(("reason",), lambda: reason(sp, check))
    except Stopped:
        return Explanation(
            reason=(
                f"no layout of {sp.H.num_gpus} GPUs fits; the time limit (or a cancel) stopped "
                "the search for the least memory a layout needs"
            ),
            min_gpus=0,
            min_memory_bytes=0,
        )
    if need and known is not None:  # memory refuses every layout, so each count of the space
        known.update(dict.fromkeys(space_counts(sp), False))
    if not search_min or need == 0:  # no layout to size, or the rules refuse at any size
        return Explanation(reason=text, min_gpus=0, min_memory_bytes=need)
    limit = max_gpus()
    search = MinGpus(rebuild, check, known)
    try:
        m = search.find(sp.H.num_gpus, sp.H.gpn, limit)
    except Stopped:
        text += (
            "; the time limit (or a cancel) stopped the search for the smallest cluster that "
            f"fits after trying up to {search.searched_to} GPUs"
        )
        return Explanation(reason=text, min_gpus=0, min_memory_bytes=need)
    if m:
        text += f"; the smallest cluster that fits is {m} GPUs"
    else:
        text += f"; no cluster of up to {limit:,} GPUs fits this request"
    return Explanation(reason=text, min_gpus=m, min_memory_bytes=need)
