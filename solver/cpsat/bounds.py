"""Lower bounds, vectorised: the pruning half of the search, at two grains.

Fine: for a cell (row, db = (dp, b, M), te = (tp, ep, etp)), each pipeline pv = (pp, v) of the
row that the schedule can run with M micro-batches, and each recomputation r and ZeRO stage z
the framework runs on the row, every term group is bounded below by its exact real product
start·f_pv·f_te·f_db (the integer form rounds up after each factor, so it is never smaller;
credits bound from above). Where the memory of a stage overflows, the point is impossible. The
bound of a (cell, r, z) is the least over its pipelines: the search's models take those as cuts,
and leave CP-SAT the choice of the pipeline, the integer rounding, the memory pairs and the dp
exposure. A cell's bound is the least over its (r, z), and the row's fine bound the least over
its cells.

Coarse: per row and (r, z), with the least pv, db and te factors that agree with the row,
each group on its own; cheap for every row of a large space, and never above the fine bound. Every point costs at least its (cell, r, z)'s, its cell's
and its row's bound.

Floats carry a relative safety margin (`SLACK`) far above their rounding error, so a bound is
never above the integer value it bounds. Bounds are whole numbers as floats; inf: nothing fits.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np

from meshplan.solver.costmodel.model import STAGES
from meshplan.solver.costmodel.terms import FACTOR_AXES, Compiled, Group
from meshplan.solver.space import Space


class Tables(Protocol):
    """What the bounds read of `tables.Tables` (which calls them): the space, its start tables,
    the factors of the axis values and which values agree with which classes of rows."""

    sp: Space
    cls: dict[str, np.ndarray]
    members: dict[str, list[np.ndarray]]
    z_ok: np.ndarray

    def starts(self, comp: Compiled, g: Group, keyval: object) -> np.ndarray: ...
    def factor_matrix(self, axis: str, kind: str) -> np.ndarray: ...
    def stacked(self, comp: Compiled, sel: str | None) -> tuple[np.ndarray, np.ndarray] | None: ...


SLACK = 1e-9


class Fine(NamedTuple):
    """A row's fine bounds, by cell (db, te) and by (cell, r, z)."""

    bound: float  # least over the cells (inf: nothing in the row fits)
    db: np.ndarray  # per cell: position of its db value in the space's domain
    te: np.ndarray  # per cell: position of its te value
    by_rz: np.ndarray  # (cells, |rs|, |zs|): bound of each (cell, r, z), least over pipelines
    pv: np.ndarray  # (cells, |rs|, |zs|): position of the pipeline value where it is reached
    at: tuple[int, int, int] | None  # (cell, r, z) positions where the bound is reached

    def cell(self, db: int, te: int) -> float:
        """The bound of the cell with these db and te positions (inf: none or nothing fits)."""
        hit = np.flatnonzero((self.db == db) & (self.te == te))
        return float(self.by_rz[hit[0]].min()) if len(hit) else np.inf


