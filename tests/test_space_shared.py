"""Spaces built without the memory prune share what they derive from their grid (one model on
GPU types with as many GPUs per node): the same lists, equal to a derivation afresh."""

from __future__ import annotations

import numpy as np
import pytest

from meshplan.solver import cache
from meshplan.solver.cpsat.tables import Tables
from meshplan.solver.planner import _resolve
from meshplan.solver.schema import PlanRequest
from meshplan.solver.space import Space

CASES = [
    ("llama3-8b", 16, {"seq_len": 4096}, {}),
    ("mixtral-8x7b", 64, {"seq_len": 8192}, {}),
    ("llama3-70b", 32, {"seq_len": 8192, "framework": "torchtitan"}, {"virtual_stages": 2}),
]


def _space(model: str, gpu: str, n: int, training: dict, search: dict, prune: bool) -> Space:
    req = PlanRequest.model_validate(
        {
            "model": {"preset": model},
            "cluster": {"gpu": gpu, "num_gpus": n},
            "training": training,
            "search": search,
        }
    )
    A, H, cm = _resolve(req)
    return Space.build(A, H, req.training, req.search, cm, prune=prune)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_spaces_of_one_grid_share_their_derived_lists(case: tuple) -> None:
    cache.clear()
    model, n, training, search = case
    a = _space(model, "h100-sxm-80gb", n, training, search, prune=False)
    b = _space(model, "h200-141gb", n, training, search, prune=False)
    assert a.layouts  # a space to compare
    for name in ("layouts", "all_layouts", "db", "db_all", "pv", "te", "te_all"):
        assert getattr(a, name) is getattr(b, name), name  # shared, not rebuilt
    grid = cache.grid(a.grid_key(n), lambda: None)
    fresh = a._derive(grid, list(grid.layouts))  # a derivation afresh
    assert (a.layouts, a.db, a.pv, a.te) == fresh
    pruned = _space(model, "h100-sxm-80gb", n, training, search, prune=True)
    assert pruned.all_layouts == a.all_layouts and pruned.all_layouts is not a.all_layouts
    assert set(pruned.layouts) <= set(a.layouts)


def _equal(a: object, b: object) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and bool((a == b).all())
    return a == b


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_memo_seeded_with_another_models_classes_equals_a_fresh_one(case: tuple) -> None:
    model, n, training, search = case
    cache.clear()
    a = _space(model, "h100-sxm-80gb", n, training, search, prune=False)
    Tables(a).coarse()  # computes the classes (and bounds) into a's memo
    b = _space(model, "h200-141gb", n, training, search, prune=False)
    seeded = Tables(b)
    assert seeded.memo["cls"] is Tables(a).memo["cls"]  # taken, not computed
    got = {k: v for k, v in seeded.memo.items() if k not in ("greedy",)}
    cache.clear()
    b2 = _space(model, "h200-141gb", n, training, search, prune=False)
    fresh = Tables(b2)
    want = dict(fresh.memo)
    assert got.keys() == want.keys()
    for k in want:
        assert _equal(got[k], want[k]), k
    assert _equal(seeded.coarse(), fresh.coarse())  # and the bounds read from them
