"""The cost model's integer tables for one space, computed once and shared by every model built
over it (row generation rebuilds the model several times), and the bounds of `bounds.py`,
coarse for every row and fine for the rows the search looks at."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np

from meshplan.solver.costmodel import Layout, Point
from meshplan.solver.costmodel.point import Rows
from meshplan.solver.costmodel.terms import Compiled, Factor, Group
from meshplan.solver.cpsat.bounds import Fine, coarse_bounds, fine_bounds
from meshplan.solver.space import Space


class Stopped(Exception):
    """The solve was stopped or ran out of time while tables were being computed."""


class Tables:
    """Caches of integer starts, factors, compatible values and row bounds for one space."""

    def __init__(self, sp: Space, check: Callable[[], None] = lambda: None) -> None:
        self.sp = sp
        self.check = check  # raises Stopped when the solve must end
        self.rows: Rows = sp.rows
        self.index = {r: i for i, r in enumerate(sp.layouts)}
        self._fracs: dict[tuple[int, str], dict[object, Fraction]] = {}
        self._compat: dict[tuple[str, object], list[object]] = {}
        self._ffracs: dict[tuple[int, str], dict[object, float]] = {}
        self._ext: dict[tuple[int, str, object], tuple[float, float] | None] = {}
        self._coarse: dict[Layout, int | None] | None = None
        self._fine: dict[Layout, Fine] = {}

    def starts(self, comp: Compiled, g: Group, keyval: object) -> np.ndarray:
        """The group's integer start for every layout row of the space, in `sp.layouts` order
        (each table computed once, over all rows at once; a stop is checked between tables)."""
        k = (g, keyval, comp.scale, comp.up)
        if k not in self.rows.memo:
            self.check()
        return g.int_starts(self.rows, keyval, comp.scale, comp.up)

    def start(self, comp: Compiled, g: Group, row: Layout, keyval: object) -> int:
        return int(self.starts(comp, g, keyval)[self.index[row]])

    def fracs(self, axis: str, fn: Factor) -> dict[object, Fraction]:
        """The factor of every value of the axis in the full space."""
        k = (id(fn), axis)
        if k not in self._fracs:
            fr = self.sp.cm.fracs
            self._fracs[k] = {v: fr(fn, v) for v in self._domain(axis)}
        return self._fracs[k]

    def _domain(self, axis: str) -> list[object]:
        return {"pv": self.sp.pv, "db": self.sp.db, "te": self.sp.te}[axis]

    @staticmethod
    def _class(axis: str, row: Layout) -> object:
        if axis == "pv":
            return row.pp
        if axis == "db":
            return row.dp
        if axis == "z":
            return (row.pp == 1, row.dp * row.cp == 1)
        return (row.tp, row.dp * row.cp)

    def compatible(self, axis: str, row: Layout) -> list[object]:
        """`Space.compatible`, computed once per class of rows (same pp, dp, tp and dp·cp, or
        what decides the ZeRO stages)."""
        k = (axis, self._class(axis, row))
        if k not in self._compat:
            self._compat[k] = self.sp.compatible(axis, row)
        return self._compat[k]

    def float_fracs(self, axis: str, fn: Factor) -> dict[object, float]:
        """`fracs` as floats (for the bounds, whose margin covers the rounding)."""
        k = (id(fn), axis)
        if k not in self._ffracs:
            self._ffracs[k] = {v: float(f) for v, f in self.fracs(axis, fn).items()}
        return self._ffracs[k]

    def extremes(self, axis: str, fn: Factor, row: Layout) -> tuple[float, float] | None:
        """The least and greatest factor of the axis values that agree with the row."""
        k = (id(fn), axis, self._class(axis, row))
        if k not in self._ext:
            fr = self.float_fracs(axis, fn)
            fs = [fr[v] for v in self.compatible(axis, row)]
            self._ext[k] = (min(fs), max(fs)) if fs else None
        return self._ext[k]

    def coarse(self) -> dict[Layout, int | None]:
        """The coarse bound of every row of the space (None: nothing in the row fits)."""
        if self._coarse is None:
            self._coarse = coarse_bounds(self, self.sp.layouts)
        return self._coarse

    def refine(self, rows: list[Layout]) -> None:
        """Compute the fine bounds of these rows (those not done already)."""
        todo = [r for r in rows if r not in self._fine]
        if todo:
            self._fine.update(fine_bounds(self, todo))

    def bound(self, row: Layout) -> int | None:
        """The row's best bound so far: fine once refined, else coarse."""
        f = self._fine.get(row)
        return f.bound if f is not None else self.coarse()[row]

    def cell_bound(
        self, row: Layout, db: tuple[int, int, int], te: tuple[int, int, int]
    ) -> int | None:
        """A lower bound for the row with that micro-batch shape and ep (None: nothing fits)."""
        self.refine([row])
        return self._fine[row].cells[(db, te)]

    def guess(self, row: Layout) -> Point | None:
        """A point of the row where its fine bound is reached (one chunk per stage): a hint."""
        self.refine([row])
        at = self._fine[row].at
        if at is None:
            return None
        (_, b, m), (_, e, et), r, z = at
        return Point(row, 1, b, m, e, et, r, z)
