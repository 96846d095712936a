"""`space_least.least_points` (the least-memory points of many layouts from the rows' arrays)
gives the points `Space.least_memory_point` gives one layout at a time, and the memory of each."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import h100_space

from meshplan.solver.costmodel.point import Rows
from meshplan.solver.costmodel.terms import POINT_AXES, Points
from meshplan.solver.space_least import least_points

CASES = [  # (model, GPUs, seq_len, search): dense and MoE, pins that change the least point
    ("llama3-8b", 64, 8192, {}),
    ("llama3-405b", 512, 8192, {"virtual_stages": 2}),
    ("llama3-70b", 48, 4096, {"allow_fewer_gpus": True, "zero_stage": 1}),
    ("mixtral-8x22b", 64, 4096, {}),
    ("qwen3-235b-a22b", 256, 8192, {"recompute": "SELECTIVE"}),
    ("deepseek-v3", 2048, 4096, {"micro_batch_size": 2}),
]


def _by_row(points: Points | None) -> dict[int, tuple]:
    if points is None:
        return {}
    return {
        r: tuple(points.axes[a][0][points.axes[a][1][k]] for a in POINT_AXES)
        for k, r in enumerate(points.row.tolist())
    }


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_least_points_are_the_least_memory_points(case: tuple) -> None:
    sp = h100_space(*case)
    lays = sp.all_layouts
    rows = Rows.of(lays)
    at = list(range(len(lays)))[::-1][: max(1, len(lays) * 2 // 3)]  # not in row order
    pts, pos = sp._least_points(lays, at)
    want = Points.of(pts, pos)
    got = least_points(sp, rows, at)
    assert got is not None and _by_row(got) == _by_row(want)
    assert got.row.tolist() == want.row.tolist()  # the layouts kept, in the order asked
    for st in ("first", "last"):  # the same memory at each point
        a = sp.cm.stage_units(rows, got, st)
        b = sp.cm.stage_units(rows, want, st)
        assert np.array_equal(a, b)


def test_least_points_of_no_layout_or_none_with_a_point() -> None:
    sp = h100_space(*CASES[0])
    rows = Rows.of(sp.all_layouts)
    assert least_points(sp, rows, []) is None
    sp.zs = []  # no ZeRO stage the framework runs: no layout has a least-memory point
    sp._zcache.clear()
    assert least_points(sp, rows, list(range(len(rows)))) is None


def test_memory_starts_are_what_fits_reads_group_by_group() -> None:
    """memory_starts fills the rows' memo with the integer start tables CostModel.fits would
    compute group by group (Group.int_starts over fresh rows), and the same fit answers."""
    from meshplan.solver.space_least import memory_starts

    sp = h100_space(*CASES[3])
    lays = sp.all_layouts
    batched, alone = Rows.of(lays), Rows.of(lays)
    pts = [(i, p) for i, lay in enumerate(lays[:6]) if (p := sp.least_memory_point(lay))]
    memory_starts(sp.cm, batched, {(p.r, p.z) for _, p in pts})
    asked = [k for k in batched.memo if isinstance(k, tuple) and len(k) == 4]
    assert asked
    for g, kv, scale, up in asked:
        assert np.array_equal(batched.memo[(g, kv, scale, up)], g.int_starts(alone, kv, scale, up))
    assert pts
    for i, p in pts:
        assert sp.cm.fits(p, batched, i) == sp.cm.fits(p, alone, i)
