"""Seed 003's recipe as a plan: TP inside the node, PP across nodes, FSDP over the rest.

It is the CP-SAT hint and the fallback when the solve finds nothing in time; it only proposes
points of the space and keeps the first that fits, so it is never better than the optimum.
"""

from __future__ import annotations

from meshplan.solver.costmodel import Layout, Point
from meshplan.solver.schema import Recompute
from meshplan.solver.space import Space


def greedy(sp: Space, rows: list[Layout] | None = None) -> Point | None:
    """Smallest tp, then smallest pp, that fit with ZeRO-3; cheapest recompute; largest batch.
    `rows`: the layouts to try (default: all of the space's)."""
    zs = sorted(sp.zs, reverse=True)
    order = {Recompute.NONE: 0, Recompute.SELECTIVE: 1, Recompute.FULL: 2}
    rs = sorted(sp.rs, key=order.get)
    rows = sorted(sp.layouts if rows is None else rows, key=lambda r: (-r.gpus, r.cp, r.tp, r.pp))
    for lay in rows:
        dbs = sorted(sp.compatible("db", lay), key=lambda x: (-x[1] * x[2], x[1]))
        eps = sorted((e for _, e in sp.compatible("te", lay)), reverse=True)
        for v in ([v for _, v in sp.compatible("pv", lay)] or [1])[:1]:
            for _, b, m in dbs:
                for e in eps[:1]:
                    for r in rs:
                        p = Point(lay, v, b, m, e, r, zs[0])
                        if sp.cm.fits(p):
                            return p
    return None