class _Units:
    """Units to bound as index arrays: the rows themselves (coarse), or the points of some rows
    but for the recomputation and ZeRO stage: (cell, pipeline) pairs, cell-major (fine)."""

    def __init__(self, tb: Tables, rows: np.ndarray, fine: bool) -> None:
        self.tb, self.fine = tb, fine
        if fine:
            dbs = [tb.members["db"][c] for c in tb.cls["db"][rows].tolist()]
            tes = [tb.members["te"][c] for c in tb.cls["te"][rows].tolist()]
            pvs = [tb.members["pv"][c] for c in tb.cls["pv"][rows].tolist()]
            cells = np.array([len(d) * len(t) for d, t in zip(dbs, tes, strict=True)])
            npv = np.array([len(v) for v in pvs])
            self.cells, self.npv = cells, npv
            self.row_of = np.repeat(np.arange(len(rows)), cells * npv)
            parts = list(zip(dbs, tes, pvs, strict=True))
            empty = [np.zeros(0, np.int64)]
            self.db_of = np.concatenate(
                [np.repeat(d, len(t) * len(v)) for d, t, v in parts] + empty
            ).astype(np.int64)
            self.te_of = np.concatenate(
                [np.tile(np.repeat(t, len(v)), len(d)) for d, t, v in parts] + empty
            ).astype(np.int64)
            self.pv_of = np.concatenate(
                [np.tile(v, len(d) * len(t)) for d, t, v in parts] + empty
            ).astype(np.int64)
        else:
            self.row_of = np.arange(len(rows), dtype=np.int64)
        self.at = rows[self.row_of]  # positions in the space's rows
        self.n = len(self.at)
        self.rs, self.zs = list(tb.sp.rs), list(tb.sp.zs)
        self.z_ok = tb.z_ok[tb.cls["z"][self.at]]
        self._cache: dict[tuple[str, bool], np.ndarray] = {}

    def runs(self) -> np.ndarray:
        """Fine units only: False where the pipeline schedule cannot run the micro-batch count
        (interleaving with a count that is not a multiple of pp, Space.pipeline_fits_batch)."""
        sp = self.tb.sp
        pv = np.array(sp.pv, dtype=np.int64).reshape(-1, 2)[self.pv_of]
        m = np.array(sp.db, dtype=np.int64).reshape(-1, 3)[self.db_of, 2]
        if not sp.profile.interleave_whole_rounds:
            return np.ones(self.n, dtype=bool)
        return (pv[:, 1] == 1) | (m % pv[:, 0] == 0)

    def factors(self, axis: str, least: bool) -> np.ndarray:
        """(factors, units): every factor of the axis (as `Tables.factor_fns` numbers them) per
        unit: the unit's own (fine), else the least (greatest) factor of the axis values that
        agree with the row."""
        key = (axis, least)
        if key not in self._cache:
            tb = self.tb
            if self.fine:
                at = {"db": self.db_of, "te": self.te_of, "pv": self.pv_of}[axis]
                self._cache[key] = tb.factor_matrix(axis, "dom")[:, at]
            else:
                ext = tb.factor_matrix(axis, "lo" if least else "hi")
                self._cache[key] = ext[:, tb.cls[axis][self.at]]
        return self._cache[key]


def _comp(u: _Units, comp: Compiled, least: bool, split_db: bool = False) -> np.ndarray:
    """A compiled sum bounded per (unit, r, z): shape (units, |rs|, |zs|). The groups with one
    selector at once: their starts stacked, each group's factors gathered per axis. With
    `split_db`, the db factors are left out and the sum kept per db factor (as
    `Tables.factor_fns` numbers them; 0: none): shape (units, 1 + db factors, |rs|, |zs|)."""
    n, nr, nz = u.n, len(u.rs), len(u.zs)
    nf = 1 + len(u.tb.factor_fns["db"]) if split_db else 1
    out = np.zeros((n, nf, nr, nz))
    axes = FACTOR_AXES[:2] if split_db else FACTOR_AXES
    for sel in (None, "r", "z"):
        got = u.tb.stacked(comp, sel)
        if got is None:
            continue
        stack, idx = got
        start = stack[:, :, u.at]  # (groups, |sel|, units)
        lo = hi = None
        for i, axis in enumerate(axes):
            if idx[i].any():
                flo, fhi = u.factors(axis, True)[idx[i]], u.factors(axis, False)[idx[i]]
                lo = flo if lo is None else lo * flo
                hi = fhi if hi is None else hi * fhi
        if lo is None:
            val = start
        else:
            # Least value: least factors for a positive start, greatest for a negative one.
            small, big = (lo, hi) if least else (hi, lo)
            val = start * np.where(start >= 0, small[:, None, :], big[:, None, :])
        slots = idx[2] if split_db else np.zeros(len(idx[2]), dtype=np.int64)
        for f in np.unique(slots).tolist():
            v = val[slots == f].sum(axis=0)  # (|sel|, units)
            if sel is None:
                out[:, f] += v[0][:, None, None]
            elif sel == "r":
                out[:, f] += v.T[:, :, None]
            else:
                out[:, f] += v.T[:, None, :]
    return out if split_db else out[:, 0]


def _safe(x: np.ndarray, lower: bool) -> np.ndarray:
    """Move a float bound away from the integer it bounds by the safety margin."""
    return x - np.abs(x) * SLACK - 1e-6 if lower else x + np.abs(x) * SLACK + 1e-6


