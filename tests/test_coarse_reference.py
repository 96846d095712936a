"""The coarse bounds and the start tables they stack against the code as of 192ed29 (kept here):
`coarse_bounds` (in one chunk and in several) and every sum's coarse value give the same bits;
`int_starts_many` the same integers (and keeps them) as the former rounding with np.where and
reduceat; `Fractions` the same factor arrays as the former list-by-list conversion."""

from __future__ import annotations

import operator
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest
from test_bounds_batched import SPECS, tables_of

from meshplan.solver.costmodel.factors import INT_SAFE, BatchFactor, Fractions
from meshplan.solver.costmodel.point import Rows
from meshplan.solver.costmodel.terms import Group, Term, _group_sums, int_starts_many
from meshplan.solver.cpsat import bounds, coarse
from meshplan.solver.cpsat.tables import Tables

MORE = {
    "dense-70b": {
        "model": {"preset": "llama3-70b"},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 64},
        "training": {"seq_len": 8192, "global_batch_tokens": 8192 * 256},
    },
    "moe-128": {
        "model": {"preset": "mixtral-8x7b"},
        "cluster": {"gpu": "a100-sxm-80gb", "num_gpus": 128},
        "training": {"seq_len": 4096, "global_batch_tokens": 4096 * 512},
    },
}
ALL = {**SPECS, **MORE}


def _fresh(tb: Tables) -> Tables:
    """The tables over new rows: nothing computed yet (start tables, sums)."""
    r = tb.rows
    tb.rows = Rows(r.tp, r.pp, r.cp, r.dp, r.gpus, r.sp)
    tb._sums = None
    return tb


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _old_least(tb: Tables, rows: np.ndarray, at: np.ndarray, te: np.ndarray) -> Callable:
    """`coarse._least` as of 192ed29."""
    sums = tb.sums()
    ns = len(sums.low)
    pc, dc = tb.cls["pv"][rows], tb.cls["db"][rows]
    lo = (tb.factor_matrix("pv", "lo")[:, pc], tb.factor_matrix("db", "lo")[:, dc])
    hi = (tb.factor_matrix("pv", "hi")[:, pc], tb.factor_matrix("db", "hi")[:, dc])
    tf = tb.factor_matrix("te", "dom")[:, te]
    per_row = np.bincount(at, minlength=len(rows))  # pairs per row (`at` is sorted: _pairs)
    run = len(rows) and rows[-1] - rows[0] == len(rows) - 1 and (np.diff(rows) == 1).all()
    cut = slice(int(rows[0]), int(rows[-1]) + 1) if run else rows  # a view for a run of rows
    parts: dict[str | None, tuple[dict[int, int], np.ndarray]] = {}  # per selector: the sums
    # it has (sum -> slot) and their bounds, (pairs, slots, |sel|)
    for sel, (start, idx, owner) in sums.groups.items():
        has = owner[coarse._firsts(owner)]  # the sums it has, in order (owners are sorted)
        slot = np.zeros(ns, dtype=np.int64)
        slot[has] = np.arange(len(has))
        dep = idx[1] > 0
        by_row = np.zeros((len(rows), len(has), start.shape[1]))
        by_pair = None
        for keep, cols in ((~dep, None), (dep, at)):
            if not keep.any():
                continue
            g, o = idx[:, keep], owner[keep]
            flo, fhi = lo[0][g[0]] * lo[1][g[2]], hi[0][g[0]] * hi[1][g[2]]  # (groups, rows)
            a = start[keep][:, :, cut]  # (groups, |sel|, rows)
            low = sums.low[o][:, None, None]
            val = np.where((a >= 0) == low, flo[:, None, :], fhi[:, None, :])  # the factor
            if cols is not None:  # at the pairs (rows repeated in order), times their te
                # factors: the same products as choosing between flo·t and fhi·t at the pairs
                val = np.repeat(val, per_row, axis=2)
                val *= tf[g[1]][:, None, :]
                a = np.repeat(a, per_row, axis=2)
            val *= a
            first = coarse._firsts(o)  # groups are sorted by sum
            v = np.add.reduceat(val, first, axis=0).transpose(2, 0, 1)  # (entries, sums, |sel|)
            if cols is None:
                by_row[:, slot[o[first]]] = v
            else:
                by_pair = np.zeros((len(at), len(has), start.shape[1]))
                by_pair[:, slot[o[first]]] = v
        got = np.repeat(by_row, per_row, axis=0)  # at the pairs
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
        return bounds._margin_own(x, bool(sums.low[k]))

    return value


