"""Coarse bounds, for every row of a space at once (bounds.py describes the two grains): per
row and expert group te = (tp, ep, etp) that agrees with it, every term group bounded with its
exact te factor and the least pv and db factors that agree with the row, each group on its own
(the greatest for a credit; the other way round for a negative start). Exact over the expert
groups because their factors trade against each other (expert compute and memory against
expert traffic): with the least of each alone, the best row of qwen3-235b on 2,048 H100s had a
bound 1.98x below the optimum (now 1.49x) and 113 of its 165 rows a bound below it (now 53),
each to be refined. The work is a few hundred floats per (row, expert group) pair: the groups
without a te factor are bounded once per row."""

from __future__ import annotations

import operator
from collections.abc import Callable

import numpy as np

from meshplan.solver.cpsat.bounds import ROWS_CHUNK, Tables, _combine, _firsts, _margin_own


def _pairs(tb: Tables, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (row, expert group) of these rows, row by row: each pair's position in `rows` and
    its te position (the values that agree with the row, Space.compatible)."""
    flat, offsets, sizes = tb.flat["te"]
    cls = tb.cls["te"][rows]
    n = sizes[cls]
    at = np.repeat(np.arange(len(rows), dtype=np.int64), n)
    first = np.repeat(np.cumsum(n) - n, n)
    return at, flat[offsets[cls][at] + np.arange(len(at), dtype=np.int64) - first]


def _least(tb: Tables, rows: np.ndarray, at: np.ndarray, te: np.ndarray) -> Callable:
    """Every sum at (row, expert group) pairs (`rows[at]`, te position `te`), each group bounded
    with its exact te factor and the least pv and db factors that agree with the row (the
    greatest for a credit; the other way round for a negative start): v(k), the bound of sum
    k moved by its margin, (pairs, |rs|, |zs|) or of size 1 on the axes it does not depend on.
    Groups without a te factor are bounded once per row."""
    sums = tb.sums()
    ns = len(sums.low)
    pc, dc = tb.cls["pv"][rows], tb.cls["db"][rows]
    lo = (tb.factor_matrix("pv", "lo")[:, pc], tb.factor_matrix("db", "lo")[:, dc])
    hi = (tb.factor_matrix("pv", "hi")[:, pc], tb.factor_matrix("db", "hi")[:, dc])
    tf = tb.factor_matrix("te", "dom")[:, te]
    per_row = np.bincount(at, minlength=len(rows))  # pairs per row (`at` is sorted: _pairs)
    one = len(at) == len(rows) and bool((per_row == 1).all())  # the pairs are the rows
    run = len(rows) and rows[-1] - rows[0] == len(rows) - 1 and (np.diff(rows) == 1).all()
    cut = slice(int(rows[0]), int(rows[-1]) + 1) if run else rows  # a view for a run of rows
    parts: dict[str | None, tuple[dict[int, int], np.ndarray]] = {}  # per selector: the sums
    # it has (sum -> slot) and their bounds, (pairs, slots, |sel|)
    for sel, (start, idx, owner) in sums.groups.items():
        has = owner[_firsts(owner)]  # the sums it has, in order (owners are sorted)
        slot = np.zeros(ns, dtype=np.int64)
        slot[has] = np.arange(len(has))
        dep = idx[1] > 0
        by_row = np.zeros((len(rows), len(has), start.shape[1]))
        by_pair = None
        for keep, cols in ((~dep, None), (dep, at)):
            if not keep.any():
                continue
            every = cols is None and not dep.any()  # all the groups: no copy of them
            g, o = (idx, owner) if every else (idx[:, keep], owner[keep])
            flo, fhi = lo[0][g[0]] * lo[1][g[2]], hi[0][g[0]] * hi[1][g[2]]  # (groups, rows)
            a = (start if every else start[keep])[:, :, cut]  # (groups, |sel|, rows)
            low = sums.low[o][:, None, None]
            val = np.where((a >= 0) == low, flo[:, None, :], fhi[:, None, :])  # the factor
            if cols is not None:  # at the pairs (rows repeated in order), times their te
                # factors: the same products as choosing between flo·t and fhi·t at the pairs
                val = np.repeat(val, per_row, axis=2)
                val *= tf[g[1]][:, None, :]
                a = np.repeat(a, per_row, axis=2)
            val *= a
            first = _firsts(o)  # groups are sorted by sum
            v = np.add.reduceat(val, first, axis=0).transpose(2, 0, 1)  # (entries, sums, |sel|)
            if cols is None:
                by_row[:, slot[o[first]]] = v
            else:
                by_pair = np.zeros((len(at), len(has), start.shape[1]))
                by_pair[:, slot[o[first]]] = v
        got = by_row if one else np.repeat(by_row, per_row, axis=0)  # at the pairs
        got = got if by_pair is None else by_pair + got
        parts[sel] = (dict(zip(has.tolist(), range(len(has)), strict=True)), got)
    nr, nz = len(tb.sp.rs), len(tb.sp.zs)

    def value(k: int) -> np.ndarray:
        x = None  # 0 + the parts, in order (the objective: full over r and z)
        for sel, axis in ((None, 1), ("r", 2), ("z", 1)):
            if sel in parts and k in parts[sel][0]:
                one = parts[sel][1][:, parts[sel][0][k]]
                part = one[:, None, :] if axis == 1 else one[:, :, None]
                if x is None:
                    x = np.empty((len(at), nr, nz)) if k == 0 else None
                    x = np.add(part, 0.0, out=x)
                elif x.ndim == part.ndim and all(map(operator.ge, x.shape, part.shape)):
                    x += part  # x's own array, already of the sum's shape: the same sum
                else:
                    x = x + part
        if x is None:
            x = np.zeros((len(at), nr, nz) if k == 0 else (len(at), 1, 1))
        return _margin_own(x, bool(sums.low[k]))

    return value


PAIRS_CHUNK = 4096  # (row, expert group) pairs whose coarse bounds are computed at once


def coarse_bounds(tb: Tables, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The coarse bound of each row (inf: nothing in the row fits), and of each of its expert
    groups (`_pairs` order): every group bounded with its exact te factor and the least pv and db
    factors that agree with the row, each on its own; the least over r and z (and for the row,
    over its expert groups). Cheap for every row of a large space (a few hundred floats a
    pair); exact over the expert groups, whose factors trade against each other (expert compute
    and memory against expert traffic), where the least of each alone would leave a MoE row far
    below its fine bound."""
    out = np.full(len(rows), np.inf)
    at, te = _pairs(tb, rows)
    per = np.full(len(at), np.inf)
    ends = np.searchsorted(at, np.arange(len(rows) + 1))  # each row's pairs: ends[i]:ends[i+1]
    i = 0
    while i < len(rows):
        tb.check()
        j = max(i + 1, int(np.searchsorted(ends, ends[i] + PAIRS_CHUNK, side="right")) - 1)
        j = min(j, i + ROWS_CHUNK, len(rows))
        pa, pt = at[ends[i] : ends[j]] - i, te[ends[i] : ends[j]]
        part = rows[i:j]
        z_ok = tb.z_ok[tb.cls["z"][part[pa]]][:, None, :]
        got = _combine(tb, _least(tb, part, pa, pt), z_ok).min(axis=(1, 2))
        per[ends[i] : ends[j]] = got
        np.minimum.at(out[i:j], pa, got)
        i = j
    return out, per
