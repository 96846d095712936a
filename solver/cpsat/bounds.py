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
    rest: float  # a bound on the cells not listed (their shapes' coarse bounds exceed `upto`)
    upto: float  # every cell whose bound may be at most this is listed

    def cell(self, db: int, te: int) -> float:
        """The bound of the cell with these db and te positions (inf: none or nothing fits)."""
        hit = np.flatnonzero((self.db == db) & (self.te == te))
        return float(self.by_rz[hit[0]].min()) if len(hit) else np.inf


class _Units:
    """The rows to bound coarsely, as index arrays."""

    def __init__(self, tb: Tables, rows: np.ndarray) -> None:
        self.tb = tb
        self.at = rows  # positions in the space's rows
        self.n = len(rows)
        self.rs, self.zs = list(tb.sp.rs), list(tb.sp.zs)
        self.z_ok = tb.z_ok[tb.cls["z"][self.at]]
        self._cache: dict[tuple[str, bool], np.ndarray] = {}

    def factors(self, axis: str, least: bool) -> np.ndarray:
        """(factors, rows): every factor of the axis (as `Tables.factor_fns` numbers them): the
        least (greatest) over the axis values that agree with the row."""
        key = (axis, least)
        if key not in self._cache:
            ext = self.tb.factor_matrix(axis, "lo" if least else "hi")
            self._cache[key] = ext[:, self.tb.cls[axis][self.at]]
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
        onehot = np.zeros((len(slots), nf))
        onehot[np.arange(len(slots)), slots] = 1.0
        v = np.tensordot(onehot, val, axes=(0, 0))  # (slots, |sel|, units): sums per slot
        if sel is None:
            out += v[:, 0].T[:, :, None, None]
        elif sel == "r":
            out += v.transpose(2, 0, 1)[:, :, :, None]
        else:
            out += v.transpose(2, 0, 1)[:, :, None, :]
    return out if split_db else out[:, 0]


def _safe(x: np.ndarray, lower: bool) -> np.ndarray:
    """Move a float bound away from the integer it bounds by the safety margin."""
    return x - np.abs(x) * SLACK - 1e-6 if lower else x + np.abs(x) * SLACK + 1e-6


def _sums(u: _Units) -> tuple[np.ndarray, np.ndarray]:
    """Every compiled sum of the cost model split per db factor, (sums, rows, db factors, |rs|,
    |zs|), in the order `_combine` reads them, and the direction of each margin (−1: bounded
    from below)."""
    cm = u.tb.sp.cm
    comps: list[tuple[Compiled, bool]] = [(cm.objective, True)]
    for st in STAGES:
        pairs = cm.memory[st].pairs
        comps += [(cm.memory[st].base, True)] + [(c, True) for pair in pairs for c in pair]
    for z in u.zs:
        comps += [(cm.dp[z][0], True), (cm.dp[z][1], False)]
    split = np.stack([_comp(u, c, low, True) for c, low in comps])
    return split, np.array([-1.0 if low else 1.0 for _, low in comps])


def _combine(tb: Tables, v: np.ndarray, z_ok: np.ndarray) -> np.ndarray:
    """From every sum's bound, v: (sums, ..., |rs|, |zs|, ...) with the (r, z) axes at positions
    1 and 2 after the sums: the least objective where every stage's memory fits (inf
    elsewhere), a whole number. `z_ok` broadcasts against v[0]."""
    cm = tb.sp.cm
    k = 1
    fits = np.broadcast_to(z_ok, v.shape[1:]).copy()
    for st in STAGES:
        used = v[k].copy()
        k += 1
        for _ in cm.memory[st].pairs:
            used += np.minimum(v[k], v[k + 1])
            k += 2
        fits &= used <= cm.budget
    t = v[0].copy()
    for j in range(len(tb.sp.zs)):
        t[:, :, j] += np.maximum(0.0, v[k][:, :, j] - v[k + 1][:, :, j])
        k += 2
    return np.where(fits & ~np.isnan(t), np.floor(t), np.inf)


def _margin(v: np.ndarray, sign: np.ndarray) -> np.ndarray:
    """Move every sum's float bound away from the integer it bounds (sums on axis 0)."""
    return v + sign.reshape(-1, *([1] * (v.ndim - 1))) * (np.abs(v) * SLACK + 1e-6)


