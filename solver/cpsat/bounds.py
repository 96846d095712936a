"""Lower bounds, vectorised: the pruning half of the search, at two grains.

Fine: for a cell (row, db = (dp, b, M), te = (tp, ep, etp)) and each recomputation r and ZeRO
stage z the framework runs on the row, every term group is bounded below by its exact real product start·f_pv·f_te·f_db with the
least pv factor that agrees with the row (the integer form rounds up after each factor, so it
is never smaller; credits take the greatest factor and bound from above). A (cell, r, z) whose
least memory overflows a stage is impossible; the cell's bound is the least time over the (r, z)
left, and the row's fine bound the least over its cells.

Coarse: the same per row, with the least db and te factors too; cheap for every row of a large
space, and never above the fine bound. Every point costs at least its cell's and its row's bound.

Floats carry a relative safety margin (`SLACK`) far above their rounding error, so a bound is
never above the integer value it bounds.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import numpy as np

from meshplan.solver.costmodel import Layout
from meshplan.solver.costmodel.model import STAGES
from meshplan.solver.costmodel.terms import Compiled, Factor, Group
from meshplan.solver.space import Space


class Tables(Protocol):
    """What the bounds read of `tables.Tables` (which calls them): the space, its row index,
    the integer start tables, factors and the axis values that agree with a row."""

    sp: Space
    index: dict[Layout, int]

    def starts(self, comp: Compiled, g: Group, keyval: object) -> list[int]: ...
    def float_fracs(self, axis: str, fn: Factor) -> dict[object, float]: ...
    def extremes(self, axis: str, fn: Factor, row: Layout) -> tuple[float, float] | None: ...
    def compatible(self, axis: str, row: Layout) -> list[Any]: ...


SLACK = 1e-9
Cell = tuple[tuple[int, int, int], tuple[int, int, int]]  # (db, te) within a row


class Fine(NamedTuple):
    """A row's fine bounds."""

    bound: int | None  # least over the cells (None: nothing in the row fits)
    cells: dict[Cell, int | None]
    at: tuple | None  # (db, te, r, z) where the bound is reached


class _Index:
    """Units to bound as index arrays: cells of some rows (fine) or the rows themselves."""

    def __init__(self, tb: Tables, rows: list[Layout], fine: bool) -> None:
        sp = tb.sp
        self.tb, self.rows, self.fine = tb, rows, fine
        pos = [tb.index[r] for r in rows]  # row positions in the space's start tables
        if not fine:
            self.row_of = np.arange(len(rows), dtype=np.int64)
            self.cells: list[list[Cell]] = []
        else:
            db_pos = {d: k for k, d in enumerate(sp.db)}
            te_pos = {t: k for k, t in enumerate(sp.te)}
            row_of, db_of, te_of, self.cells = [], [], [], []
            for i, r in enumerate(rows):
                cells = [(d, t) for d in tb.compatible("db", r) for t in tb.compatible("te", r)]
                self.cells.append(cells)
                row_of += [i] * len(cells)
                db_of += [db_pos[d] for d, _ in cells]
                te_of += [te_pos[t] for _, t in cells]
            self.row_of = np.array(row_of, dtype=np.int64)
            self.db_of = np.array(db_of, dtype=np.int64)
            self.te_of = np.array(te_of, dtype=np.int64)
        self.start_of = np.array(pos, dtype=np.int64)[self.row_of]
        self.n = len(self.row_of)
        self.rs, self.zs = list(sp.rs), list(sp.zs)
        zok = [[z in tb.compatible("z", r) for z in self.zs] for r in rows]
        self.z_ok = np.array(zok, dtype=bool).reshape(len(rows), len(self.zs))[self.row_of]
        self._cache: dict[tuple[int, str, bool], np.ndarray] = {}

    def factor(self, axis: str, fn, least: bool) -> np.ndarray:  # noqa: ANN001
        """Per unit: the cell's own db or te factor, else the least (greatest) factor of the
        axis values that agree with the row."""
        key = (id(fn), axis, least)
        if key not in self._cache:
            if self.fine and axis in ("db", "te"):
                dom = self.tb.sp.db if axis == "db" else self.tb.sp.te
                fr = self.tb.float_fracs(axis, fn)
                vals = np.array([fr[k] for k in dom])
                self._cache[key] = vals[self.db_of if axis == "db" else self.te_of]
            else:
                ext = [self.tb.extremes(axis, fn, r) for r in self.rows]
                i = 0 if least else 1
                per_row = np.array([np.nan if e is None else e[i] for e in ext])
                self._cache[key] = per_row[self.row_of]
        return self._cache[key]


