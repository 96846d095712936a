"""The coarse bound's parts: `stack_sums` (one pass over the groups, one float conversion) equals,
bit for bit, the former per-selector formulation; a sum's coarse value leaves the kept parts
unchanged (asking twice gives the same array) and a row's coarse bound does not depend on the
rows bounded with it; `_firsts` finds where runs of a sorted array begin."""

from __future__ import annotations

import numpy as np
import pytest
from test_bounds_batched import SPECS
from test_bounds_batched import _tables as spec_tables

from meshplan.solver.costmodel.terms import FACTOR_AXES
from meshplan.solver.cpsat import bounds, coarse
from meshplan.solver.cpsat.tables import Tables


@pytest.fixture(scope="module", params=list(SPECS))
def tb(request: pytest.FixtureRequest) -> Tables:
    return spec_tables(request.param)


def _stack_sums_per_selector(tb: Tables, comps: list) -> bounds.Sums:
    """The former formulation: one pass over the groups per selector, one conversion each."""
    sp, asks, layout = tb.sp, [], []
    for sel in (None, "r", "z"):
        vals = [None] if sel is None else (sp.rs if sel == "r" else sp.zs)
        idx, owner = [], []
        for c, (comp, _) in enumerate(comps):
            for g in comp.groups:
                if g.sel == sel:
                    asks += [(comp, g, None if v is None else g.key(v)) for v in vals]
                    idx.append(
                        [
                            tb.factor_number(a, f)
                            for a, f in zip(FACTOR_AXES, g.factors, strict=True)
                        ]
                    )
                    owner.append(c)
        layout.append((len(vals), idx, owner, sel))
    tables, groups, at = tb.starts_many(asks), {}, 0
    for nv, idx, owner, sel in layout:
        if owner:
            rows = [tables[at + i * nv : at + (i + 1) * nv] for i in range(len(owner))]
            at += nv * len(owner)
            groups[sel] = (np.array(rows, dtype=float), np.array(idx).T, np.array(owner))
    ns, nf = len(comps), 1 + len(tb.factor_fns["db"])
    return bounds.Sums(
        np.array([low for _, low in comps]), groups, bounds.slot_matrices(groups, ns, nf)
    )


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_stack_sums_equals_per_selector(tb: Tables) -> None:
    comps = tb.sp.cm.sums(tb.sp.zs)
    got = bounds.stack_sums(tb, comps, tb.starts_many)
    want = _stack_sums_per_selector(tb, comps)
    assert _same(got.low, want.low) and list(got.groups) == list(want.groups)
    for sel, arrs in want.groups.items():
        assert all(_same(x, y) for x, y in zip(got.groups[sel], arrs, strict=True)), sel


def test_coarse_value_keeps_its_parts(tb: Tables) -> None:
    rows = np.arange(tb.n, dtype=np.int64)
    at, te = coarse._pairs(tb, rows)
    v = coarse._least(tb, rows, at, te)
    first = [v(k).copy() for k in range(len(tb.sums().low))]
    assert all(_same(a, v(k)) for k, a in enumerate(first))
    assert first[0].shape == (len(at), len(tb.sp.rs), len(tb.sp.zs))


def test_coarse_bound_of_a_row_alone(tb: Tables) -> None:
    rows = np.arange(tb.n, dtype=np.int64)
    every, _ = coarse.coarse_bounds(tb, rows)
    back, _ = coarse.coarse_bounds(tb, rows[::-1].copy())
    assert _same(every, back[::-1].copy())
    for i in np.linspace(0, tb.n - 1, 7).astype(int).tolist():
        alone, _ = coarse.coarse_bounds(tb, rows[i : i + 1])
        assert alone.tobytes() == every[i : i + 1].tobytes()


@pytest.mark.parametrize("o", [[], [3], [0, 0, 0], [0, 1, 1, 2, 5, 5, 5, 9], list(range(6))])
def test_firsts(o: list[int]) -> None:
    a = np.array(o, dtype=np.int64)
    want = np.unique(a, return_index=True)[1] if len(a) else np.zeros(0, np.int64)
    assert coarse._firsts(a).tolist() == want.tolist()


def test_slot_matrices_sum_as_tensordot_did(tb: Tables) -> None:
    """`_split` sums the groups into their (sum, db factor) slots with the kept slot matrices:
    one 1 per group, where its sum and db factor say, and the same bits as the one-hot
    tensordot built at every call before."""
    sums = tb.sums()
    ns, nf = len(sums.low), 1 + len(tb.factor_fns["db"])
    rng = np.random.default_rng(0)
    for sel, (start, idx, owner) in sums.groups.items():
        m = sums.slots[sel]
        assert m.shape == (len(owner), ns * nf) and (m.sum(axis=1) == 1).all()
        assert (np.flatnonzero(m.reshape(-1)) % (ns * nf) == owner * nf + idx[2]).all()
        val = rng.standard_normal((len(owner), *start.shape[1:])) * 1e6
        onehot = np.zeros((len(owner), ns * nf))
        onehot[np.arange(len(owner)), owner * nf + idx[2]] = 1.0
        want = np.tensordot(onehot, val, axes=(0, 0))
        got = np.dot(m.T, val.reshape(len(owner), -1)).reshape(want.shape)
        assert _same(got, want), sel