def coarse_bounds(tb: Tables, rows: np.ndarray) -> np.ndarray:
    """The coarse bound of each row (inf: nothing in the row fits): every group bounded with the
    least pv, te and db factors that agree with the row, each on its own; the least over r and
    z. Cheap for every row of a large space."""
    u = _Units(tb, rows)
    if not u.n:
        return np.zeros(0)
    split, sign = _sums(u)
    cls = tb.cls["db"][u.at]
    lo = tb.factor_matrix("db", "lo")[:, cls].T[:, :, None, None]  # (rows, F, 1, 1)
    hi = tb.factor_matrix("db", "hi")[:, cls].T[:, :, None, None]
    low = (sign < 0).reshape(-1, 1, 1, 1, 1)
    # A lower bound takes the least factor of a positive sum, the greatest of a negative one;
    # an upper bound (a credit) the other way round.
    phi = np.where((split >= 0) == low, lo, hi)
    v = _margin((split * phi).sum(axis=2), sign)  # (sums, rows, |rs|, |zs|)
    return _combine(tb, v, u.z_ok[:, None, :]).min(axis=(1, 2))


def shape_bounds(tb: Tables, rows: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per row (by position in `rows`): its micro-batch shapes (positions in the db domain) and
    the bound of each: every group bounded with the least pv and te factors that agree with
    the row, summed per db factor, then evaluated at each shape (so b, M and the memory they
    take are traded exactly); the least over r and z."""
    u = _Units(tb, rows)
    out: list[tuple[np.ndarray, np.ndarray]] = [(np.zeros(0, np.int64), np.zeros(0))] * u.n
    if not u.n:
        return out
    split, sign = _sums(u)
    phi = tb.factor_matrix("db", "dom")  # (1 + db factors, |db|)
    cls = tb.cls["db"][u.at]
    for c in np.unique(cls).tolist():
        ds = tb.members["db"][c]
        if not len(ds):
            continue
        ix = np.flatnonzero(cls == c)
        x = split[:, ix].transpose(0, 1, 3, 4, 2)  # (sums, rows, |rs|, |zs|, db factors)
        v = (x.reshape(-1, x.shape[-1]) @ phi[:, ds]).reshape(*x.shape[:-1], len(ds))
        per = _combine(tb, _margin(v, sign), u.z_ok[ix][:, None, :, None]).min(axis=(1, 2))
        for j, i in enumerate(ix.tolist()):
            out[i] = (ds, per[j])
    return out


class _Batch:
    """Some rows' points but for r and z, as padded axes of arrays: pipelines (P), expert groups
    (T) and micro-batch shapes (D), positions in the space's domains (`mask`: real entries)."""

    def __init__(self, tb: Tables, rows: list[int], dbs: list[np.ndarray]) -> None:
        self.tb, self.rows = tb, np.array(rows, dtype=np.int64)
        self.lists = {
            "pv": [tb.agree("pv", r) for r in rows],
            "te": [tb.agree("te", r) for r in rows],
            "db": dbs,
        }
        self.pos: dict[str, np.ndarray] = {}
        self.mask: dict[str, np.ndarray] = {}
        for axis, lists in self.lists.items():
            width = max(1, max(len(x) for x in lists))
            pos = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=bool)
            for i, x in enumerate(lists):
                pos[i, : len(x)], mask[i, : len(x)] = x, True
            self.pos[axis], self.mask[axis] = pos, mask
        n, nr, nz = len(rows), len(tb.sp.rs), len(tb.sp.zs)
        self.shape = (n, nr, nz, *(self.pos[a].shape[1] for a in ("pv", "te", "db")))

    def value(self, comp: Compiled) -> np.ndarray:
        """The real value of a compiled sum at every (row, r, z, P, T, D): per row and selector,
        two batched matrix products, (starts x pipeline factors) by (expert x batch factors)."""
        tb = self.tb
        n, _, _, npv, nte, ndb = self.shape
        out = np.zeros(self.shape)
        for sel in (None, "r", "z"):
            got = tb.stacked(comp, sel)
            if got is None:
                continue
            stack, idx = got
            g, ns = stack.shape[:2]
            a = stack[:, :, self.rows].transpose(2, 0, 1)  # (n, groups, |sel|)
            p = tb.factor_matrix("pv", "dom")[idx[0]][:, self.pos["pv"]].transpose(1, 0, 2)
            t = tb.factor_matrix("te", "dom")[idx[1]][:, self.pos["te"]].transpose(1, 0, 2)
            d = tb.factor_matrix("db", "dom")[idx[2]][:, self.pos["db"]].transpose(1, 0, 2)
            x = (a[:, :, :, None] * p[:, :, None, :]).reshape(n, g, ns * npv)
            y = (t[:, :, :, None] * d[:, :, None, :]).reshape(n, g, nte * ndb)
            val = np.matmul(x.transpose(0, 2, 1), y).reshape(n, ns, npv, nte, ndb)
            if sel is None:
                out += val[:, 0][:, None, None]
            elif sel == "r":
                out += val[:, :, None]
            else:
                out += val[:, None, :]
        return out

    def runs(self) -> np.ndarray:
        """(rows, P, D): the pipeline schedule runs the micro-batch count (Megatron's
        interleaving needs a multiple of pp; Space.pipeline_fits_batch)."""
        sp = self.tb.sp
        pv = np.array(sp.pv, dtype=np.int64).reshape(-1, 2)[self.pos["pv"]]  # (n, P, 2)
        m = np.array(sp.db, dtype=np.int64).reshape(-1, 3)[self.pos["db"], 2]  # (n, D)
        ok = self.mask["pv"][:, :, None] & self.mask["db"][:, None, :]
        if not sp.profile.interleave_whole_rounds:
            return ok
        return ok & ((pv[:, :, 1:2] == 1) | (m[:, None, :] % pv[:, :, 0:1] == 0))

    def bounds(self) -> np.ndarray:
        """Least objective at every (row, r, z, P, T, D), a whole number; inf where a stage's
        memory overflows, the framework runs no such ZeRO stage, the schedule no such pipeline,
        or the entry is padding."""
        tb, cm = self.tb, self.tb.sp.cm
        ok = tb.z_ok[tb.cls["z"][self.rows]][:, None, :, None, None, None]
        ok = ok & self.runs()[:, None, None, :, None, :]
        ok = ok & self.mask["te"][:, None, None, None, :, None]
        for st in STAGES:
            mem = _safe(self.value(cm.memory[st].base), True)
            for a, b in cm.memory[st].pairs:
                mem += np.minimum(_safe(self.value(a), True), _safe(self.value(b), True))
            ok = ok & (mem <= cm.budget)
        t = _safe(self.value(cm.objective), True)
        for k, z in enumerate(tb.sp.zs):
            comm, credit = cm.dp[z]
            c = _safe(self.value(comm)[:, :, k], True)
            cr = _safe(self.value(credit)[:, :, k], False)
            t[:, :, k] += np.maximum(0.0, c - cr)
        return np.where(ok & ~np.isnan(t), np.floor(t), np.inf)


