"""`terms.int_starts_many` (the start tables the bounds stack, computed together) gives every
group's integer starts exactly as `Group.int_starts` does, one group at a time."""

from __future__ import annotations

import numpy as np
import pytest

from meshplan.solver import cache
from meshplan.solver.costmodel.point import Rows
from meshplan.solver.costmodel.terms import Group, Term, int_starts_many
from meshplan.solver.planner import _resolve
from meshplan.solver.schema import PlanRequest
from meshplan.solver.space import Space


def _asks(model: str, n: int) -> tuple[list, list]:
    req = PlanRequest.model_validate(
        {
            "model": {"preset": model},
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": n},
            "training": {"seq_len": 4096},
        }
    )
    A, H, cm = _resolve(req)
    sp = Space.build(A, H, req.training, req.search, cm, prune=False)
    asks = []
    for comp, _ in cm.sums(sp.zs):
        for g in comp.groups:
            vals = [None] if g.sel is None else (sp.rs if g.sel == "r" else sp.zs)
            asks += [(g, None if v is None else g.key(v), comp.scale, comp.up) for v in vals]
    return sp.layouts, asks


@pytest.mark.parametrize("model, n", [("llama3-70b", 64), ("mixtral-8x7b", 128)])
def test_the_same_integers_as_group_by_group(model: str, n: int) -> None:
    cache.clear()
    layouts, asks = _asks(model, n)
    assert any(len(g.terms) > 1 for g, *_ in asks)  # some group sums several terms
    one, many = Rows.of(layouts), Rows.of(layouts)
    some = asks[::3]  # some computed before, one group at a time: read back, not recomputed
    kept = [g.int_starts(many, kv, s, u) for g, kv, s, u in some]
    got = int_starts_many(many, asks)
    assert all(a is b for a, b in zip(kept, int_starts_many(many, some), strict=True))
    assert int_starts_many(many, asks)[-1] is got[-1]  # kept in the memo
    for (g, kv, s, u), x in zip(asks, got, strict=True):
        want = g.int_starts(one, kv, s, u)
        assert x.dtype == want.dtype and np.array_equal(x, want)


def test_past_int_safe_group_by_group() -> None:
    rows = Rows.of(_asks("llama3-8b", 8)[0][:5])
    big = Term("big", lambda r, _: r.tp * 1e18 + 0.5)
    small = Term("small", lambda r, _: r.dp * 0.25)
    asks = [(Group(None, lambda x: x, (None,) * 3, [small, big]), None, 3.0, True)]
    asks.append((Group(None, lambda x: x, (None,) * 3, [small]), None, 1.5, False))
    got = int_starts_many(rows, asks)
    assert got[0].dtype == object  # Python integers: exact past int64
    fresh = Rows.of(rows.layouts())
    for (g, kv, s, u), x in zip(asks, got, strict=True):
        assert list(x) == list(g.int_starts(fresh, kv, s, u))
    assert list(got[1]) == [int(np.floor(d * 0.25 * 1.5)) for d in rows.dp.tolist()]
