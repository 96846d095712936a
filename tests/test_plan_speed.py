"""What makes plans fast keeps them the same: fine bounds do not depend on how rows are batched,
a space's tables kept across requests give the same answer without recomputing them, the
vectorised least-memory needs equal the point-by-point ones, and one BLAS thread while planning
is restored afterwards."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from meshplan.solver import cache, plan
from meshplan.solver.blas import one_blas_thread
from meshplan.solver.costmodel.model import STAGES
from meshplan.solver.cpsat import bounds, tables
from meshplan.solver.cpsat.tables import Tables
from meshplan.solver.planner import _resolve
from meshplan.solver.schema import PlanRequest
from meshplan.solver.space import Space

MOE = {
    "model": {"preset": "mixtral-8x7b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 64},
    "training": {"seq_len": 4096, "global_batch_tokens": 4096 * 256},
}
DENSE = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 16},
    "training": {"seq_len": 8192, "global_batch_tokens": 8192 * 64},
}

TIGHT = {  # a 70B model on 16 GPUs: many layouts cannot fit even at their least memory
    "model": {"preset": "llama3-70b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 16},
    "training": {"seq_len": 8192, "global_batch_tokens": 8192 * 64},
}


def _space(spec: dict) -> tuple[Space, object]:
    req = PlanRequest.model_validate(spec)
    A, H, cm = _resolve(req)
    return Space.build(A, H, req.training, req.search, cm, prune=False), cm


@pytest.mark.parametrize("spec", [MOE, DENSE], ids=["moe", "dense"])
def test_fine_bounds_do_not_depend_on_the_batch(spec: dict) -> None:
    sp, _ = _space(spec)
    tb = Tables(sp)
    order = np.argsort(tb.coarse(), kind="stable")[:24].tolist()
    cap = float(np.sort(tb.coarse())[3]) * 3
    together = bounds.fine_bounds(tb, order, cap)
    for r in order[::5]:
        alone = bounds.fine_bounds(tb, [r], cap)[r]
        got = together[r]
        assert got.bound == alone.bound and got.at == alone.at and got.rest == alone.rest
        assert np.array_equal(got.by_rz, alone.by_rz) and np.array_equal(got.pv, alone.pv)
        assert np.array_equal(got.db, alone.db) and np.array_equal(got.te, alone.te)
    # rows of several ZeRO classes (pp = 1 and pp > 1) were in the batch
    assert len({int(tb.cls["z"][r]) for r in order}) > 1


def test_a_repeated_space_reuses_its_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    cache.clear()
    req = PlanRequest.model_validate(MOE)
    first = plan(req)
    assert cache.info()["tables"] == 1 and cache.info()["table_bytes"] > 0
    calls = []
    for name in ("fine_bounds", "shape_bounds", "coarse_bounds"):
        real = getattr(tables, name)
        monkeypatch.setattr(tables, name, lambda *a, _f=real, _n=name: calls.append(_n) or _f(*a))
    again = plan(req)
    assert calls == []  # nothing recomputed
    assert again.config == first.config and again.solver.objective == first.solver.objective
    assert again.solver.status == first.solver.status == "OPTIMAL"
    # a different space (another batch) has tables of its own
    other = req.model_copy(
        update={"training": req.training.model_copy(update={"global_batch_tokens": 4096 * 512})}
    )
    plan(other)
    assert calls and cache.info()["tables"] == 2


def test_a_repeated_request_reuses_its_space_and_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    import meshplan.solver.planner as planner

    cache.clear()
    req = PlanRequest.model_validate(DENSE)
    first = plan(req)
    assert cache.info()["spaces"] == 1
    calls = []
    real_greedy, real_build = planner.greedy, Space.build
    monkeypatch.setattr(planner, "greedy", lambda *a: calls.append(1) or real_greedy(*a))
    monkeypatch.setattr(Space, "build", lambda *a, **k: calls.append(2) or real_build(*a, **k))
    again = plan(req)
    assert calls == []  # neither the space nor the greedy hint built again
    assert again.config == first.config and again.solver.objective == first.solver.objective
    pinned = req.model_copy(update={"search": req.search.model_copy(update={"tp": 2})})
    plan(pinned)  # a pin makes another space
    assert calls and cache.info()["spaces"] == 2
    cache.clear()
    assert cache.info()["spaces"] == 0


def test_the_tables_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    cache.clear()
    monkeypatch.setattr(cache, "MAX_TABLE_BYTES", 1)
    plan(PlanRequest.model_validate(DENSE))
    plan(PlanRequest.model_validate(MOE))
    assert cache.info()["tables"] == 1  # the older one dropped; the last is always kept
    cache.clear()
    assert cache.info()["tables"] == 0 and cache.info()["table_bytes"] == 0


@pytest.mark.parametrize("spec", [MOE, TIGHT], ids=["moe", "tight"])
def test_least_memory_needs_equal_point_by_point(spec: dict) -> None:
    sp, cm = _space(spec)
    got = sp.least_memory_needs()
    pts = [p for p in map(sp.least_memory_point, sp.all_layouts) if p is not None]
    assert [p for p, _ in got] == pts and pts
    for p, need in got:
        tenants = [sum(cm.tenants_int(p, st).values()) for st in STAGES]
        assert need == max(cm.stage_bytes(p, st) for st in STAGES) == max(tenants)
    # pruning keeps exactly the layouts whose least-memory point fits, in order
    req = PlanRequest.model_validate(spec)
    pruned = Space.build(sp.A, sp.H, req.training, req.search, cm, prune=True)
    assert pruned.layouts == [p.lay for p in pts if cm.fits(p)]
    assert len(pruned.layouts) < len(sp.all_layouts) or spec is not TIGHT


def _blas_threads() -> list[int]:
    return [x["num_threads"] for x in threadpool_info() if x["user_api"] == "blas"]


def test_one_blas_thread_while_planning_then_restored() -> None:
    before = _blas_threads()
    with one_blas_thread():
        assert all(n == 1 for n in _blas_threads())
        with one_blas_thread():  # nested (two plans at once share the limit)
            assert all(n == 1 for n in _blas_threads())
        assert all(n == 1 for n in _blas_threads())
    assert _blas_threads() == before
