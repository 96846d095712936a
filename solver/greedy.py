"""The recipe of "Designing a pretraining system" as a plan: TP inside the node, PP across nodes,
FSDP over the rest.

It is the CP-SAT hint and the fallback when the solve finds nothing in time; it only proposes
points of the space and keeps the first that fits, so it is never better than the optimum. The
candidates are scored many at a time (`CostModel.fits_many`), in the recipe's order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from meshplan.solver.costmodel import Point
from meshplan.solver.costmodel.terms import Points
from meshplan.solver.cpsat.tables import Tables
from meshplan.solver.schema import Recompute

# Rows whose candidates are scored at once; each further chunk is 4x larger. On the throughput
# sweep (benchmarks.suite.throughput_requests) the first row of the recipe's order held the
# greedy point in every solve, and scoring one row's candidates costs half of sixteen rows'.
FIRST_CHUNK = 1
# Candidates of a chunk scored one at a time (CostModel.fits) before the rest at once: one point
# costs a fraction of a batch's array operations, and over the throughput sweep the greedy
# point was the first candidate of its chunk in 279 of 428 solves, the third in 133.
ONE_BY_ONE = 3


def greedy(tb: Tables, rows: Sequence[int] | None = None) -> Point | None:
    """Smallest tp, then smallest pp, that fit with the highest ZeRO stage the framework runs
    there; cheapest recompute; largest batch. `rows`: positions of the layouts to try (default:
    all)."""
    sp, R = tb.sp, tb.rows
    rows = np.arange(tb.n) if rows is None else np.asarray(rows, dtype=np.int64)
    if not len(rows):
        return None
    order = {Recompute.NONE: 0, Recompute.SELECTIVE: 1, Recompute.FULL: 2}
    rs = sorted(range(len(sp.rs)), key=lambda i: order[sp.rs[i]])
    keys = (R.pp[rows], R.tp[rows], R.cp[rows], -R.gpus[rows])  # lexsort: last key first
    rows = rows[np.lexsort(keys)]
    first: dict[tuple[str, int], object] = {}
    k, chunk = 0, FIRST_CHUNK
    while k < len(rows):
        part = rows[k : k + chunk]
        k, chunk = k + len(part), chunk * 4
        cand = _candidates(tb, part, first, rs)
        if cand is None:
            continue
        at, axes = cand
        for j in range(min(ONE_BY_ONE, len(at))):  # one at a time first: it is the first most often
            p = _point(tb, at, axes, j)
            if sp.cm.fits(p, R, int(at[j])):  # kept: the search scores the hint again
                return p
        rest = np.arange(ONE_BY_ONE, len(at))
        if len(rest):
            ok = np.flatnonzero(sp.cm.fits_many(R, Points(at, axes).take(rest)))
            if len(ok):
                return _point(tb, at, axes, int(rest[ok[0]]))
    return None


def _point(tb: Tables, at: np.ndarray, axes: dict, j: int) -> Point:
    """Candidate j as a Point."""
    sp = tb.sp
    (_, v), (_, b, m), (_, e, et) = (tb.domain[a][axes[a][1][j]] for a in ("pv", "db", "te"))
    r, z = sp.rs[axes["r"][1][j]], sp.zs[axes["z"][1][j]]
    return Point(sp.layouts[int(at[j])], v, b, m, e, et, r, z)


def _first(tb: Tables, memo: dict[tuple[str, int], object], axis: str, c: int) -> object:
    """For rows of class c of an axis, what the recipe takes (a position in the axis' domain, -1
    when none agrees): one pipeline (one chunk per stage), the expert group (the largest, then
    the most ep), the ZeRO stage (the highest); of "db", the batch shapes in its order (largest
    batch first, then the smaller micro-batch). Computed once per class, when a row needs it."""
    got = memo.get((axis, c))
    if got is not None:
        return got
    m, dom = tb.members[axis][c], tb.domain[axis]
    if axis == "db":
        got = np.array(
            sorted(m.tolist(), key=lambda i: (-dom[i][1] * dom[i][2], dom[i][1])), np.int64
        )
    elif not len(m):
        got = -1
    elif axis == "pv":
        got = int(m[0])
    elif axis == "te":
        got = int(min(m, key=lambda i: (-dom[i][1] * dom[i][2], -dom[i][1])))
    else:
        got = int(max(m, key=lambda i: dom[i]))
    memo[(axis, c)] = got
    return got


def _candidates(
    tb: Tables, rows: np.ndarray, first: dict[tuple[str, int], object], rs: list[int]
) -> tuple[np.ndarray, dict] | None:
    """The recipe's candidate points of these rows, in its order: rows, then batch shapes, then
    recomputation (positions in the space's domains)."""
    one = {
        a: np.array([_first(tb, first, a, c) for c in tb.cls[a][rows].tolist()], dtype=np.int64)
        for a in ("pv", "te", "z")
    }
    pv, te, z = one["pv"], one["te"], one["z"]
    keep = (pv >= 0) & (te >= 0) & (z >= 0)
    dbs = [_first(tb, first, "db", c) for c in tb.cls["db"][rows].tolist()]
    sizes = np.array([len(d) * len(rs) if ok else 0 for d, ok in zip(dbs, keep, strict=True)])
    if not sizes.sum():
        return None
    row_of = np.repeat(np.arange(len(rows)), sizes)
    db_of = np.concatenate([np.repeat(d, len(rs)) for d, s in zip(dbs, sizes, strict=True) if s])
    r_of = np.tile(np.array(rs, dtype=np.int64), int(sizes.sum()) // len(rs))
    axes = {
        "pv": (tb.domain["pv"], pv[row_of]),
        "te": (tb.domain["te"], te[row_of]),
        "db": (tb.domain["db"], db_of),
        "r": (tb.domain["r"], r_of),
        "z": (tb.domain["z"], z[row_of]),
    }
    return rows[row_of], axes
