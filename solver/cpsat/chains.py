"""A compiled group of terms as CP-SAT constraints: start table, then one factor at a time.

start: X0 = Σ_row c_row·y_row (or ≥ / ≤ per key literal of r or z); each factor num/den over an
axis: den·X_{i+1} ≥ num·X_i (costs) or ≤ (credits) when that axis value is chosen. Minimisation
pushes each X to the rounded product, so the model's value equals `Compiled.value` exactly.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from solver.costmodel.terms import FACTOR_AXES, Compiled, Group
from solver.cpsat.variables import Axes

HORIZON = 1 << 61


def _bounded(x: int) -> int:
    if x >= HORIZON:
        raise OverflowError("a cost-model table exceeds the integer range of the CP-SAT model")
    return x


def group_var(
    m: cp_model.CpModel, ax: Axes, comp: Compiled, g: Group
) -> tuple[cp_model.IntVar | int, int]:
    """The group's value as a variable (or 0) and its upper bound."""
    rows = list(ax.lay)
    ys = [ax.lay[r] for r in rows]
    up = comp.up
    if g.sel is None:
        coefs = [g.start_int(r, None, comp.scale, up) for r in rows]
        lo, hi = min(coefs), _bounded(max(coefs))
        if hi == lo == 0:
            return 0, 0
        x = m.new_int_var(min(lo, 0), hi, "x0")
        m.add(x == cp_model.LinearExpr.weighted_sum(ys, coefs))
    else:
        keyvals = ax.key_values(g.sel, g.key)
        table = {kv: [g.start_int(r, kv, comp.scale, up) for r in rows] for kv in keyvals}
        lo = min(min(c) for c in table.values())
        hi = _bounded(max(max(c) for c in table.values()))
        if hi == lo == 0:
            return 0, 0
        x = m.new_int_var(min(lo, 0), hi, "x0")
        for kv, coefs in table.items():
            lit = ax.key_literal(g.sel, g.key, kv)
            expr = cp_model.LinearExpr.weighted_sum(ys, coefs)
            c = (x >= expr) if up else (x <= expr)
            if lit is True:
                m.add(c)
            else:
                m.add(c).only_enforce_if(lit)
    for axis, fn in zip(FACTOR_AXES, g.factors, strict=True):
        if fn is None:
            continue
        fracs = {k: fn(k) for k in ax.vals[axis]}
        nhi = _bounded(max(-(-hi * f.numerator // f.denominator) for f in fracs.values()))
        nlo = min(0, lo)
        y = m.new_int_var(nlo, nhi, "x")
        for k, f in fracs.items():
            lit = ax.vals[axis][k]
            if up:
                m.add(f.denominator * y >= f.numerator * x).only_enforce_if(lit)
            else:
                m.add(f.denominator * y <= f.numerator * x).only_enforce_if(lit)
        x, hi, lo = y, nhi, nlo
    return x, hi


def compiled_vars(
    m: cp_model.CpModel, ax: Axes, comp: Compiled
) -> tuple[list[cp_model.IntVar | int], int]:
    """All groups of a compiled sum, and the sum's upper bound."""
    out = [group_var(m, ax, comp, g) for g in comp.groups]
    return [v for v, _ in out], sum(h for _, h in out)
