"""A compiled group of terms as CP-SAT constraints: start table, then one factor at a time.

start: X0 = Σ_row c_row·y_row (per key literal of r or z when the start depends on one); each
factor num/den over an axis: X_{i+1} = ceil(num·X_i/den) (costs) or floor (credits) when that axis
value is chosen, as two linear inequalities. The model's value equals `Compiled.value` exactly.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from solver.costmodel.terms import FACTOR_AXES, Compiled, Group, apply
from solver.cpsat.variables import Axes

HORIZON = 1 << 61


def _bounded(x: int) -> int:
    if x >= HORIZON:
        raise OverflowError("a cost-model table exceeds the integer range of the CP-SAT model")
    return x


def _row_bounds(ax: Axes, comp: Compiled, g: Group, starts: list[int]) -> list[int]:
    """Per layout row, the least value the group can take (a valid cut: values grow with the
    start and with each factor, and only the factors a row is compatible with count)."""
    out = []
    for row, x in zip(ax.lay, starts, strict=True):
        for axis, fn in zip(FACTOR_AXES, g.factors, strict=True):
            if fn is not None:
                x = min(apply(x, fn(k), comp.up) for k in ax.compatible(axis, row))
        out.append(x)
    return out


def group_var(
    m: cp_model.CpModel, ax: Axes, comp: Compiled, g: Group, bounds: list[int] | None = None
) -> tuple[cp_model.IntVar | int, int]:
    """The group's value as a variable (or 0) and its upper bound; adds the group's least value
    per row into `bounds` when given (costs only)."""
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
        mins = coefs
    else:
        keyvals = ax.key_values(g.sel, g.key)
        table = {kv: [g.start_int(r, kv, comp.scale, up) for r in rows] for kv in keyvals}
        lo = min(min(c) for c in table.values())
        hi = _bounded(max(max(c) for c in table.values()))
        if hi == lo == 0:
            return 0, 0
        mins = [min(col) for col in zip(*table.values(), strict=True)]
        x = m.new_int_var(min(lo, 0), hi, "x0")
        for kv, coefs in table.items():
            lit = ax.key_literal(g.sel, g.key, kv)
            expr = cp_model.LinearExpr.weighted_sum(ys, coefs)
            if lit is True:
                m.add(x == expr)
            else:
                m.add(x == expr).only_enforce_if(lit)
    if bounds is not None:
        for i, v in enumerate(_row_bounds(ax, comp, g, mins)):
            bounds[i] += v
    for axis, fn in zip(FACTOR_AXES, g.factors, strict=True):
        if fn is None:
            continue
        fracs = {k: fn(k) for k in ax.vals[axis]}
        nhi = _bounded(max(-(-hi * f.numerator // f.denominator) for f in fracs.values()))
        nlo = min(0, lo)
        y = m.new_int_var(nlo, nhi, "x")
        for k, f in fracs.items():
            lit = ax.vals[axis][k]
            # Two-sided: y is exactly the rounded product, so presolve has no slack to reason
            # about (one-sided links let OR-Tools 9.15's dual presolve wrongly prove INFEASIBLE).
            num, den = f.numerator, f.denominator
            if up:
                m.add(den * y - num * x >= 0).only_enforce_if(lit)
                m.add(den * y - num * x <= den - 1).only_enforce_if(lit)
            else:
                m.add(num * x - den * y >= 0).only_enforce_if(lit)
                m.add(num * x - den * y <= den - 1).only_enforce_if(lit)
        x, hi, lo = y, nhi, nlo
    return x, hi


def compiled_vars(
    m: cp_model.CpModel, ax: Axes, comp: Compiled, bounds: list[int] | None = None
) -> tuple[list[cp_model.IntVar | int], int]:
    """All groups of a compiled sum, and the sum's upper bound."""
    out = [group_var(m, ax, comp, g, bounds) for g in comp.groups]
    return [v for v, _ in out], sum(h for _, h in out)
