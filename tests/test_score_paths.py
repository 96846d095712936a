"""The plan's scores read the cost model along shorter paths than the reference ones, with the
same bits: time_per_token (factor floats kept) equals the sum of Compiled.float_terms by name
with the dp exposure from Compiled.float_value; memory_bill (the fuller stage found by
stage_bytes, its tenants only) equals the bill from both stages' tenants; the tables' memo
keys over a space's layouts hash once and equal the plain tuples."""

from __future__ import annotations

from itertools import islice

import pytest
from test_costmodel_per_rows import CASES, _space

from meshplan.solver import cache
from meshplan.solver.costmodel.model import COMPONENTS, MEMORY_UNIT, STAGES, CostModel
from meshplan.solver.costmodel.point import Point, Rows
from meshplan.solver.results import MemoryBill
from meshplan.solver.space import Space


def _points(sp: Space, k: int = 60) -> list[tuple[Point, int]]:
    index = {lay: i for i, lay in enumerate(sp.layouts)}
    return [(p, index[p.lay]) for p in islice(sp.points(), 0, None, 97)][:k]


def _time_reference(cm: CostModel, p: Point, rows: Rows, i: int) -> dict[str, float]:
    out = dict.fromkeys(COMPONENTS, 0.0)
    names = (t.name for g in cm.objective.groups for t in g.terms)
    for name, x in zip(names, cm.objective.float_terms(p, rows, i), strict=True):
        out[name] += x
    comm, credit = cm.dp[p.z]
    out["dp_comm"] += max(0.0, comm.float_value(p, rows, i) - credit.float_value(p, rows, i))
    return out


def _bill_reference(cm: CostModel, p: Point, rows: Rows, i: int) -> MemoryBill:
    per = {st: cm.tenants_int(p, st, rows, i) for st in STAGES}
    stage = max(STAGES, key=lambda st: sum(per[st].values()))
    t = {k: v * MEMORY_UNIT for k, v in per[stage].items()}
    used = sum(t.values())
    reserve = cm.ctx.reserve_for(used)
    return MemoryBill(**t, reserve=reserve, total=used + reserve, hbm=cm.hw.hbm, stage=stage)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_time_per_token_equals_the_float_terms(case: tuple) -> None:
    sp = _space(*case)
    rows = sp.rows
    pts = _points(sp)
    assert len(pts) > 10
    for p, i in pts:
        got = sp.cm.time_per_token(p, rows, i)
        want = _time_reference(sp.cm, p, rows, i)
        assert [x.hex() for x in got.values()] == [x.hex() for x in want.values()]
        assert list(got) == list(want)
        alone = sp.cm.time_per_token(p)  # the one-row table: the same floats
        assert [x.hex() for x in alone.values()] == [x.hex() for x in want.values()]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_memory_bill_equals_the_bill_of_both_stages(case: tuple) -> None:
    sp = _space(*case)
    rows = sp.rows
    for p, i in _points(sp):
        got = sp.cm.memory_bill(p, rows, i)
        assert got == _bill_reference(sp.cm, p, rows, i)
        for st in STAGES:  # the fuller stage is found by stage_bytes: the tenants' sum
            assert sp.cm.stage_bytes(p, st, rows, i) == sum(
                sp.cm.tenants_int(p, st, rows, i).values()
            )


def test_layout_keys_hash_once_and_equal_plain_tuples() -> None:
    sp = _space(*CASES[0])
    lays = sp.layouts
    k = cache.Key(*lays)
    assert k == tuple(lays) and hash(k) == hash(tuple(lays))
    assert cache._layouts_key(lays) is cache._layouts_key(lays)  # kept for the same list
    assert cache._layouts_key(list(lays)) == k  # another list: an equal key
    assert cache.rows(sp.cm, lays) is cache.rows(sp.cm, list(lays))  # one entry
