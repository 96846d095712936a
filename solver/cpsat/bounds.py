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

Coarse: per row, expert group te and (r, z), with the exact te factors and the least pv and db
factors that agree with the row, each group on its own; cheap for every row of a large space,
and never above the fine bound. A row's coarse bound is the least over its expert groups; the
fine bounds list only the expert groups (and micro-batch shapes) whose coarse bound may be
below the best objective known. Every point costs at least its (cell, r, z)'s, its cell's and
its row's bound.

Floats carry a relative safety margin (`SLACK`) far above their rounding error, so a bound is
never above the integer value it bounds. Bounds are whole numbers as floats; inf: nothing fits.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple, Protocol

import numpy as np

from meshplan.solver.costmodel.model import STAGES
from meshplan.solver.costmodel.terms import FACTOR_AXES, Compiled
from meshplan.solver.rules import dualpipe
from meshplan.solver.space import Space


class Tables(Protocol):
    """What the bounds read of `tables.Tables` (which calls them): the space, every sum of the
    cost model stacked (`Sums`), the factors of the axis values and which values agree with
    which classes of rows."""

    sp: Space
    check: Callable[[], None]  # raises when the solve must stop (checked between batches)
    cls: dict[str, np.ndarray]
    members: dict[str, list[np.ndarray]]
    flat: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]  # members, concatenated
    z_ok: np.ndarray
    factor_fns: dict[str, dict]  # per factor axis: factor -> its number (0: no factor)

    def sums(self) -> Sums: ...
    def int_domain(self, axis: str) -> np.ndarray: ...
    def factor_matrix(self, axis: str, kind: str) -> np.ndarray: ...
    def shapes_within(self, row: int, cap: float) -> tuple[np.ndarray, float]: ...
    def te_within(self, row: int, cap: float) -> tuple[np.ndarray, float]: ...
    def agree(self, axis: str, row: int) -> np.ndarray: ...


SLACK = 1e-9
ROWS_CHUNK = 2048  # rows whose coarse bounds are computed at once


class Sums(NamedTuple):
    """Every compiled sum of the cost model, its groups stacked by selector: what the bounds
    compute with few, large array operations. Sum 0 is the objective, then each stage's memory
    (its base, then each pair's two sides), then each ZeRO stage's dp traffic and credit."""

    low: np.ndarray  # per sum: bounded from below (a cost), else from above (a credit)
    # per selector (None, "r", "z"): the groups' integer starts as floats, (groups, |selector
    # values|, rows); their factors' numbers per axis (3, groups); the sum each belongs to
    groups: dict[str | None, tuple[np.ndarray, np.ndarray, np.ndarray]]
    # per selector: (groups, sums x (1 + db factors)), 1 where a group adds into its sum's slot
    # for its db factor (`_split` sums the groups with one matrix product)
    slots: dict[str | None, np.ndarray]


def slot_matrices(
    groups: dict[str | None, tuple[np.ndarray, np.ndarray, np.ndarray]], ns: int, nf: int
) -> dict[str | None, np.ndarray]:
    """`Sums.slots` of these groups, for `ns` sums and `nf` db factors (1 + the factors)."""
    out = {}
    for sel, (_, idx, owner) in groups.items():
        onehot = np.zeros((len(owner), ns * nf))
        onehot[np.arange(len(owner)), owner * nf + idx[2]] = 1.0
        out[sel] = onehot
    return out


