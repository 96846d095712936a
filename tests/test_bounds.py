"""The pruning half of the search is sound: every point that fits costs at least its
(cell, r, z)'s, its cell's and its row's bound, and no fitting point sits where the bounds say
nothing fits (the models leave those out)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from test_oracle_property import instances, oracle_settings

from meshplan.solver.cpsat.tables import Tables
from meshplan.solver.planner import _resolve
from meshplan.solver.schema import PlanRequest
from meshplan.solver.space import Space


@oracle_settings(60)
@given(instances())
def test_every_fitting_point_respects_its_bounds(req: PlanRequest) -> None:
    A, H, cm = _resolve(req)
    if H.num_gpus > 96:  # the point-by-point check walks the whole product
        return
    sp = Space.build(A, H, req.training, req.search, cm, prune=False)
    tb = Tables(sp)
    coarse = tb.coarse()
    tb.refine(list(range(len(sp.layouts))))
    for p in sp.points():
        if not cm.fits(p):
            continue
        i = tb.index[p.lay]
        f = tb.fine(i)
        (c,) = np.flatnonzero(
            (f.db == tb.pos["db"][p.axis("db")]) & (f.te == tb.pos["te"][p.axis("te")])
        )
        rz = f.by_rz[c, tb.pos["r"][p.r], tb.pos["z"][p.z]]
        obj = cm.objective_int(p)
        assert coarse[i] <= f.bound <= f.by_rz[c].min() <= rz <= obj, (p, coarse[i], f.bound, rz)
        assert rz == f.cell(f.db[c], f.te[c]) or f.by_rz[c].min() < rz
