"""What a repeated request reads from its cached space (`Space.kept`, `Space.index`,
`Space.domains`) instead of computing again: the answer is the same, and the reason of an
infeasible request, whether some layout fits and the answer's scores are computed once."""

from __future__ import annotations

import pytest

from meshplan.solver import cache, explain, planner
from meshplan.solver.planner import plan
from meshplan.solver.schema import PlanRequest
from meshplan.solver.space import FIT_FIRST, Space


def _request(model: str, num_gpus: int) -> PlanRequest:
    return PlanRequest.model_validate(
        {"model": {"preset": model}, "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": num_gpus},
         "training": {"seq_len": 4096}, "options": {"time_limit_s": 10}}
    )  # fmt: skip


def _same(a: object, b: object) -> None:
    drop = {"solver": {"wall_time_s", "solve_time_s"}}
    assert a.model_dump(exclude=drop) == b.model_dump(exclude=drop)


def test_a_repeated_plan_scores_its_answer_once(monkeypatch: pytest.MonkeyPatch) -> None:
    cache.clear()
    req = _request("llama3-8b", 64)
    first = plan(req)
    calls = []
    real = planner.wall
    monkeypatch.setattr(planner, "wall", lambda *a: calls.append(a) or real(*a))
    again = plan(req)
    assert calls == []  # read from the space: not scored again
    _same(first, again)
    cache.clear()
    fresh = plan(req)  # computed afresh: the same answer
    assert len(calls) == 1
    _same(first, fresh)


def test_a_repeated_infeasible_plan_explains_once(monkeypatch: pytest.MonkeyPatch) -> None:
    cache.clear()
    req = _request("llama3-405b", 8)
    calls = []
    real = explain.reason
    monkeypatch.setattr(explain, "reason", lambda *a: calls.append(a) or real(*a))
    first = plan(req)
    assert first.status.value == "INFEASIBLE" and first.explanation.min_gpus > 8
    again = plan(req)
    assert len(calls) == 1
    _same(first, again)


def test_some_layout_fits_is_kept_and_index_is_the_positions() -> None:
    cache.clear()
    req = _request("llama3-70b", 16)
    A, H, cm = planner._resolve(req)
    sp = Space.build(A, H, req.training, req.search, cm, prune=False)
    assert sp.index == {lay: i for i, lay in enumerate(sp.layouts)}
    assert sp.domains == (tuple(sp.pv), tuple(sp.db), tuple(sp.te), tuple(sp.rs), tuple(sp.zs))
    got = sp.some_layout_fits()
    assert sp.kept(("fits", FIT_FIRST), lambda: not got) is got  # kept: not computed again
