"""A compiled group of terms as CP-SAT constraints: start table, then one factor at a time.

start: X0 = Σ_k c_k·start(row_k, key_k) over the combinations k (each fixes a row and the
recomputation and ZeRO stage a start may be keyed by); each factor num/den over an axis:
X_{i+1} = ceil(num·X_i/den) (costs) or floor (credits) when that axis value is chosen, as two
linear inequalities. The model's value equals `Compiled.value` exactly.
"""

from __future__ import annotations

import numpy as np
from ortools.sat.python import cp_model

from meshplan.solver.costmodel.terms import FACTOR_AXES, Compiled, Group
from meshplan.solver.cpsat.variables import Axes

HORIZON = 1 << 61


def _bounded(x: int) -> int:
    if x >= HORIZON:
        raise OverflowError("a cost-model table exceeds the integer range of the CP-SAT model")
    return x


def _coefs(ax: Axes, comp: Compiled, g: Group) -> list[int]:
    """The group's integer start of every combination."""
    tb, rows = ax.tb, ax.col["lay"]
    if g.sel is None:
        return tb.starts(comp, g, None)[rows].tolist()
    out = np.zeros(ax.k, dtype=object)
    for kv, hit in ax.key_masks(g.sel, g.key):
        out[hit] = tb.starts(comp, g, kv)[rows[hit]]
    return [int(x) for x in out.tolist()]


def group_var(
    m: cp_model.CpModel, ax: Axes, comp: Compiled, g: Group
) -> tuple[cp_model.IntVar | int, int]:
    """The group's value as a variable (or 0) and its upper bound."""
    coefs = _coefs(ax, comp, g)
    lo, hi = min(coefs), _bounded(max(coefs))
    if hi == lo == 0:
        return 0, 0
    x = m.new_int_var(min(lo, 0), hi, "x0")
    m.add(x == cp_model.LinearExpr.weighted_sum(ax.combo, coefs))
    for axis, fn in zip(FACTOR_AXES, g.factors, strict=True):
        if fn is None:
            continue
        # Axis values that share a factor share one literal (their one-hot sum): far fewer links.
        by_frac = ax.by_factor(axis, fn)
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