def fine_bounds(tb: Tables, rows: list[int], cap: float = np.inf) -> dict[int, Fine]:
    """Per row: its fine bounds by cell and by (cell, r, z) (the least over the pipelines), the
    pipeline where each is reached, and where the row's bound is reached. Only the cells of the
    micro-batch shapes whose coarse bound is at most `cap` are listed; the rest is summarised by
    the least of those bounds (`Fine.rest`)."""
    within = [tb.shapes_within(r, cap) for r in rows]
    batch = _Batch(tb, rows, [d for d, _ in within])
    nr, nz = batch.shape[1:3]
    every = batch.bounds()  # (rows, r, z, P, T, D)
    out = {}
    for i, (r, (_, rest)) in enumerate(zip(rows, within, strict=True)):
        npv, nte, ndb = (len(batch.lists[a][i]) for a in ("pv", "te", "db"))
        cells = nte * ndb
        if npv and cells:
            b = every[i, :, :, :npv, :nte, :ndb]
            best = b.argmin(axis=2)
            bounds = b.min(axis=2).transpose(3, 2, 0, 1).reshape(cells, nr, nz)  # db-major
            pv = batch.lists["pv"][i][best].transpose(3, 2, 0, 1).reshape(cells, nr, nz)
        else:
            bounds = np.full((cells, nr, nz), np.inf)
            pv = np.zeros((cells, nr, nz), np.int64)
        at = None
        bound = np.inf
        if cells:
            flat = int(bounds.reshape(-1).argmin())
            bound = float(bounds.reshape(-1)[flat])
            if bound < np.inf:
                c, rz = divmod(flat, nr * nz)
                at = (c, rz // nz, rz % nz)
        te, db = batch.lists["te"][i], batch.lists["db"][i]
        out[r] = Fine(
            min(bound, rest), np.repeat(db, nte), np.tile(te, ndb), bounds, pv, at, rest, cap
        )
    return out
