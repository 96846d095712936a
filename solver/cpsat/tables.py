"""The cost model's tables for one space, computed once and shared by every model built over it
(row generation rebuilds the model several times): integer start tables over all layout rows,
the factors of every axis value, which axis values agree with which rows (by classes of rows),
and the bounds of `bounds.py`, coarse for every row and fine for the rows the search looks at.
Rows are referred to by their position in `sp.layouts` (an int)."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from functools import cached_property

import numpy as np

from meshplan.solver.costmodel import Layout, Point
from meshplan.solver.costmodel.point import Rows
from meshplan.solver.costmodel.terms import FACTOR_AXES, Compiled, Factor, Group, Points
from meshplan.solver.cpsat.bounds import (
    Fine,
    Sums,
    coarse_bounds,
    fine_bounds,
    shape_bounds,
    stack_sums,
)
from meshplan.solver.space import Space

AXES = ("pv", "db", "te", "r", "z")


class Stopped(Exception):
    """The solve was stopped or ran out of time while tables were being computed."""


class Tables:
    """Start tables, factors, compatible axis values and row bounds for one space."""

    def __init__(self, sp: Space, check: Callable[[], None] = lambda: None) -> None:
        self.sp = sp
        self.check = check  # raises Stopped when the solve must end
        self.rows: Rows = sp.rows
        self.n = len(sp.layouts)
        self.domain: dict[str, list] = {
            "pv": sp.pv,
            "db": sp.db,
            "te": sp.te,
            "r": sp.rs,
            "z": sp.zs,
        }
        self.pos = {a: {v: i for i, v in enumerate(d)} for a, d in self.domain.items()}
        # Rows agree with the same axis values when they share a class: their pp (pv), dp (db),
        # (tp, dp·cp) (te: the expert groups that fold into tp·cp·dp) or (pp > 1, dp·cp > 1) (z).
        R = self.rows
        shard = R.dp * R.cp
        keys = {
            "pv": R.pp,
            "db": R.dp,
            "te": R.tp * (1 << 32) + shard,
            "z": (R.pp > 1) * 2 + (shard > 1),
        }
        self.cls: dict[str, np.ndarray] = {}
        self.members: dict[str, list[np.ndarray]] = {}
        self._flat: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for axis, k in keys.items():
            uniq, first, inv = np.unique(k, return_index=True, return_inverse=True)
            self.cls[axis] = inv.astype(np.int64).reshape(-1)
            self.members[axis] = self._agree(axis, [sp.layouts[i] for i in first.tolist()])
            sizes = np.array([len(m) for m in self.members[axis]], dtype=np.int64)
            flat = np.concatenate([*self.members[axis], np.zeros(0, np.int64)]).astype(np.int64)
            offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
            self._flat[axis] = (flat, offsets, sizes)
        z_of = self.members["z"]
        self.z_ok = np.zeros((len(z_of), len(sp.zs)), dtype=bool)
        for c, m in enumerate(z_of):
            self.z_ok[c, m] = True
        self._fracs: dict[tuple[Factor, str], dict[object, Fraction]] = {}
        self._ffracs: dict[tuple[Factor, str], np.ndarray] = {}
        self._fmat: dict[tuple[str, str], np.ndarray] = {}
        self._coarse: np.ndarray | None = None
        self._by_db: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # row: shapes, their bounds
        self.cap = np.inf  # the best objective known: cells above it need no fine bounds
        self.best: Point | None = None  # a point of that objective, when the tables found it
        self._fine: dict[int, Fine] = {}

    def _agree(self, axis: str, rows: list[Layout]) -> list[np.ndarray]:
        """Per row (one of each class): positions of the axis values that agree with it
        (Space.compatible)."""
        sp = self.sp
        if axis == "z":
            pos = self.pos["z"]
            return [np.array([pos[z] for z in sp.zero_values(r)], dtype=np.int64) for r in rows]
        if not self.domain[axis]:
            return [np.zeros(0, dtype=np.int64) for _ in rows]
        dom = np.array(self.domain[axis], dtype=np.int64)
        if axis == "pv":
            return [np.flatnonzero(dom[:, 0] == r.pp) for r in rows]
        if axis == "db":
            return [np.flatnonzero(dom[:, 0] == r.dp) for r in rows]
        group = dom[:, 1] * dom[:, 2]
        return [
            np.flatnonzero((dom[:, 0] == r.tp) & ((r.tp * r.cp * r.dp) % group == 0)) for r in rows
        ]

    @cached_property
    def factor_fns(self) -> dict[str, dict[Factor, int]]:
        """Per factor axis: every factor of the cost model, numbered from 1 (0: no factor)."""
        out: dict[str, dict[Factor, int]] = {a: {} for a in FACTOR_AXES}
        for comp in self.sp.cm.compiled():
            for g in comp.groups:
                for axis, fn in zip(FACTOR_AXES, g.factors, strict=True):
                    if fn is not None and fn not in out[axis]:
                        out[axis][fn] = len(out[axis]) + 1
        return out

    def factor_matrix(self, axis: str, kind: str) -> np.ndarray:
        """Every factor of the axis (rows, as numbered by `factor_fns`; row 0 is 1) over the
        axis' domain (kind "dom") or its least / greatest per class of rows ("lo", "hi")."""
        k = (axis, kind)
        if k not in self._fmat:
            fns = list(self.factor_fns[axis])
            dom = np.ones((1 + len(fns), len(self.domain[axis])))
            for i, fn in enumerate(fns):
                dom[1 + i] = self.float_fracs(axis, fn)
            self._fmat[(axis, "dom")] = dom
            flat, offsets, sizes = self._flat[axis]
            v = dom[:, flat]
            pad = np.ones((len(dom), 1))
            empty = sizes == 0
            lo = np.minimum.reduceat(np.hstack([v, pad * np.inf]), offsets, axis=1)
            hi = np.maximum.reduceat(np.hstack([v, pad * -np.inf]), offsets, axis=1)
            self._fmat[(axis, "lo")] = np.where(empty, np.nan, lo)
            self._fmat[(axis, "hi")] = np.where(empty, np.nan, hi)
        return self._fmat[k]

    def factor_number(self, axis: str, fn: Factor | None) -> int:
        return 0 if fn is None else self.factor_fns[axis][fn]

    def sums(self) -> Sums:
        """Every sum of the cost model, its groups stacked (bounds.Sums), kept with the rows
        (for these recomputation and ZeRO values): built once across requests."""
        k = ("sums", tuple(self.sp.rs), tuple(self.sp.zs))
        if k not in self.rows.memo:
            self.rows.memo[k] = stack_sums(self, self.sp.cm.sums(self.sp.zs), self.starts)
        return self.rows.memo[k]

    @cached_property
    def index(self) -> dict[Layout, int]:
        return {r: i for i, r in enumerate(self.sp.layouts)}

    # -- start tables and factors -----------------------------------------------------------
    def starts(self, comp: Compiled, g: Group, keyval: object) -> np.ndarray:
        """The group's integer start for every layout row of the space, in `sp.layouts` order
        (each table computed once, over all rows at once; a stop is checked between tables)."""
        if (g, keyval, comp.scale, comp.up) not in self.rows.memo:
            self.check()
        return g.int_starts(self.rows, keyval, comp.scale, comp.up)

    def fracs(self, axis: str, fn: Factor) -> dict[object, Fraction]:
        """The factor of every value of the axis in the space."""
        k = (fn, axis)
        if k not in self._fracs:
            fr = self.sp.cm.fracs
            self._fracs[k] = {v: fr(fn, v) for v in self.domain[axis]}
        return self._fracs[k]

    def float_fracs(self, axis: str, fn: Factor) -> np.ndarray:
        """The factors as floats, in domain order (for the bounds, whose margin covers the
        rounding)."""
        k = (fn, axis)
        if k not in self._ffracs:
            num, den = self.sp.cm.fracs.arrays(fn, self.domain[axis])
            self._ffracs[k] = num.astype(float) / den.astype(float)
        return self._ffracs[k]

    def agree(self, axis: str, row: int) -> np.ndarray:
        """Positions (in the axis' domain) of the values that agree with row `row`."""
        return self.members[axis][self.cls[axis][row]]

    def compatible(self, axis: str, row: int) -> list:
        dom = self.domain[axis]
        return [dom[i] for i in self.agree(axis, row).tolist()]

    # -- bounds --------------------------------------------------------------------------
    def coarse(self) -> np.ndarray:
        """The coarse bound of every row of the space (inf: nothing in the row fits)."""
        if self._coarse is None:
            self._coarse = coarse_bounds(self, np.arange(self.n, dtype=np.int64))
        return self._coarse

    def shapes_within(self, row: int, cap: float) -> tuple[np.ndarray, float]:
        """The micro-batch shapes of the row whose bound is at most `cap` (positions in the db
        domain), and the least bound of the others (inf: none)."""
        if row not in self._by_db:
            self._by_db[row] = shape_bounds(self, np.array([row]))[0]
        ds, bounds = self._by_db[row]
        keep = bounds <= cap
        rest = bounds[~keep]
        return ds[keep], float(rest.min()) if len(rest) else np.inf

    def refine(self, rows: list[int], cap: float | None = None) -> None:
        """Compute the fine bounds of these rows (those not done already), of every cell whose
        bound may be at most `cap` (default: the best objective known, `self.cap`)."""
        cap = self.cap if cap is None else cap
        todo = [r for r in rows if r not in self._fine or self._fine[r].upto < cap]
        new = [r for r in todo if r not in self._by_db]
        if new:
            self._by_db.update(zip(new, shape_bounds(self, np.array(new)), strict=True))
        if todo:
            self._fine.update(fine_bounds(self, todo, cap))

    def fine(self, row: int, cap: float | None = None) -> Fine:
        self.refine([row], cap)
        return self._fine[row]

    def bound(self, row: int) -> float:
        """The row's best bound so far: fine once refined, else coarse (inf: nothing fits)."""
        f = self._fine.get(row)
        return f.bound if f is not None else float(self.coarse()[row])

    def improve_cap(self, rows: list[int]) -> None:
        """Score the guesses of these rows exactly (many at once) and lower the cap to the best
        that fits: the best point known so far (`self.best`)."""
        found = [
            (r, self._fine[r]) for r in rows if r in self._fine and self._fine[r].at is not None
        ]
        if not found:
            return
        at = [(f.db[f.at[0]], f.te[f.at[0]], f.pv[f.at], f.at[1], f.at[2]) for _, f in found]
        pts = Points(
            np.array([r for r, _ in found], dtype=np.int64),
            {
                a: (self.domain[a], np.array([x[k] for x in at], dtype=np.int64))
                for k, a in enumerate(("db", "te", "pv", "r", "z"))
            },
        )
        cm = self.sp.cm
        obj = np.where(cm.fits_many(self.rows, pts), cm.objective_ints(self.rows, pts), np.inf)
        j = int(np.argmin(obj))
        if obj[j] < self.cap:
            self.cap = float(obj[j])
            self.best = self.guess(found[j][0])

    def guess(self, row: int) -> Point | None:
        """A point of the row where its fine bound is reached: a hint."""
        f = self.fine(row)
        if f.at is None:
            return None
        c, ri, zi = f.at
        (_, b, m), (_, e, et) = self.sp.db[f.db[c]], self.sp.te[f.te[c]]
        v = self.sp.pv[f.pv[c, ri, zi]][1]
        return Point(self.sp.layouts[row], v, b, m, e, et, self.sp.rs[ri], self.sp.zs[zi])
