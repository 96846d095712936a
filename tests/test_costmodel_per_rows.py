"""Per-row quantities kept in a Rows' memo (point.per_rows) and shared by the terms that read
them give every term the same start, bit for bit, as computing it alone over fresh rows and as
the Python-number form of each single layout; Compiled.value is the sum of group_value; `full`
keeps a float's bits (-0.0 is not 0.0)."""

from __future__ import annotations

from itertools import islice

import numpy as np
import pytest

from meshplan.solver.costmodel.point import Rows, full
from meshplan.solver.costmodel.terms import Compiled, Points
from meshplan.solver.planner import _resolve
from meshplan.solver.schema import PlanRequest, Recompute
from meshplan.solver.space import Space

CASES = [
    ("llama3-8b", "h100-sxm-80gb", 16, {"seq_len": 4096}),
    ("mixtral-8x7b", "h100-sxm-80gb", 64, {"seq_len": 8192}),
    ("llama3-70b", "a100-sxm-80gb", 32, {"seq_len": 8192, "framework": "torchtitan"}),
]
KEYS = {"r": list(Recompute), "z": [0, 1, 2, 3]}


def _space(model: str, gpu: str, n: int, training: dict) -> Space:
    req = PlanRequest.model_validate(
        {
            "model": {"preset": model},
            "cluster": {"gpu": gpu, "num_gpus": n},
            "training": training,
        }
    )
    A, H, cm = _resolve(req)
    return Space.build(A, H, req.training, req.search, cm, prune=False)


def _terms(sp: Space) -> list:
    """(term, keyval) of every term of every sum of the cost model, each keyval it can see."""
    out = []
    for comp, _ in sp.cm.sums():
        for g in comp.groups:
            kvs = sorted({g.key(v) for v in KEYS[g.sel]}, key=repr) if g.sel else [None]
            out += [(t, kv) for t in g.terms for kv in kvs]
    return out


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_shared_per_row_quantities_match_a_fresh_computation(case: tuple) -> None:
    sp = _space(*case)
    lays = sp.layouts
    shared = Rows.of(lays)  # every term over one memo: per-row quantities computed once
    terms = _terms(sp)
    got = [np.array(t.starts(shared, kv)) for t, kv in terms]
    assert len(shared.memo) > len({(t.start, kv) for t, kv in terms})  # quantities were kept
    for (t, kv), a in zip(terms, got, strict=True):
        alone = full(t.start(Rows.of(lays), kv), len(lays))  # fresh rows: nothing shared
        assert a.tobytes() == np.asarray(alone).tobytes(), t.name
        for i in range(0, len(lays), 7):  # the single-layout (Python number) form
            one = np.float64(t.start(lays[i], kv))
            assert a[i : i + 1].tobytes() == one.tobytes(), (t.name, lays[i])


def test_value_is_the_sum_of_group_values() -> None:
    sp = _space(*CASES[1])
    rows = Rows.of(sp.layouts)
    at = {lay: i for i, lay in enumerate(sp.layouts)}
    pts = list(islice(sp.points(), 0, 20000, 97))
    assert len(pts) > 50
    for comp, _ in sp.cm.sums():
        for p in pts:
            i = at[p.lay]
            want = sum(comp.group_value(g, p, rows, i) for g in comp.groups)
            assert comp.value(p, rows, i) == want
    for p in pts:
        assert p.axes() == {a: p.axis(a) for a in ("pv", "db", "te", "r", "z")}


def test_full_keeps_the_bits_of_a_float() -> None:
    z, nz = full(0.0, 3), full(-0.0, 3)
    assert np.signbit(nz).all() and not np.signbit(z).any()
    assert full(0.0, 3) is z and full(0.0, 4).shape == (4,)
    assert not z.flags.writeable
    a = np.arange(3.0)
    assert full(a, 3) is a


def test_float_terms_and_by_name_are_term_by_term() -> None:
    sp = _space(*CASES[1])
    rows = Rows.of(sp.layouts)
    at = {lay: i for i, lay in enumerate(sp.layouts)}
    pts = list(islice(sp.points(), 0, 20000, 211))
    for comp, _ in sp.cm.sums():
        for p in pts:
            i = at[p.lay]
            want = [t.float_value(p, rows, i) for g in comp.groups for t in g.terms]
            assert comp.float_terms(p, rows, i) == want
            names: dict[str, int] = {}
            for g in comp.groups:
                kv = g.key(p.axis(g.sel)) if g.sel else None
                for t in g.terms:
                    x = int(np.ceil(t.starts(rows, kv)[i] * comp.scale))
                    if not comp.up:
                        x = int(np.floor(t.starts(rows, kv)[i] * comp.scale))
                    names[t.name] = names.get(t.name, 0) + comp._chain(x, g.factors, p)
            assert comp.by_name(p, rows, i) == names


@pytest.mark.parametrize("scale", [None, 1e13, 1e17])
def test_values_at_many_points_are_value_at_each(scale: float | None) -> None:
    """The gathered form (every product within int64, or past it: apply_many's checks, Python
    integers) gives each point's `value`; huge scales force the checked paths."""
    sp = _space(*CASES[1])
    rows = Rows.of(sp.layouts)
    at = {lay: i for i, lay in enumerate(sp.layouts)}
    pts = list(islice(sp.points(), 0, 20000, 53))
    many = Points.of(pts, [at[p.lay] for p in pts])
    for comp, _ in sp.cm.sums():
        if scale is not None:
            comp = Compiled(scale, comp.up, comp.groups, comp.fracs)
        got = comp.values(rows, many)
        want = [comp.value(p, rows, at[p.lay]) for p in pts]
        assert [int(v) for v in got] == want
