"""The coarse bounds exact over the expert groups, and what the fine bounds and the models take
from them, are sound: every fitting point costs at least its (row, expert group)'s coarse
bound; fine bounds at a cap list every point at most the cap and summarise the rest below them;
a kept CP-SAT model is the model built afresh, and few are kept; the lookup of axis values
equals np.isin."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from test_oracle_property import instances, oracle_settings

from meshplan.solver import cache
from meshplan.solver.cpsat import build as build_mod
from meshplan.solver.cpsat.build import build
from meshplan.solver.cpsat.tables import Tables
from meshplan.solver.cpsat.variables import Axes
from meshplan.solver.planner import _resolve
from meshplan.solver.schema import PlanRequest
from meshplan.solver.space import Space

MOE = {
    "model": {"preset": "mixtral-8x7b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 64},
    "training": {"seq_len": 4096, "global_batch_tokens": 4096 * 256},
}


def _tables(req: PlanRequest) -> tuple[Space, Tables]:
    A, H, cm = _resolve(req)
    sp = Space.build(A, H, req.training, req.search, cm, prune=False)
    return sp, Tables(sp)


@oracle_settings(200)
@given(instances())
def test_expert_group_bounds_and_the_cells_they_leave_out(req: PlanRequest) -> None:
    if req.cluster.num_gpus > 96:  # the point-by-point check walks the whole product
        return
    sp, tb = _tables(req)
    if not (sp.layouts and sp.pv and sp.db and sp.te):
        return
    coarse = tb.coarse()
    by_te, ends = tb.memo["by_te"]
    points = [(p, tb.index[p.lay]) for p in sp.points() if sp.cm.fits(p)]
    objs = [sp.cm.objective_int(p) for p, _ in points]
    for (p, i), obj in zip(points, objs, strict=True):
        k = ends[i] + int(np.flatnonzero(tb.agree("te", i) == tb.pos["te"][p.axis("te")])[0])
        assert coarse[i] <= by_te[k] <= obj, (p, coarse[i], by_te[k], obj)
    if not objs:
        return
    cap = float(np.median(objs))  # about half the fitting points lie above it
    rows = sorted({i for _, i in points})
    fine = {i: tb.fine(i, cap) for i in rows}
    for (p, i), obj in zip(points, objs, strict=True):
        f = fine[i]
        listed = (f.db == tb.pos["db"][p.axis("db")]) & (f.te == tb.pos["te"][p.axis("te")])
        if obj <= cap:  # every point the model may need is in a listed cell
            assert listed.any(), (p, obj, cap)
        if not listed.any():  # the summary of the cells left out is below their points
            assert f.rest <= obj, (p, f.rest, obj)
        assert f.bound <= obj


def test_expert_groups_above_the_cap_are_left_out_of_the_fine_bounds() -> None:
    sp, tb = _tables(PlanRequest.model_validate(MOE))
    coarse = tb.coarse()
    row = int(np.argmin(coarse))
    te, rest = tb.te_within(row, np.inf)
    assert np.array_equal(te, tb.agree("te", row)) and rest == np.inf
    by_te, ends = tb.memo["by_te"]
    mine = by_te[ends[row] : ends[row + 1]]
    assert len(mine) > 1 and coarse[row] == mine.min()  # a MoE row has several expert groups
    cap = float(np.sort(mine)[len(mine) // 2])
    kept, rest = tb.te_within(row, cap)
    assert 0 < len(kept) < len(mine) and rest == mine[mine > cap].min()
    f = tb.fine(row, cap)
    assert set(f.te.tolist()) <= set(kept.tolist()) and f.rest <= rest


def test_coarse_bounds_of_any_rows_are_those_of_all_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """The coarse bounds of a row do not depend on the rows bounded with it: every other row
    (gathered, not a run of rows sliced) and small chunks give the same numbers, bit for bit,
    per row and per (row, expert group) pair."""
    from meshplan.solver.cpsat import coarse as coarse_mod

    sp, tb = _tables(PlanRequest.model_validate(MOE))
    every = np.arange(tb.n, dtype=np.int64)
    per, by_te = coarse_mod.coarse_bounds(tb, every)
    te = tb.flat["te"][2][tb.cls["te"]]
    ends = np.concatenate([[0], np.cumsum(te)])
    odd = every[1::2]
    assert len(odd) > 2 and np.isfinite(per[odd]).any()
    got, got_te = coarse_mod.coarse_bounds(tb, odd)
    assert np.array_equal(got, per[odd])
    assert np.array_equal(got_te, np.concatenate([by_te[ends[i] : ends[i + 1]] for i in odd]))
    monkeypatch.setattr(coarse_mod, "PAIRS_CHUNK", 7)  # a chunk of a row or two at a time
    assert np.array_equal(coarse_mod.coarse_bounds(tb, every)[1], by_te)


def test_a_kept_model_is_the_model_built_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    cache.clear()
    sp, tb = _tables(PlanRequest.model_validate(MOE))
    rows = np.argsort(tb.coarse(), kind="stable")[:3].tolist()
    first = build(tb, rows)
    calls = []
    real = build_mod._build
    monkeypatch.setattr(build_mod, "_build", lambda *a: calls.append(1) or real(*a))
    again = build(tb, rows)
    assert calls == []  # kept, not built again
    fresh = real(tb, rows, (), None)
    assert str(again.model.proto) == str(fresh.model.proto) == str(first.model.proto)
    hint = tb.guess(rows[0])
    assert hint is not None and again.axes.holds(hint)
    again.axes.hint(hint)  # hints go to the copy, not to the kept model
    assert len(again.model.proto.solution_hint.vars) > 0
    assert len(build(tb, rows).model.proto.solution_hint.vars) == 0
    build(tb, rows, cap=float(tb.coarse()[rows[0]]) * 2)  # another cap: another model
    assert calls == [1]


def test_kept_models_are_bounded_across_spaces(monkeypatch: pytest.MonkeyPatch) -> None:
    cache.clear()
    monkeypatch.setattr(build_mod, "MODELS", 2)
    sp, tb = _tables(PlanRequest.model_validate(MOE))
    rows = np.argsort(tb.coarse(), kind="stable")[:3].tolist()
    for n in (1, 2, 3):  # three models: the first is dropped
        build(tb, rows[:n])
    assert len(tb.memo["models"]) == 2 and (tuple(rows[:1]), (), None) not in tb.memo["models"]
    calls = []
    real = build_mod._build
    monkeypatch.setattr(build_mod, "_build", lambda *a: calls.append(1) or real(*a))
    build(tb, rows[:3])
    build(tb, rows[:1])
    assert calls == [1]  # the kept one reused, the dropped one built again
    # a dropped model's bytes leave its memo's count (same rows and cap: no new fine bounds)
    monkeypatch.setattr(build_mod, "MODELS", 1)
    first = build(tb, rows[:2])
    before = tb.memo.nbytes
    hint = tb.guess(rows[0])
    assert hint is not None
    second = build(tb, rows[:2], nogoods=(hint,))
    assert len(tb.memo["models"]) == 1
    assert tb.memo.nbytes == before + build_mod._nbytes(second) - build_mod._nbytes(first)


def test_the_lookup_of_axis_values_equals_isin() -> None:
    sp, tb = _tables(PlanRequest.model_validate(MOE))
    rows = np.argsort(tb.coarse(), kind="stable")[:4].tolist()
    ax = Axes(build_mod._Model(), tb, rows, None)
    rng = np.random.default_rng(0)
    for axis in ("lay", "db", "te", "r", "z"):
        col = ax.col[axis]
        for _ in range(20):
            keys = rng.choice(int(col.max()) + 3, size=rng.integers(0, 4), replace=False)
            assert np.array_equal(ax.among(axis, keys.tolist()), np.isin(col, keys))
