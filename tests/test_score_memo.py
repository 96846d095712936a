"""A cost model keeps the fit and objective of the points it scored over some rows: a point
scored again is read, not computed, the value is the one computed afresh, at most SCORES_KEPT
points are kept per rows, and what was kept goes with the rows."""

from __future__ import annotations

import gc
from itertools import islice

import pytest

from meshplan.solver.costmodel import CostModel
from meshplan.solver.costmodel import model as model_mod
from meshplan.solver.costmodel.point import Rows
from meshplan.solver.costmodel.terms import Compiled
from meshplan.solver.planner import _resolve
from meshplan.solver.schema import PlanRequest
from meshplan.solver.space import Space

REQ = PlanRequest.model_validate(
    {
        "model": {"preset": "llama3-8b"},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 16},
        "training": {"seq_len": 4096},
    }
)


def _space() -> Space:
    A, H, cm = _resolve(REQ)
    return Space.build(A, H, REQ.training, REQ.search, cm, prune=False)


def _scores(cm: CostModel, sp: Space, rows: Rows, pts: list) -> list[tuple[bool, int]]:
    at = {lay: i for i, lay in enumerate(sp.layouts)}
    return [(cm.fits(p, rows, at[p.lay]), cm.objective_int(p, rows, at[p.lay])) for p in pts]


def test_a_point_scored_again_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    sp = _space()
    fresh = CostModel(sp.A, sp.H, sp.training, sp.search)  # nothing kept
    rows = Rows.of(sp.layouts)
    pts = list(islice(sp.points(), 0, 4000, 200))  # 20 points: 40 scores, all kept
    want = _scores(fresh, sp, rows, pts)
    assert {f for f, _ in want} == {True, False}  # points that fit and points that do not
    calls = [0]
    real = Compiled.value
    monkeypatch.setattr(
        Compiled, "value", lambda *a, **k: calls.__setitem__(0, calls[0] + 1) or real(*a, **k)
    )
    got = _scores(sp.cm, sp, rows, pts)
    first = calls[0]
    again = _scores(sp.cm, sp, rows, pts)
    assert got == want == again
    assert first > 0 and calls[0] == first  # the second round computed nothing


def test_at_most_scores_kept_points_per_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_mod, "SCORES_KEPT", 4)
    sp = _space()
    cm = CostModel(sp.A, sp.H, sp.training, sp.search)  # no rows scored before
    rows = Rows.of(sp.layouts)
    _scores(cm, sp, rows, list(islice(sp.points(), 10)))
    assert len(cm._scores) == 1 and len(cm._scores[rows]) == 4
    del rows
    gc.collect()
    assert len(cm._scores) == 0  # the rows gone, their scores with them
