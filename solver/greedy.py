"""Seed 003's recipe as a plan: TP inside the node, PP across nodes, FSDP over the rest.

It is the CP-SAT hint and the fallback when the solve finds nothing in time; it only proposes
points of the space and keeps the first that fits, so it is never better than the optimum.
"""

from __future__ import annotations

from meshplan.solver.costmodel import Layout, Point
from meshplan.solver.schema import Recompute
from meshplan.solver.space import Space


def greedy(sp: Space, rows: list[Layout] | None = None) -> Point | None:
    """Smallest tp, then smallest pp, that fit with the highest ZeRO stage the framework runs
    there; cheapest recompute; largest batch. `rows`: the layouts to try (default: all)."""
    order = {Recompute.NONE: 0, Recompute.SELECTIVE: 1, Recompute.FULL: 2}
    rs = sorted(sp.rs, key=order.get)
    rows = sorted(sp.layouts if rows is None else rows, key=lambda r: (-r.gpus, r.cp, r.tp, r.pp))
    for lay in rows:
        dbs = sorted(sp.compatible("db", lay), key=lambda x: (-x[1] * x[2], x[1]))
        tes = sorted(sp.compatible("te", lay), key=lambda x: (-x[1] * x[2], -x[1]))
        zs = sp.compatible("z", lay)
        pvs = sp.compatible("pv", lay)
        if not (tes and zs and pvs):
            continue
        v = pvs[0][1]  # one chunk per stage: no interleaving constraint on the batch
        for _, b, m in dbs:
            _, e, et = tes[0]
            for r in rs:
                p = Point(lay, v, b, m, e, et, r, max(zs))
                if sp.cm.fits(p):
                    return p
    return None