def _comp(ix: _Index, comp: Compiled, least: bool) -> np.ndarray:
    """A compiled sum bounded per (unit, r, z): shape (units, |rs|, |zs|)."""
    n, nr, nz = ix.n, len(ix.rs), len(ix.zs)
    out = np.zeros((n, nr, nz))
    for g in comp.groups:
        sel = [None] if g.sel is None else (ix.rs if g.sel == "r" else ix.zs)
        cols = [ix.tb.starts(comp, g, None if v is None else g.key(v)) for v in sel]
        start = np.array(cols, dtype=float).T[ix.start_of]  # (units, |sel|)
        lo = np.ones(n)
        hi = np.ones(n)
        for axis, fn in zip(("pv", "te", "db"), g.factors, strict=True):
            if fn is not None:
                lo = lo * ix.factor(axis, fn, True)
                hi = hi * ix.factor(axis, fn, False)
        # Least value: least factors for a positive start, greatest for a negative one.
        f = np.where(start >= 0, (lo if least else hi)[:, None], (hi if least else lo)[:, None])
        val = start * f
        out += val[:, :, None] if g.sel != "z" else val[:, None, :]
    return out


def _safe(x: np.ndarray, lower: bool) -> np.ndarray:
    """Move a float bound away from the integer it bounds by the safety margin."""
    return x - np.abs(x) * SLACK - 1e-6 if lower else x + np.abs(x) * SLACK + 1e-6


def _by_rz(ix: _Index) -> np.ndarray:
    """Least objective per (unit, r, z); +inf where the least memory overflows."""
    cm = ix.tb.sp.cm
    fits = np.broadcast_to(ix.z_ok[:, None, :], (ix.n, len(ix.rs), len(ix.zs))).copy()
    for st in STAGES:
        mem = _safe(_comp(ix, cm.memory[st].base, True), True)
        for a, b in cm.memory[st].pairs:
            mem += np.minimum(_safe(_comp(ix, a, True), True), _safe(_comp(ix, b, True), True))
        fits &= mem <= cm.budget
    t = _safe(_comp(ix, cm.objective, True), True)
    for k, z in enumerate(ix.zs):
        comm, credit = cm.dp[z]
        c = _safe(_comp(ix, comm, True)[:, :, k], True)
        cr = _safe(_comp(ix, credit, False)[:, :, k], False)
        t[:, :, k] += np.maximum(0.0, c - cr)
    return np.where(fits & ~np.isnan(t), t, np.inf)


def _int(v: float) -> int | None:
    return None if v == np.inf else int(np.floor(v))


def coarse_bounds(tb: Tables, rows: list[Layout]) -> dict[Layout, int | None]:
    """The coarse bound of each row (None: nothing in the row fits)."""
    ix = _Index(tb, rows, fine=False)
    best = _by_rz(ix).min(axis=(1, 2)) if ix.n else np.zeros(0)
    return {r: _int(v) for r, v in zip(rows, best.tolist(), strict=True)}


def fine_bounds(tb: Tables, rows: list[Layout]) -> dict[Layout, Fine]:
    """Per row: its fine bound, each cell's (None: nothing fits), and where the bound is reached
    (cell, recomputation, ZeRO stage): a good first guess for the search."""
    ix = _Index(tb, rows, fine=True)
    by_rz = _by_rz(ix)
    nz = len(ix.zs)
    flat = by_rz.reshape(ix.n, -1)
    arg = flat.argmin(axis=1).tolist() if ix.n else []
    cell = flat.min(axis=1).tolist() if ix.n else []
    out = {}
    k = 0
    for r, cells in zip(rows, ix.cells, strict=True):
        vals = [_int(v) for v in cell[k : k + len(cells)]]
        ok = [(v, i) for i, v in enumerate(vals) if v is not None]
        at = None
        if ok:
            i = min(ok)[1]
            j = arg[k + i]
            at = (*cells[i], ix.rs[j // nz], ix.zs[j % nz])
        out[r] = Fine(min(ok)[0] if ok else None, dict(zip(cells, vals, strict=True)), at)
        k += len(cells)
    return out