def stack_sums(tb: Tables, comps: list[tuple[Compiled, bool]], starts) -> Sums:  # noqa: ANN001
    """`Sums` of these compiled sums; `starts([(comp, group, keyval), ...])` gives their start
    tables (all asked at once, so the missing ones are computed together). One pass over the
    groups, each put with its selector's (None, "r", "z": the order of the asks)."""
    sp, fns = tb.sp, tb.factor_fns
    vals = {None: [None], "r": sp.rs, "z": sp.zs}
    by_sel: dict[str | None, tuple[list, list, list]] = {
        None: ([], [], []),
        "r": ([], [], []),
        "z": ([], [], []),
    }
    for c, (comp, _) in enumerate(comps):
        for g in comp.groups:
            asks, idx, owner = by_sel[g.sel]
            asks += [(comp, g, None if v is None else g.key(v)) for v in vals[g.sel]]
            idx.append(
                [
                    0 if fn is None else fns[a][fn]
                    for a, fn in zip(FACTOR_AXES, g.factors, strict=True)
                ]
            )
            owner.append(c)
    tables = starts([k for asks, _, _ in by_sel.values() for k in asks])
    n = len(tables[0]) if tables else 0  # rows
    # one conversion for all (concatenated: no per-table discovery of shape and type)
    flt = np.concatenate(tables, dtype=float) if tables else np.zeros(0)
    flt = flt.reshape(len(tables), n)
    groups: dict[str | None, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    at = 0
    for sel, (_, idx, owner) in by_sel.items():
        if owner:
            nv = len(vals[sel])
            end = at + nv * len(owner)
            groups[sel] = (
                flt[at:end].reshape(len(owner), nv, n),  # (groups, |values|, rows)
                np.array(idx, dtype=np.int64).T,
                np.array(owner, dtype=np.int64),
            )
            at = end
    nf = 1 + len(fns["db"])
    return Sums(np.array([low for _, low in comps]), groups, slot_matrices(groups, len(comps), nf))


def _firsts(o: np.ndarray) -> np.ndarray:
    """Where each run of equal values of a sorted array begins."""
    new = np.empty(len(o), dtype=bool)
    new[:1] = True
    np.not_equal(o[1:], o[:-1], out=new[1:])
    return np.flatnonzero(new)


def _margin(v: np.ndarray, low: np.ndarray) -> np.ndarray:
    """Move every sum's float bound (sums on axis 0) away from the integer it bounds."""
    m = np.abs(v)  # one temporary, changed in place: the same numbers (x·s is s·x)
    m *= SLACK
    m += 1e-6
    m *= np.where(low, -1.0, 1.0).reshape(-1, *([1] * (v.ndim - 1)))
    return np.add(v, m, out=m)


def _margin_own(v: np.ndarray, low: bool) -> np.ndarray:
    """`_margin` of one sum's values, in place (v is the caller's own): the same numbers."""
    m = np.abs(v)
    m *= SLACK
    m += 1e-6
    if low:
        v -= m
    else:
        v += m
    return v


def _at_z(a: np.ndarray, j: int) -> np.ndarray:
    """ZeRO stage j of a sum's values (axis 2; of size 1 when the sum does not depend on z)."""
    return a[:, :, j if a.shape[2] > 1 else 0]


def _combine(tb: Tables, v, z_ok: np.ndarray, zpos: list[int] | None = None) -> np.ndarray:  # noqa: ANN001
    """From every sum's bound, v(k) for sum k, each (units, |rs|, |zs|, ...) or of size 1 on the
    axes it does not depend on: the least objective where every stage's memory fits (inf
    elsewhere), a whole number. `z_ok` broadcasts against v(0); `zpos`: the ZeRO stages (their
    positions in the space's) that the z axis holds, default all. One sum at a time, so large
    batches stay in cache. Each v(k) is a new array of the caller's (v(0) is changed here)."""
    cm = tb.sp.cm
    t = v(0)
    fits = np.asarray(z_ok)
    k = 1
    for st in STAGES:
        used = v(k)
        k += 1
        for _ in cm.memory[st].pairs:
            used = used + np.minimum(v(k), v(k + 1))
            k += 2
        fits = fits & (used <= cm.budget)
    shape = np.broadcast(t, fits).shape  # np.broadcast_shapes, without its Python set-up
    if t.shape != shape:  # else t is already v(0)'s own array, of the full shape
        t = np.broadcast_to(t, shape).copy()
    for j, zj in enumerate(range(len(tb.sp.zs)) if zpos is None else zpos):
        t[:, :, j] += np.maximum(0.0, _at_z(v(k + 2 * zj), j) - _at_z(v(k + 2 * zj + 1), j))
    t = np.floor(t, out=t)  # a NaN stays NaN
    t[~fits | np.isnan(t)] = np.inf
    return t


def _split(tb: Tables, rows: np.ndarray) -> np.ndarray:
    """Every sum over these rows with the least pv and te factors that agree with each row (the
    greatest for a credit; the other way round for a negative start), kept apart per db factor:
    (sums, rows, 1 + db factors, |rs|, |zs|)."""
    sums = tb.sums()
    nr, nz = len(tb.sp.rs), len(tb.sp.zs)
    nf = 1 + len(tb.factor_fns["db"])
    ns = len(sums.low)
    out = np.zeros((ns, nf, len(rows), nr, nz))
    ext = {
        (a, k): tb.factor_matrix(a, k)[:, tb.cls[a][rows]]
        for a in ("pv", "te")
        for k in ("lo", "hi")
    }
    for sel, (start, idx, owner) in sums.groups.items():
        a = start[:, :, rows]  # (groups, |sel|, rows)
        lo = ext[("pv", "lo")][idx[0]] * ext[("te", "lo")][idx[1]]  # (groups, rows)
        hi = ext[("pv", "hi")][idx[0]] * ext[("te", "hi")][idx[1]]
        low = sums.low[owner][:, None, None]
        val = a * np.where((a >= 0) == low, lo[:, None, :], hi[:, None, :])
        # add each group into its (sum, db factor) slot: one matrix product (as np.tensordot
        # makes it, without its set-up)
        v = np.dot(sums.slots[sel].T, val.reshape(len(owner), -1))
        v = v.reshape(ns, nf, *val.shape[1:])
        if sel is None:
            out += v[:, :, 0][:, :, :, None, None]
        elif sel == "r":
            out += v.transpose(0, 1, 3, 2)[:, :, :, :, None]
        else:
            out += v.transpose(0, 1, 3, 2)[:, :, :, None, :]
    return out.transpose(0, 2, 1, 3, 4)


def shape_bounds(tb: Tables, rows: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per row (by position in `rows`): its micro-batch shapes (positions in the db domain) and
    the bound of each: every group bounded with the least pv and te factors that agree with
    the row, summed per db factor, then evaluated at each shape (so b, M and the memory they
    take are traded exactly); the least over r and z."""
    out: list[tuple[np.ndarray, np.ndarray]] = [(np.zeros(0, np.int64), np.zeros(0))] * len(rows)
    if not len(rows):
        return out
    split = _split(tb, rows)  # (sums, rows, F, |rs|, |zs|)
    low = tb.sums().low
    phi = tb.factor_matrix("db", "dom")  # (1 + db factors, |db|)
    cls = tb.cls["db"][rows]
    done = []  # per class with shapes: its rows (positions in `rows`), shapes, first entry
    at = 0
    for c in sorted(set(cls.tolist())):  # np.unique would load numpy.ma (numpy 2.x, ~20 ms)
        tb.check()
        ds = tb.members["db"][c]
        if len(ds):
            ix = np.flatnonzero(cls == c)
            done.append((ix, ds, at))
            at += len(ix) * len(ds)
    # every (row, shape) entry of every class, class by class and row-major, as one last axis:
    # one `_combine` for all classes (elementwise: each entry's numbers are the same as alone)
    nr, nz = split.shape[3:]
    v = np.empty((len(low), 1, nr, nz, at))  # (sums, 1, |rs|, |zs|, entries)
    for ix, ds, at in done:
        x = split[:, ix].transpose(0, 1, 3, 4, 2)  # (sums, rows, |rs|, |zs|, db factors)
        y = (x.reshape(-1, x.shape[-1]) @ phi[:, ds]).reshape(*x.shape[:-1], len(ds))
        part = v[:, 0, :, :, at : at + len(ix) * len(ds)]
        part.reshape(len(low), nr, nz, len(ix), len(ds))[...] = y.transpose(0, 2, 3, 1, 4)
    row = np.concatenate([np.repeat(ix, len(ds)) for ix, ds, _ in done] or [np.zeros(0, int)])
    z_ok = tb.z_ok[tb.cls["z"][rows[row]]].T[None, None]  # (1, 1, |zs|, entries)
    v = _margin(v, low)  # every sum at once: the same numbers as `_margin_own` of each
    per = _combine(tb, v.__getitem__, z_ok).min(axis=(1, 2))[0]
    for ix, ds, at in done:
        for j, i in enumerate(ix.tolist()):
            out[i] = (ds, per[at + j * len(ds) : at + (j + 1) * len(ds)])
    return out


class Fine(NamedTuple):
    """A row's fine bounds, by cell (db, te) and by (cell, r, z)."""

    bound: float  # least over the cells (inf: nothing in the row fits)
    db: np.ndarray  # per cell: position of its db value in the space's domain
    te: np.ndarray  # per cell: position of its te value
    by_rz: np.ndarray  # (cells, |rs|, |zs|): bound of each (cell, r, z), least over pipelines
    pv: np.ndarray  # (cells, |rs|, |zs|): position of the pipeline value where it is reached
    at: tuple[int, int, int] | None  # (cell, r, z) positions where the bound is reached
    rest: float  # a bound on the cells not listed (their shape or expert group bound > `upto`)
    upto: float  # every cell whose bound may be at most this is listed

    def cell(self, db: int, te: int) -> float:
        """The bound of the cell with these db and te positions (inf: none or nothing fits)."""
        hit = np.flatnonzero((self.db == db) & (self.te == te))
        return float(self.by_rz[hit[0]].min()) if len(hit) else np.inf


class _Batch:
    """Some rows' points but for r, as padded axes of arrays: pipelines (P), expert groups (T)
    and micro-batch shapes (D), positions in the space's domains (`mask`: real entries), and
    the ZeRO stages `zpos` (positions in the space's) that every one of the rows runs."""

    def __init__(
        self, tb: Tables, rows: list[int], lists: dict[str, list[np.ndarray]], zpos: list[int]
    ) -> None:
        self.tb, self.rows = tb, np.array(rows, dtype=np.int64)
        self.lists = lists  # per axis ("pv", "te", "db"): each row's positions
        self.zpos = zpos
        self.pos: dict[str, np.ndarray] = {}
        self.mask: dict[str, np.ndarray] = {}
        for axis, lists in self.lists.items():
            width = max(1, max(len(x) for x in lists))
            pos = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=bool)
            for i, x in enumerate(lists):
                pos[i, : len(x)], mask[i, : len(x)] = x, True
            self.pos[axis], self.mask[axis] = pos, mask
        n, nr, nz = len(rows), len(tb.sp.rs), len(zpos)
        self.shape = (n, nr, nz, *(self.pos[a].shape[1] for a in ("pv", "te", "db")))
        # (rows, factors, width): each factor of the axis at each (padded) entry of each row
        self.factors = {
            a: tb.factor_matrix(a, "dom")[:, self.pos[a]].transpose(1, 0, 2)
            for a in ("pv", "te", "db")
        }
        self._stack: list[list[tuple[str | None, np.ndarray, np.ndarray]]] | None = None

    def _stacked(self) -> list[list[tuple[str | None, np.ndarray, np.ndarray]]]:
        """Per sum: per selector holding groups of it, those groups' starts times pipeline
        factors (rows, |sel|·P, groups) and expert times batch factors (rows, groups, T·D):
        the products formed once per selector for every group (groups are sorted by sum), each
        sum's a view of them."""
        if self._stack is None:
            n, _, _, npv, nte, ndb = self.shape
            sums = self.tb.sums()
            self._stack = [[] for _ in range(len(sums.low))]
            for sel, (start, idx, owner) in sums.groups.items():
                a = start[:, self.zpos][:, :, self.rows] if sel == "z" else start[:, :, self.rows]
                a = a.transpose(2, 0, 1)  # (rows, groups, |sel|)
                p, t, d = (self.factors[ax][:, idx[i]] for i, ax in enumerate(FACTOR_AXES))
                g, ns = a.shape[1:]
                x = (a[:, :, :, None] * p[:, :, None, :]).reshape(n, g, ns * npv)
                y = (t[:, :, :, None] * d[:, :, None, :]).reshape(n, g, nte * ndb)
                ends = np.searchsorted(owner, np.arange(len(sums.low) + 1)).tolist()
                for c, (lo, hi) in enumerate(zip(ends[:-1], ends[1:], strict=True)):
                    if lo < hi:
                        self._stack[c].append((sel, x[:, lo:hi].transpose(0, 2, 1), y[:, lo:hi]))
            self._low = sums.low.tolist()
        return self._stack

    def value(self, c: int) -> np.ndarray:
        """The real value of sum c at every (row, r, z, P, T, D), moved by its margin, of size 1
        on the r or z axis when the sum does not depend on it: per selector, one batched matrix
        product, (starts x pipeline factors) by (expert x batch factors); the selectors' parts
        added in order (None, r, z), each addition at the smallest shape that holds it (a
        broadcast operand costs a full pass of its own)."""
        n, _, _, npv, nte, ndb = self.shape
        out = None
        for sel, x, y in self._stacked()[c]:  # the selectors holding groups of sum c
            # one group: an outer product, the same products without a matrix product's pass
            # that zeroes its output first (a third of the entries here)
            val = (x * y if y.shape[1] == 1 else np.matmul(x, y)).reshape(n, -1, npv, nte, ndb)
            if sel is None:
                val = val[:, 0][:, None, None]
            elif sel == "r":
                val = val[:, :, None]
            else:
                val = val[:, None, :]
            # a new array each (the first part is this call's own product); 0 + x is x but
            # for the sign of a zero, which the margin below makes no difference to
            out = val if out is None else out + val
        if out is None:  # a sum with no groups is 0 (an empty array here was left unfilled)
            out = np.zeros((n, 1, 1, npv, nte, ndb))
        return _margin_own(out, bool(self._low[c]))

    def runs(self) -> np.ndarray:
        """(rows, P, D): the pipeline schedule runs the micro-batch count (Megatron's
        interleaving needs a multiple of pp; Space.pipeline_fits_batch)."""
        sp = self.tb.sp
        pv = self.tb.int_domain("pv")[self.pos["pv"]]  # (n, P, 2)
        m = self.tb.int_domain("db")[self.pos["db"], 2]  # (n, D)
        ok = self.mask["pv"][:, :, None] & self.mask["db"][:, None, :]
        prof = sp.profile
        pp, M = pv[:, :, 0:1], m[:, None, :]
        if dualpipe(sp.training):  # rules.interleave_ok: DualPipeV runs at least 2·pp
            return ok & ((pv[:, :, 1:2] == 1) | (2 * pp <= M))
        if not (prof.interleave_whole_rounds or prof.interleave_torch_rounds):
            return ok
        runs = np.ones(np.broadcast_shapes(pp.shape, M.shape), dtype=bool)
        if prof.interleave_whole_rounds:
            runs &= M % pp == 0
        if prof.interleave_torch_rounds:  # rules.interleave_ok: rounds of max(1, M // pp)
            runs &= M % np.maximum(1, M // pp) == 0
        return ok & ((pv[:, :, 1:2] == 1) | runs)

    def bounds(self) -> np.ndarray:
        """Least objective at every (row, r, z, P, T, D), a whole number; inf where a stage's
        memory overflows, the framework runs no such ZeRO stage, the schedule no such pipeline,
        or the entry is padding."""
        tb = self.tb
        ok = self.runs()[:, None, None, :, None, :] & self.mask["te"][:, None, None, None, :, None]
        return _combine(tb, self.value, ok, self.zpos)


PAD_SLACK = 1.25  # a batch of rows may hold this much padding over their real entries
PAD_FIXED = 4096  # entries a batch may pad besides: what one more batch costs in calls


def _similar(sizes: list[tuple[int, int, int]]) -> list[list[int]]:
    """Rows (positions in `sizes`, their (P, T, D)) in batches of similar shape, so little of a
    batch's arrays is padding; rows with no entry are in none."""
    order = sorted((i for i, s in enumerate(sizes) if min(s)), key=lambda i: -math.prod(sizes[i]))
    out: list[list[int]] = []
    width, real = (0, 0, 0), 0
    for i in order:
        w = tuple(max(a, b) for a, b in zip(width, sizes[i], strict=True))
        if (
            out
            and math.prod(w) * (len(out[-1]) + 1)
            <= PAD_SLACK * (real + math.prod(sizes[i])) + PAD_FIXED
        ):
            out[-1].append(i)
            width, real = w, real + math.prod(sizes[i])
        else:
            out.append([i])
            width, real = sizes[i], math.prod(sizes[i])
    return out


def fine_bounds(tb: Tables, rows: list[int], cap: float = np.inf) -> dict[int, Fine]:
    """Per row: its fine bounds by cell and by (cell, r, z) (the least over the pipelines), the
    pipeline where each is reached, and where the row's bound is reached. Only the cells of the
    micro-batch shapes and expert groups whose coarse bound is at most `cap` are listed; the
    rest is summarised by the least of those bounds (`Fine.rest`). Rows are bounded in batches
    of similar shape."""
    within = [tb.shapes_within(r, cap) for r in rows]
    groups = [tb.te_within(r, cap) for r in rows]
    lists = {
        "pv": [tb.agree("pv", r) for r in rows],
        "te": [t for t, _ in groups],
        "db": [d for d, _ in within],
    }
    sizes = [tuple(len(lists[a][i]) for a in ("pv", "te", "db")) for i in range(len(rows))]
    nr, nz = len(tb.sp.rs), len(tb.sp.zs)
    got: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # row position: bounds, pipelines
    zcls = tb.cls["z"][np.array(rows, dtype=np.int64)]
    parts = []
    for c in sorted(set(zcls.tolist())):  # rows of one class run the same ZeRO stages
        same = np.flatnonzero(zcls == c).tolist()
        zpos = tb.members["z"][c].tolist()
        if zpos:
            parts += [([same[k] for k in p], zpos) for p in _similar([sizes[i] for i in same])]
    for part, zpos in parts:
        tb.check()
        lst = {a: [lists[a][i] for i in part] for a in lists}
        batch = _Batch(tb, [rows[i] for i in part], lst, zpos)
        every = batch.bounds()  # (rows, r, Z, P, T, D)
        # the least over the pipelines, and the first where it is reached, for the whole batch
        # at once: padded pipelines are inf, after the real ones, so neither changes
        least, where = every.min(axis=3), every.argmin(axis=3)  # (rows, r, Z, T, D)
        n = len(part)
        pos = batch.pos["pv"]  # (rows, P): each row's pipelines, then padding
        where = pos[np.arange(n)[:, None, None, None, None], where]  # pipelines' positions
        # db-major cells: (rows, D, T, r, Z); ZeRO stages the rows do not run are inf, at the
        # first pipeline
        least, where = least.transpose(0, 4, 3, 1, 2), where.transpose(0, 4, 3, 1, 2)
        if len(zpos) < nz:
            b = np.full((*least.shape[:4], nz), np.inf)
            b[..., zpos] = least
            w = np.repeat(pos[:, :1], least[0].size // len(zpos) * nz, axis=1)
            w = w.reshape(b.shape)
            w[..., zpos] = where
            least, where = b, w
        for j, i in enumerate(part):
            _, nte, ndb = sizes[i]
            bounds, pv = np.empty((nte * ndb, nr, nz)), np.empty((nte * ndb, nr, nz), np.int64)
            bounds.reshape(ndb, nte, nr, nz)[...] = least[j, :ndb, :nte]
            pv.reshape(ndb, nte, nr, nz)[...] = where[j, :ndb, :nte]
            got[i] = bounds, pv
    out = {}
    none = np.full((0, nr, nz), np.inf), np.zeros((0, nr, nz), np.int64)  # no cell (shared)
    for i, (r, (_, rest)) in enumerate(zip(rows, within, strict=True)):
        rest = min(rest, groups[i][1])
        _, nte, ndb = sizes[i]
        cells = nte * ndb
        te, db = lists["te"][i], lists["db"][i]
        if not cells:
            out[r] = Fine(rest, db[:0], te[:0], *none, None, rest, cap)
            continue
        if i in got:
            bounds, pv = got[i]
        else:
            bounds = np.full((cells, nr, nz), np.inf)
            pv = np.zeros((cells, nr, nz), np.int64)
        at = None
        flat = int(bounds.argmin())
        bound = float(bounds.reshape(-1)[flat])
        if bound < np.inf:
            c, rz = divmod(flat, nr * nz)
            at = (c, rz // nz, rz % nz)
        tile = np.empty(cells, te.dtype)  # te of each cell, db-major
        tile.reshape(ndb, nte)[...] = te
        out[r] = Fine(min(bound, rest), db.repeat(nte), tile, bounds, pv, at, rest, cap)
    return out
