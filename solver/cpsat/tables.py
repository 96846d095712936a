"""The cost model's tables for one space, computed once and shared by every model built over it
(row generation rebuilds the model several times): integer start tables over all layout rows,
the factors of every axis value, which axis values agree with which rows (by classes of rows),
and the bounds of `bounds.py`, coarse for every row and fine for the rows the search looks at.
Rows are referred to by their position in `sp.layouts` (an int)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

import numpy as np

from meshplan.solver import cache
from meshplan.solver.costmodel import Layout, Point
from meshplan.solver.costmodel.factors import Factor
from meshplan.solver.costmodel.point import Rows
from meshplan.solver.costmodel.terms import FACTOR_AXES, Compiled, Group, int_starts_many
from meshplan.solver.cpsat.bounds import Fine, Sums, fine_bounds, shape_bounds, stack_sums
from meshplan.solver.cpsat.coarse import coarse_bounds
from meshplan.solver.space import Space

AXES = ("pv", "db", "te", "r", "z")


class Stopped(Exception):
    """The solve was stopped or ran out of time while tables were being computed."""


class Tables:
    """Start tables, factors, compatible axis values and row bounds for one space.

    What depends only on the rows and the domains (everything but the cap, the best point and
    which fine bounds this search has taken) is kept in a memo across requests
    (`cache.tables_memo`): a repeated space computes none of it again, and a search takes the
    same fine bounds, computed at the same caps, as it would afresh."""

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
        memo = self.memo = cache.tables_memo(sp.cm, sp.layouts, sp.domains)
        if "pos" not in memo:
            self._classes(memo)
        self.pos, self.cls, self.members = memo["pos"], memo["cls"], memo["members"]
        self.flat, self.z_ok = memo["flat"], memo["z_ok"]
        self._fmat: dict[tuple[str, str], np.ndarray] = memo["fmat"]
        self._by_db: dict[int, tuple[np.ndarray, np.ndarray]] = memo["by_db"]  # row: shapes, bounds
        self._fine_at: dict[tuple[int, float], Fine] = memo["fine"]  # (row, cap): fine bounds
        self.cap = np.inf  # the best objective known: cells above it need no fine bounds
        self.best: Point | None = None  # a point of that objective, when the tables found it
        self._fine: dict[int, Fine] = {}  # the fine bounds this search took, by row
        self._sums: Sums | None = None

    def _classes(self, memo: cache.Memo) -> None:
        """Which axis values agree with which rows, by classes of rows, into the memo."""
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
        cls: dict[str, np.ndarray] = {}
        members: dict[str, list[np.ndarray]] = {}
        flats: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        oks: dict[str, np.ndarray] = {}
        for axis, k in keys.items():
            uniq, first, inv = np.unique(k, return_index=True, return_inverse=True)
            cls[axis] = inv.astype(np.int64).reshape(-1)
            ok = oks[axis] = self._agree(axis, first)
            sizes = ok.sum(axis=1, dtype=np.int64)
            flat = np.nonzero(ok)[1].astype(np.int64)  # row-major: class by class, in order
            ends = np.cumsum(sizes)
            offsets = np.concatenate([[0], ends[:-1]]).astype(np.int64)
            # views of flat, as np.split gives them (its own loop costs more a class)
            members[axis] = [
                flat[e - n : e] for e, n in zip(ends.tolist(), sizes.tolist(), strict=True)
            ]
            flats[axis] = (flat, offsets, sizes)
        z_ok = oks["z"]
        memo.update(cls=cls, members=members, flat=flats, z_ok=z_ok)
        memo.update(fmat={}, by_db={}, fine={}, scores={})
        memo["pos"] = self.pos  # last: the memo is complete once it holds "pos"

    def int_domain(self, axis: str) -> np.ndarray:
        """The axis' values (tuples of ints: pv, db, te) as an int64 array, one row each (kept
        with the tables)."""
        got = self.memo.get(("dom", axis))
        if got is None:
            width = {"pv": 2, "db": 3, "te": 3}[axis]
            got = np.array(self.domain[axis], dtype=np.int64).reshape(-1, width)
            self.memo[("dom", axis)] = got
        return got

    def _agree(self, axis: str, first: np.ndarray) -> np.ndarray:
        """Per row (one of each class, positions `first`): which values of the axis agree with
        it (Space.compatible), (rows, |domain|) booleans."""
        sp, R = self.sp, self.rows
        if axis == "z":
            ok = np.zeros((len(first), len(sp.zs)), dtype=bool)
            pos = self.pos["z"]
            for c, i in enumerate(first.tolist()):
                ok[c, [pos[z] for z in sp.zero_values(sp.layouts[i])]] = True
            return ok
        if not self.domain[axis]:
            return np.zeros((len(first), 0), dtype=bool)
        dom = self.int_domain(axis)
        if axis == "pv":
            return dom[None, :, 0] == R.pp[first][:, None]
        if axis == "db":
            return dom[None, :, 0] == R.dp[first][:, None]
        group = dom[None, :, 1] * dom[None, :, 2]
        tp, fold = R.tp[first][:, None], (R.tp * R.cp * R.dp)[first][:, None]
        return (dom[None, :, 0] == tp) & (fold % group == 0)

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
            # the factors as floats, for the bounds, whose margin covers the rounding
            dom = self.sp.cm.fracs.float_matrix(tuple(self.factor_fns[axis]), self.domain[axis])
            self._fmat[(axis, "dom")] = dom
            flat, offsets, sizes = self.flat[axis]
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
        if self._sums is None:  # asked for many times a search: the key built once
            k = ("sums", tuple(self.sp.rs), tuple(self.sp.zs))
            got = self.rows.memo.get(k)
            if got is None:  # kept, not read back: rows dropped from the cache lose their memo
                got = stack_sums(self, self.sp.cm.sums(self.sp.zs), self.starts_many)
                self.rows.memo[k] = got
            self._sums = got
        return self._sums

    @property
    def index(self) -> dict[Layout, int]:
        """Each layout's position in the space (`Space.index`)."""
        return self.sp.index

    # -- start tables and factors -----------------------------------------------------------
    def starts(self, comp: Compiled, g: Group, keyval: object) -> np.ndarray:
        """The group's integer start for every layout row of the space, in `sp.layouts` order
        (each table computed once, over all rows at once; a stop is checked between tables)."""
        if (g, keyval, comp.scale, comp.up) not in self.rows.memo:
            self.check()
        return g.int_starts(self.rows, keyval, comp.scale, comp.up)

    def starts_many(self, asks: list[tuple[Compiled, Group, object]]) -> list[np.ndarray]:
        """`starts` of each (comp, group, keyval), the missing tables computed together (a stop
        is checked before)."""
        self.check()
        return int_starts_many(self.rows, [(g, kv, c.scale, c.up) for c, g, kv in asks])

    def agree(self, axis: str, row: int) -> np.ndarray:
        """Positions (in the axis' domain) of the values that agree with row `row`."""
        return self.members[axis][self.cls[axis][row]]

    def compatible(self, axis: str, row: int) -> list:
        dom = self.domain[axis]
        return [dom[i] for i in self.agree(axis, row).tolist()]

    # -- bounds --------------------------------------------------------------------------
    def coarse(self) -> np.ndarray:
        """The coarse bound of every row of the space (inf: nothing in the row fits)."""
        got = self.memo.get("coarse")
        if got is None:
            rows, te = np.arange(self.n, dtype=np.int64), self.flat["te"][2][self.cls["te"]]
            per, by_te = coarse_bounds(self, rows)
            self.memo["by_te"] = (by_te, np.concatenate([[0], np.cumsum(te)]))
            got = self.memo["coarse"] = per
            cache.grew(self.memo, got.nbytes + by_te.nbytes)
        return got

    def te_within(self, row: int, cap: float) -> tuple[np.ndarray, float]:
        """The expert groups of the row (positions in the te domain, `agree`) whose coarse bound
        is at most `cap`, and the least bound of the others (inf: none)."""
        self.coarse()
        by_te, ends = self.memo["by_te"]
        return _within(self.agree("te", row), by_te[ends[row] : ends[row + 1]], cap)

    def shapes_within(self, row: int, cap: float) -> tuple[np.ndarray, float]:
        """The micro-batch shapes of the row whose bound is at most `cap` (positions in the db
        domain), and the least bound of the others (inf: none)."""
        if row not in self._by_db:
            self._shapes([row])
        return _within(*self._by_db[row], cap)

    def refine(self, rows: list[int], cap: float | None = None) -> None:
        """Compute the fine bounds of these rows (those not done already), of every cell whose
        bound may be at most `cap` (default: the best objective known, `self.cap`)."""
        cap = self.cap if cap is None else cap
        todo = [r for r in rows if r not in self._fine or self._fine[r].upto < cap]
        self._shapes([r for r in todo if r not in self._by_db])
        new = [r for r in todo if (r, cap) not in self._fine_at]
        if new:
            got = fine_bounds(self, new, cap)
            self._fine_at.update(((r, cap), f) for r, f in got.items())
            cache.grew(
                self.memo, sum(f.by_rz.nbytes + f.pv.nbytes + 2 * f.db.nbytes for f in got.values())
            )
        self._fine.update((r, self._fine_at[(r, cap)]) for r in todo)

    def lead(self, rows: list[int]) -> None:
        """Of these rows not refined yet (two or more), refine first the one whose least shape
        bound is least (shape bounds of all of them, as `refine` takes next) and lower the cap
        by its guess: the others' fine bounds then list only the cells below a cap near the
        best point (the greedy hint that sets the first cap is ~1.3x the optimum at the median
        of the throughput sweep)."""
        rows = [r for r in rows if r not in self._fine]
        if len(rows) < 2:
            return
        key = ("lead", tuple(rows), self.cap)  # a repeated search picks the same row: kept
        lead = self.memo.get(key, -1)
        if lead == -1:
            lead = self.memo[key] = self._most_promising(rows)
        if lead is not None:
            self.refine([lead])
            self.improve_cap([lead])

    def _most_promising(self, rows: list[int]) -> int | None:
        """The row with the least shape bound (the first on a tie), None if that is above the
        cap."""
        self._shapes([r for r in rows if r not in self._by_db])
        least = [float(b.min()) if len(b) else np.inf for _, b in map(self._by_db.get, rows)]
        j = int(np.argmin(least))
        return rows[j] if least[j] <= self.cap else None

    def _shapes(self, rows: list[int]) -> None:
        """Bound the micro-batch shapes of these rows (shape_bounds), into the memo."""
        if rows:
            got = shape_bounds(self, np.array(rows))
            self._by_db.update(zip(rows, got, strict=True))
            cache.grew(self.memo, sum(d.nbytes + b.nbytes for d, b in got))

    def fine(self, row: int, cap: float | None = None) -> Fine:
        self.refine([row], cap)
        return self._fine[row]

    def bound(self, row: int) -> float:
        """The row's best bound so far: fine once refined, else coarse (inf: nothing fits)."""
        f = self._fine.get(row)
        return f.bound if f is not None else float(self.coarse()[row])

    def improve_cap(self, rows: list[int]) -> None:
        """Score the guesses of these rows exactly (each once across requests) and lower the cap
        to the best that fits: the best point known so far (`self.best`). A guess costs at least
        its row's fine bound, so the guesses are scored in order of bound, until the next bound
        exceeds the best fitting objective found (a guess past it can neither beat nor tie it):
        the same least objective, and of equal ones the first row's, as scoring every guess."""
        found = [  # only guesses whose bound is below the cap can lower it
            (r, f)
            for r in rows
            if (f := self._fine.get(r)) is not None and f.at is not None and f.bound < self.cap
        ]
        scores = self.memo["scores"]  # (row, cap of its fine bounds): objective, inf if no fit
        best, j = np.inf, -1
        order = sorted(range(len(found)), key=lambda k: found[k][1].bound)  # stable
        for k in order:
            r, f = found[k]
            if f.bound > best:
                break
            got = scores.get((r, f.upto))
            if got is None:  # the cost model's point path (it keeps the points it scored)
                s = self.score(self._point(r, f))
                got = scores[(r, f.upto)] = np.inf if s is None else float(s)
            if got < best or (got == best and k < j):
                best, j = got, k
        if best < self.cap:
            self.cap = best
            self.best = self.guess(found[j][0])

    def score(self, p: Point) -> int | None:
        """The objective of a point of the space's rows if it fits, else None (exact: the cost
        model's, which keeps the fit and objective of the points it scored over these rows, as
        the hint, the incumbent and the first round all ask for the same few)."""
        i, cm = self.index.get(p.lay), self.sp.cm
        if i is None or not cm.fits(p, self.rows, i):
            return None
        return cm.objective_int(p, self.rows, i)

    def guess(self, row: int) -> Point | None:
        """A point of the row where its fine bound is reached: a hint."""
        f = self.fine(row)
        return None if f.at is None else self._point(row, f)

    def _point(self, row: int, f: Fine) -> Point:
        """The point where the row's fine bounds `f` reach their bound (f.at is set)."""
        c, ri, zi = f.at
        (_, b, m), (_, e, et) = self.sp.db[f.db[c]], self.sp.te[f.te[c]]
        v = self.sp.pv[f.pv[c, ri, zi]][1]
        return Point(self.sp.layouts[row], v, b, m, e, et, self.sp.rs[ri], self.sp.zs[zi])


def _within(values: np.ndarray, bounds: np.ndarray, cap: float) -> tuple[np.ndarray, float]:
    """The values whose bound is at most `cap`, and the least bound of the others (inf: none)."""
    keep = bounds <= cap
    rest = bounds[~keep]
    return values[keep], float(rest.min()) if len(rest) else np.inf
