"""The least-memory points of many layouts at once, from the rows' arrays.

`Space.least_memory_point` of one layout reads a few small tables by the layout's (dp, pp),
(tp, cp, dp) and (pp > 1, dp·cp > 1); over hundreds of layouts (whether some least-memory point
fits: the planner's first check, and each count the explanation's search for the smallest
cluster tries) a Python call and a Point per layout, then `Points.of` reading each Point again,
cost more than the memory sums that follow. Here each table is read once per distinct key
(a few dozen) and gathered to the layouts with numpy: the same points, as `Points` (the same
integers at each point: a point's memory is its own, whatever its position in the domains).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from meshplan.solver.costmodel.model import STAGES
from meshplan.solver.costmodel.point import Rows
from meshplan.solver.costmodel.terms import Points, int_starts_many
from meshplan.solver.schema import Recompute, SearchSpec

if TYPE_CHECKING:
    from meshplan.solver.costmodel import CostModel


class Space(Protocol):
    """What `least_points` reads of a `space.Space` (which calls it): the pins and the small
    tables its `least_memory_point` reads, by key."""

    search: SearchSpec
    _least_db: dict[int, tuple[int, int]]
    _least_r: Recompute

    def _least_db_interleaved(self, dp: int, pp: int) -> tuple[int, int] | None: ...
    def _least_te(self, tp: int, cp: int, dp: int) -> tuple[int, int] | None: ...
    def _zero_values(self, pipelined: bool, sharded: bool) -> list[int]: ...


def least_zero_stages(zs: Sequence[int]) -> list[int]:
    """The ZeRO stages of `zs` (those a framework runs on a row) whose points can need least
    memory, the higher first: from ZeRO-0 to ZeRO-2 each stage shards more of the state and no
    memory term grows, so the highest below 3; and ZeRO-3, whose gathered layers' weights and
    gradient (two layers and the root unit: costmodel/memory.py) can outweigh what sharding the
    weights saves (few layers a stage, or a small shard group under hybrid sharding)."""
    below = [z for z in zs if z < 3]
    return ([3] if 3 in zs else []) + ([max(below)] if below else [])


_BITS = 21  # row fields packed into one int64 key, three at most (each below 2^21)


def _distinct(*cols: np.ndarray) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """The distinct rows of these columns (int64 arrays of one length, non-negative) as tuples
    of Python ints, and each row's position among them."""
    if int(max(c.max() for c in cols)) < 1 << _BITS:
        key = np.zeros(len(cols[0]), dtype=np.int64)
        for c in cols:
            key = (key << _BITS) | c
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        fields = [c[first].tolist() for c in cols]
        return list(zip(*fields, strict=True)), inv.reshape(-1)
    uniq, inv = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
    return [tuple(r) for r in uniq.tolist()], inv.reshape(-1)


def least_points(sp: Space, rows: Rows, at: Sequence[int]) -> Points | None:
    """The least-memory candidates (`Space.least_memory_points`) of the layouts at positions
    `at` of `rows`, those that have one, as Points over `rows` (a layout's candidates adjacent,
    in its order); None when none has one."""
    at = np.asarray(at, dtype=np.int64)
    if not len(at):
        return None
    tp, pp, cp, dp = rows.tp[at], rows.pp[at], rows.cp[at], rows.dp[at]
    vs = sp.search.virtual_stages
    v = np.where(pp > 1, vs, 1) if vs else np.ones(len(at), dtype=np.int64)
    ppi = np.where(v > 1, pp, 0)  # interleaved: the least (b, M) the schedule runs, by (dp, pp)
    keys, inv = _distinct(dp, ppi)
    got = [sp._least_db.get(d) if p == 0 else sp._least_db_interleaved(d, p) for d, p in keys]
    b, m, ok = _gather(got, inv)
    # the largest expert group folding into tp·cp·dp: a function of tp and that product, read
    # at the first layout of each (rules.folds)
    keys, inv = _distinct(tp, tp * cp * dp)
    first = np.zeros(len(keys), dtype=np.int64)
    first[inv[::-1]] = np.arange(len(inv) - 1, -1, -1)  # each key's first row
    reps = zip(tp[first].tolist(), cp[first].tolist(), dp[first].tolist(), strict=True)
    ep, etp, ok_te = _gather([sp._least_te(*k) for k in reps], inv)
    zkey = (pp > 1).astype(np.int64) * 2 + (dp * cp > 1)
    # each layout's candidates (least_zero_stages), adjacent and in order: a row of Z per key
    cands = [least_zero_stages(sp._zero_values(k > 1, k % 2 == 1)) for k in range(4)]
    zs = np.full((4, max(1, *map(len, cands))), -1, dtype=np.int64)
    for k, c in enumerate(cands):
        zs[k, : len(c)] = c
    zz = zs[zkey]
    keep, j = np.nonzero((zz >= 0) & (ok & ok_te)[:, None])  # row-major: a layout's together
    if not len(keep):
        return None
    z = zz[keep, j]
    b, m, ep, etp = b[keep], m[keep], ep[keep], etp[keep]
    tp, pp, cp, dp, v = tp[keep], pp[keep], cp[keep], dp[keep], v[keep]
    axes: dict[str, tuple[list, np.ndarray]] = {}
    for a, cols in (
        ("pv", (pp, v)),
        ("db", (dp, b, m)),
        ("te", (tp, ep, etp)),
        ("z", (z,)),
    ):
        dom, idx = _distinct(*cols)
        axes[a] = ([d[0] for d in dom] if a == "z" else dom, idx)
    axes["r"] = ([sp._least_r], np.zeros(len(keep), dtype=np.int64))
    return Points(at[keep], {a: axes[a] for a in ("pv", "db", "te", "r", "z")})


def _gather(got: list, inv: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row, the two ints of its key's pair (0 where None) and whether it has one."""
    a = np.array([x if x is not None else (0, 0) for x in got], dtype=np.int64).reshape(-1, 2)
    has = np.array([x is not None for x in got], dtype=bool)
    return a[inv, 0], a[inv, 1], has[inv]


def memory_starts(cm: CostModel, rows: Rows, keys: set[tuple[object, int]]) -> None:
    """The integer start tables over `rows` of every group of the memory sums, at these
    (recomputation, ZeRO stage) values, computed together (`int_starts_many`: one rounding pass
    over all their terms, the same integers `CostModel.fits` reads group by group)."""
    asks = []
    for st in STAGES:
        m = cm.memory[st]
        for comp in (m.base, *(c for pair in m.pairs for c in pair)):
            for g in comp.groups:
                vals = [None] if g.sel is None else {r if g.sel == "r" else z for r, z in keys}
                asks += [(g, None if v is None else g.key(v), comp.scale, comp.up) for v in vals]
    int_starts_many(rows, asks)
