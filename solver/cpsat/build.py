"""The CP-SAT model, one constraint family at a time: memory per stage, dp exposure, objective."""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from solver.costmodel.model import STAGES
from solver.cpsat.chains import compiled_vars, group_var
from solver.cpsat.variables import Axes
from solver.space import Space


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


def build(sp: Space) -> Built:
    m = cp_model.CpModel()
    ax = Axes(m, sp)
    add_memory(m, ax, sp)
    bounds = [0] * len(ax.lay)
    obj = sum(compiled_vars(m, ax, sp.cm.objective, bounds)[0]) + add_dp_exposure(m, ax, sp)
    # A valid cut: the objective is at least the chosen row's least cost (gives the LP a bound).
    m.add(obj >= cp_model.LinearExpr.weighted_sum(list(ax.lay.values()), bounds))
    m.minimize(obj)
    return Built(m, ax, obj)
