"""A compiled group of terms as CP-SAT constraints: start table, then one factor at a time.

start: X0 = Σ_row c_row·y_row (per key literal of r or z when the start depends on one); each
factor num/den over an axis: X_{i+1} = ceil(num·X_i/den) (costs) or floor (credits) when that axis
value is chosen, as two linear inequalities. The model's value equals `Compiled.value` exactly.
"""

from __future__ import annotations

from fractions import Fraction

from ortools.sat.python import cp_model

from meshplan.solver.costmodel.terms import FACTOR_AXES, Compiled, Group
from meshplan.solver.cpsat.variables import Axes

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
    tb = ax.tables
    if g.sel is None:
        coefs = [tb.start(comp, g, r, None) for r in rows]
        lo, hi = min(coefs), _bounded(max(coefs))
        if hi == lo == 0:
            return 0, 0
        x = m.new_int_var(min(lo, 0), hi, "x0")
        m.add(x == cp_model.LinearExpr.weighted_sum(ys, coefs))
    else:
        keyvals = ax.key_values(g.sel, g.key)
        table = {kv: [tb.start(comp, g, r, kv) for r in rows] for kv in keyvals}
        lo = min(min(c) for c in table.values())
        hi = _bounded(max(max(c) for c in table.values()))
        if hi == lo == 0:
            return 0, 0
        x = m.new_int_var(min(lo, 0), hi, "x0")
        for kv, coefs in table.items():
            lit = ax.key_literal(g.sel, g.key, kv)
            expr = cp_model.LinearExpr.weighted_sum(ys, coefs)
            if lit is True:
                m.add(x == expr)
            else:
                m.add(x == expr).only_enforce_if(lit)
    for axis, fn in zip(FACTOR_AXES, g.factors, strict=True):
        if fn is None:
            continue
        # Axis values that share a factor share one literal (their one-hot sum): far fewer links.
        fr = tb.fracs(axis, fn)
        by_frac: dict[Fraction, list[object]] = {}
        for k in ax.vals[axis]:
            by_frac.setdefault(fr[k], []).append(k)
        nhi = _bounded(max(-(-hi * f.numerator // f.denominator) for f in by_frac))
        nlo = min(0, min(lo * f.numerator // f.denominator for f in by_frac))
        y = m.new_int_var(nlo, nhi, "x")
        for f, keys in by_frac.items():
            lit = ax.any_of(axis, keys)
            # Two-sided: y is exactly the rounded product, so presolve has no slack to reason
            # about (one-sided links let OR-Tools 9.15's dual presolve wrongly prove INFEASIBLE).
            num, den = f.numerator, f.denominator
            lo_c, hi_c = (0, den - 1) if comp.up else (-(den - 1), 0)
            link = m.add_linear_constraint(den * y - num * x, lo_c, hi_c)
            if lit is not True:
                link.only_enforce_if(lit)
        x, hi, lo = y, nhi, nlo
    return x, hi


def compiled_vars(
    m: cp_model.CpModel, ax: Axes, comp: Compiled
) -> tuple[list[cp_model.IntVar | int], int]:
    """All groups of a compiled sum, and the sum's upper bound."""
    out = [group_var(m, ax, comp, g) for g in comp.groups]
    return [v for v, _ in out], sum(h for _, h in out)
