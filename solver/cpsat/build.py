"""The CP-SAT model, one constraint family at a time: memory per stage, dp exposure, objective."""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from meshplan.solver.costmodel import Point
from meshplan.solver.costmodel.model import STAGES
from meshplan.solver.cpsat.chains import compiled_vars, group_var
from meshplan.solver.cpsat.tables import Tables
from meshplan.solver.cpsat.variables import Axes
from meshplan.solver.space import Space


@dataclass
class Built:
    model: cp_model.CpModel
    axes: Axes
    objective: cp_model.LinearExpr


def add_memory(m: cp_model.CpModel, ax: Axes, sp: Space) -> None:
    """Each stage's tenants fit the usable HBM; of each pair only the smaller counts (min)."""
    for st in STAGES:
        mem = sp.cm.memory[st]
        parts, _ = compiled_vars(m, ax, mem.base)
        for a, b in mem.pairs:
            (va, ha), (vb, hb) = group_var(m, ax, a, a.groups[0]), group_var(m, ax, b, b.groups[0])
            hi = max(ha, hb)
            pick = m.new_bool_var("pick_first")
            both = m.new_int_var(0, max(hi, 0), "min_pair")
            m.add(both == va).only_enforce_if(pick)
            m.add(both == vb).only_enforce_if(~pick)
            parts.append(both)
        m.add(sum(parts) <= sp.cm.budget)


def add_dp_exposure(m: cp_model.CpModel, ax: Axes, sp: Space) -> cp_model.IntVar | int:
    """exposed >= comm(z) − credit(z) for the chosen ZeRO stage, and >= 0."""
    terms = []
    hi = 0
    for z, zb in ax.vals["z"].items():
        comm, credit = sp.cm.dp[z]
        (cv, chi), (rv, _) = compiled_vars(m, ax, comm), compiled_vars(m, ax, credit)
        if chi == 0:
            continue
        hi = max(hi, chi)
        terms.append((zb, sum(cv) - sum(rv)))
    if not terms:
        return 0
    e = m.new_int_var(0, hi, "dp_exposed")
    for zb, expr in terms:
        m.add(e >= expr).only_enforce_if(zb)
    return e


def build(sp: Space, tables: Tables, nogoods: tuple[Point, ...] = ()) -> Built:
    """The model over `sp` (possibly a restriction of `tables.sp` to some rows), excluding the
    given points (no-good cuts for alternatives)."""
    m = cp_model.CpModel()
    ax = Axes(m, sp, tables)
    add_memory(m, ax, sp)
    obj = sum(compiled_vars(m, ax, sp.cm.objective)[0]) + add_dp_exposure(m, ax, sp)
    # Valid cuts: the objective is at least the chosen row's bound, and its cell's; a cell
    # that cannot fit is excluded (this is what lets CP-SAT prove the optimum quickly).
    tables.refine(list(ax.lay))
    bounds = {r: tables.bound(r) for r in ax.lay}
    m.add(obj >= sum(b * ax.lay[r] for r, b in bounds.items() if b is not None))
    for r, y in ax.lay.items():
        if bounds[r] is None:  # nothing in the row fits
            m.add(y == 0)
            continue
        for d in tables.compatible("db", r):
            for t in tables.compatible("te", r):
                lb = tables.cell_bound(r, d, t)
                lits = [y, ax.vals["db"][d], ax.vals["te"][t]]
                if lb is None:
                    m.add_bool_or([~x for x in lits])
                elif lb > bounds[r]:
                    m.add(obj >= lb).only_enforce_if(lits)
    for p in nogoods:
        lits = ax.point_literals(p)
        if lits is not None:
            m.add(sum(lits) <= len(lits) - 1)
    m.minimize(obj)
    return Built(m, ax, obj)
