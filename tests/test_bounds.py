"""The pruning half of the search is sound: every point that fits costs at least its cell's and
its row's bound, and no fitting point sits in a cell or row the bounds call impossible."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from test_oracle_property import instances

from meshplan.solver.cpsat.tables import Tables
from meshplan.solver.planner import _resolve
from meshplan.solver.schema import PlanRequest
from meshplan.solver.space import Space


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(instances())
def test_every_fitting_point_respects_its_bounds(req: PlanRequest) -> None:
    A, H, cm = _resolve(req)
    if H.num_gpus > 96:  # the point-by-point check walks the whole product
        return
    sp = Space.build(A, H, req.training, req.search, cm, prune=False)
    tb = Tables(sp)
    coarse = tb.coarse()
    tb.refine(sp.layouts)
    for p in sp.points():
        if not cm.fits(p):
            continue
        cell = tb.cell_bound(p.lay, p.axis("db"), p.axis("te"))
        fine = tb.bound(p.lay)
        assert cell is not None and fine is not None and coarse[p.lay] is not None, p
        obj = cm.objective_int(p)
        assert coarse[p.lay] <= fine <= cell <= obj, (p, coarse[p.lay], fine, cell, obj)