def _by_rz(u: _Units) -> np.ndarray:
    """Least objective per (unit, r, z), a whole number; +inf where the least memory overflows."""
    cm = u.tb.sp.cm
    fits = np.broadcast_to(u.z_ok[:, None, :], (u.n, len(u.rs), len(u.zs))).copy()
    for st in STAGES:
        mem = _safe(_comp(u, cm.memory[st].base, True), True)
        for a, b in cm.memory[st].pairs:
            mem += np.minimum(_safe(_comp(u, a, True), True), _safe(_comp(u, b, True), True))
        fits &= mem <= cm.budget
    t = _safe(_comp(u, cm.objective, True), True)
    for k, z in enumerate(u.zs):
        comm, credit = cm.dp[z]
        c = _safe(_comp(u, comm, True)[:, :, k], True)
        cr = _safe(_comp(u, credit, False)[:, :, k], False)
        t[:, :, k] += np.maximum(0.0, c - cr)
    return np.where(fits & ~np.isnan(t), np.floor(t), np.inf)


def coarse_bounds(tb: Tables, rows: np.ndarray) -> np.ndarray:
    """The coarse bound of each row (inf: nothing in the row fits): every group bounded with the
    least pv and te factors that agree with the row, summed per db factor, then evaluated at
    each micro-batch shape of the row (so b, M and the memory they take are traded exactly),
    the least over shapes, r and z."""
    u = _Units(tb, rows, fine=False)
    out = np.full(u.n, np.inf)
    if not u.n:
        return out
    cm = tb.sp.cm
    obj = _comp(u, cm.objective, True, True)
    mem = [
        (
            _comp(u, m.base, True, True),
            [(_comp(u, a, True, True), _comp(u, b, True, True)) for a, b in m.pairs],
        )
        for m in (cm.memory[st] for st in STAGES)
    ]
    dp = [(_comp(u, cm.dp[z][0], True, True), _comp(u, cm.dp[z][1], False, True)) for z in u.zs]
    phi = tb.factor_matrix("db", "dom")  # (1 + db factors, |db|)
    cls = tb.cls["db"][u.at]
    for c in np.unique(cls).tolist():
        ds = tb.members["db"][c]
        if not len(ds):
            continue
        ix = np.flatnonzero(cls == c)
        f = phi[:, ds]

        def at(s: np.ndarray, lower: bool = True) -> np.ndarray:
            return _safe(np.einsum("nfrz,fm->nmrz", s[ix], f), lower)  # noqa: B023

        shape = (len(ix), len(ds), len(u.rs), len(u.zs))
        fits = np.broadcast_to(u.z_ok[ix][:, None, None, :], shape).copy()
        for base, pairs in mem:
            used = at(base)
            for a, b in pairs:
                used += np.minimum(at(a), at(b))
            fits &= used <= cm.budget
        t = at(obj)
        for k, (comm, credit) in enumerate(dp):
            t[..., k] += np.maximum(0.0, at(comm)[..., k] - at(credit, False)[..., k])
        out[ix] = np.where(fits & ~np.isnan(t), np.floor(t), np.inf).min(axis=(1, 2, 3))
    return out


def fine_bounds(tb: Tables, rows: list[int]) -> dict[int, Fine]:
    """Per row: its fine bounds by cell and by (cell, r, z) (the least over the pipelines), the
    pipeline where each is reached, and where the row's bound is reached."""
    u = _Units(tb, np.array(rows, dtype=np.int64), fine=True)
    by_rz = _by_rz(u)
    by_rz[~u.runs()] = np.inf
    nr, nz = len(u.rs), len(u.zs)
    out = {}
    k = 0
    for r, cells, npv in zip(rows, u.cells.tolist(), u.npv.tolist(), strict=True):
        size = cells * npv
        part = by_rz[k : k + size].reshape(cells, npv, nr, nz)
        best_pv = part.argmin(axis=1) if npv else np.zeros((cells, nr, nz), np.int64)
        bounds = part.min(axis=1) if npv else np.full((cells, nr, nz), np.inf)
        pv_at = u.pv_of[k : k + size].reshape(cells, npv)
        pv = (
            np.take_along_axis(pv_at[:, :, None, None], best_pv[:, None], axis=1)[:, 0]
            if npv
            else best_pv
        )
        sl = slice(k, k + size, max(npv, 1))
        at = None
        bound = np.inf
        if cells:
            flat = int(bounds.reshape(-1).argmin())
            bound = float(bounds.reshape(-1)[flat])
            if bound < np.inf:
                c, rz = divmod(flat, nr * nz)
                at = (c, rz // nz, rz % nz)
        out[r] = Fine(bound, u.db_of[sl], u.te_of[sl], bounds, pv, at)
        k += size
    return out
