"""The first round's optimum proven without CP-SAT, when the bounds leave only a few points.

The first model holds the rows with the least bounds and is hinted with a point known to fit
(`search._incumbent`). A point of those rows can cost less than the hint only if its (cell, r,
z) bound is below the hint's objective (`bounds.Fine.by_rz`, a lower bound over the cell's
pipelines; a cell not listed has a bound above the cap, which the hint's objective does not
exceed). Those few (cell, r, z) times the row's pipelines are scored exactly, by the cost model
itself (`CostModel.fits`, `objective_int`: what CP-SAT's model equals). If none fits below the
hint, the hint is the model's optimum, as CP-SAT would prove it; otherwise CP-SAT decides.
"""

from __future__ import annotations

import numpy as np

from meshplan.solver.costmodel import Point
from meshplan.solver.cpsat.solved import Solved
from meshplan.solver.cpsat.tables import Tables

MAX_POINTS = 32  # points scored at most (~0.1 ms each): past this, a CP-SAT round


def held(tables: Tables, rows: list[int], cap: float, p: Point) -> bool:
    """The point is one of the model's over these rows at this cap (`variables.Axes._find`): its
    row is among them, its cell listed in the row's fine bounds and its (cell, r, z) bound at
    most the cap, its pipeline in the space's domain."""
    row = tables.index.get(p.lay)
    if row is None or row not in rows:
        return False
    pos = tables.pos
    try:
        d, t = pos["db"][p.axis("db")], pos["te"][p.axis("te")]
        r, z = pos["r"][p.r], pos["z"][p.z]
        pos["pv"][p.axis("pv")]
    except KeyError:
        return False
    f = tables.fine(row, cap)
    hit = np.flatnonzero((f.db == d) & (f.te == t))
    return bool(len(hit)) and bool(f.by_rz[hit[0], r, z] <= cap)


def exact_round(tables: Tables, rows: list[int], hint: Point | None, cap: float) -> Solved | None:
    """The hint as the optimum of the model over these rows below the cap (status OPTIMAL,
    bound = objective), when every point that may cost less is scored and none does; None when
    the hint is not a fitting point of the model within the cap, or too many points may beat
    it, or one does (CP-SAT decides then)."""
    if hint is None or not held(tables, rows, cap, hint):
        return None
    sp, cm, R = tables.sp, tables.sp.cm, tables.rows
    best = tables.score(hint)
    if best is None or best > cap:
        return None
    todo: list[tuple[Point, int]] = []
    for row in rows:
        f = tables.fine(row, cap)
        lay = sp.layouts[row]
        pvs = [sp.pv[j] for j in tables.agree("pv", row).tolist()]
        for c, ri, zi in zip(*np.nonzero(f.by_rz < best), strict=True):
            db, (_, e, et) = sp.db[f.db[c]], sp.te[f.te[c]]
            r, z = sp.rs[ri], sp.zs[zi]
            for pv in pvs:
                if sp.pipeline_fits_batch(pv, db):  # the model's schedule constraint
                    todo.append((Point(lay, pv[1], db[1], db[2], e, et, r, z), row))
        if len(todo) > MAX_POINTS:
            return None
    for p, row in todo:
        if p != hint and cm.objective_int(p, R, row) < best and cm.fits(p, R, row):
            return None
    return Solved("OPTIMAL", hint, float(best), float(best), 0.0)