def _old_coarse_bounds(tb: Tables, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`coarse.coarse_bounds` as of 192ed29."""
    out = np.full(len(rows), np.inf)
    at, te = coarse._pairs(tb, rows)
    per = np.full(len(at), np.inf)
    ends = np.searchsorted(at, np.arange(len(rows) + 1))  # each row's pairs: ends[i]:ends[i+1]
    i = 0
    while i < len(rows):
        tb.check()
        j = max(i + 1, int(np.searchsorted(ends, ends[i] + coarse.PAIRS_CHUNK, side="right")) - 1)
        j = min(j, i + coarse.ROWS_CHUNK, len(rows))
        pa, pt = at[ends[i] : ends[j]] - i, te[ends[i] : ends[j]]
        part = rows[i:j]
        z_ok = tb.z_ok[tb.cls["z"][part[pa]]][:, None, :]
        got = bounds._combine(tb, _old_least(tb, part, pa, pt), z_ok).min(axis=(1, 2))
        per[ends[i] : ends[j]] = got
        np.minimum.at(out[i:j], pa, got)
        i = j
    return out, per


def _old_int_starts_many(rows: Rows, asks: list) -> list:
    """`terms.int_starts_many` as of 192ed29."""
    memo = rows.memo
    todo = [k for k in dict.fromkeys(asks) if k not in memo]
    if todo:
        n = len(rows)
        cols = [t.starts(rows, kv) for g, kv, _, _ in todo for t in g.terms]
        sizes = [len(g.terms) for g, *_ in todo]
        scale = np.repeat(np.array([s for *_, s, _ in todo], dtype=np.float64), sizes)
        up = np.repeat(np.array([u for *_, u in todo], dtype=bool), sizes)
        x = np.array(cols, dtype=np.float64).reshape(len(cols), n) * scale[:, None]
        y = np.where(up[:, None], np.ceil(x), np.floor(x))
        if np.abs(y).max(initial=0.0) < INT_SAFE:
            first = np.cumsum([0, *sizes[:-1]])
            got = y.astype(np.int64)
            if len(first) < len(y):
                got = np.add.reduceat(got, first, axis=0)
            memo.update(zip(todo, got, strict=True))
        else:
            for g, kv, s, u in todo:
                g.int_starts(rows, kv, s, u)
    return [memo[k] for k in asks]


def _asks(tb: Tables) -> list:
    sp, out = tb.sp, []
    for comp, _ in sp.cm.sums(sp.zs):
        for g in comp.groups:
            vals = [None] if g.sel is None else (sp.rs if g.sel == "r" else sp.zs)
            out += [(g, None if v is None else g.key(v), comp.scale, comp.up) for v in vals]
    return out


@pytest.fixture(scope="module", params=list(ALL))
def tb(request: pytest.FixtureRequest) -> Tables:
    return tables_of(ALL[request.param])


@pytest.mark.parametrize("chunk", [coarse.PAIRS_CHUNK, 37])
def test_coarse_bounds_as_before(tb: Tables, chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coarse, "PAIRS_CHUNK", chunk)  # 37: many chunks, rows split unevenly
    rows = np.arange(tb.n, dtype=np.int64)
    got, want = coarse.coarse_bounds(tb, rows), _old_coarse_bounds(tb, rows)
    assert np.isfinite(got[0]).any() and all(map(_same, got, want))
    some = rows[::3].copy()  # not a run of rows: gathered, not a view
    assert all(map(_same, coarse.coarse_bounds(tb, some), _old_coarse_bounds(tb, some)))


def test_every_sum_as_before(tb: Tables) -> None:
    rows = np.arange(tb.n, dtype=np.int64)
    at, te = coarse._pairs(tb, rows)
    new, old = coarse._least(tb, rows, at, te), _old_least(tb, rows, at, te)
    assert all(_same(new(k), old(k)) for k in range(len(tb.sums().low)))


def test_start_tables_as_before(tb: Tables) -> None:
    asks = _asks(tb)
    assert any(len(g.terms) > 1 for g, *_ in asks) and any(u for *_, u in asks)
    new = int_starts_many(_fresh(tb).rows, asks)
    kept = {k: v for k, v in tb.rows.memo.items() if isinstance(k, tuple) and len(k) == 4}
    old = _old_int_starts_many(_fresh(tb).rows, asks)
    assert all(map(_same, new, old))
    for k, v in tb.rows.memo.items():
        if isinstance(k, tuple) and len(k) == 4:
            assert _same(kept[k], v)
    assert int_starts_many(tb.rows, asks)[-1] is old[-1]  # read back from the memo


def test_start_tables_rounding_and_sums() -> None:
    rows = Rows.of(tables_of(SPECS["dense"]).sp.layouts[:7])
    terms = [
        Term("a", lambda r, _: r.tp * 1.25 - 3.5),
        Term("b", lambda r, _: -(r.dp * 0.75) - 0.0),
        Term("c", lambda r, _: 0.5),
        Term("d", lambda r, _: r.pp * -2.5 + 1e15),
    ]
    asks = [
        (Group(None, lambda x: x, (None,) * 3, terms[i:j]), None, s, u)
        for i, j in ((0, 1), (1, 2), (0, 3), (2, 4), (0, 4))
        for s, u in ((1.0, True), (3.0, False), (0.1, True))
    ]
    got = int_starts_many(rows, asks)
    want = _old_int_starts_many(Rows.of(rows.layouts()), asks)
    assert all(map(_same, got, want))


@pytest.mark.parametrize("sizes", [[1], [3], [1, 1, 1], [2, 1, 4, 1, 1, 3], [5, 2]])
def test_group_sums(sizes: list[int]) -> None:
    x = np.random.default_rng(len(sizes)).integers(-(1 << 40), 1 << 40, (sum(sizes), 6))
    first = np.cumsum([0, *sizes[:-1]])
    assert _same(_group_sums(x, sizes), np.add.reduceat(x, first, axis=0))


def _old_arrays(fr: Fractions, fn: Callable, domain: list) -> tuple[np.ndarray, np.ndarray]:
    """`Fractions._arrays_of` (not of a BatchFactor) as of 192ed29."""
    fs = [fr(fn, v) for v in domain]
    nums, dens = [f.numerator for f in fs], [f.denominator for f in fs]
    big = any(abs(n) >= INT_SAFE for n in nums) or any(d >= INT_SAFE for d in dens)
    dt = object if big else np.int64
    return np.array(nums, dtype=dt), np.array(dens, dtype=dt)


@pytest.mark.parametrize(
    "f",
    [
        lambda v: Fraction(v[0], 3 * v[1]),
        lambda v: Fraction(-v[0], v[1] + 1),
        lambda v: Fraction(v[0] * INT_SAFE - 1, v[1]),  # just below INT_SAFE for v[0] = 1
        lambda v: Fraction(v[0] * INT_SAFE, v[1]),  # at INT_SAFE: Python integers
        lambda v: Fraction(-(v[0] << 70), 7),  # past int64
        lambda v: Fraction(1, (v[1] << 60) + 1),  # a denominator past INT_SAFE
        lambda v: Fraction(-(1 << 63), 1),  # int64's least
    ],
)
def test_fraction_arrays_as_before(f: Callable) -> None:
    domain = [(1, 1), (1, 3), (2, 5), (4, 1)]
    for dom in (domain, domain[:1], []):
        got, want = Fractions()._arrays_of(f, dom), _old_arrays(Fractions(), f, dom)
        for a, b in zip(got, want, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape and a.tolist() == b.tolist()


def test_batch_arrays_as_before() -> None:
    shapes = [(2, 4, 8), (2, 3, 9), (2, 1, 16), (2, 8, 3)]
    for b, m in ((1, 0), (0, -1), (1, -1), (-1, 1), (-1, -1)):
        f = BatchFactor.of(b, m)
        want = f._arrays_of(np.array(shapes, dtype=np.int64).reshape(-1, 3))
        got = Fractions().arrays(f, list(shapes))
        assert all(_same(x, y) for x, y in zip(got, want, strict=True))
