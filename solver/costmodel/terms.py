"""Terms: how the cost model is written so that one definition serves three consumers.

A term is `start(rows, key) × f_pv × f_te × f_db`: a float table over the layout rows (computed
for every row at once from the rows' arrays, `point.Rows`; optionally selected by a key of the
recomputation or ZeRO axis) times exact rational factors over the small composite axes. The
float evaluator multiplies floats; the integer form (what CP-SAT optimises and the oracle
enumerates) rounds the start once, sums the starts of terms that share their factors, and rounds
after each factor: up for costs, down for credits. `Compiled` fixes that grouping so the CP-SAT
builder and `Compiled.value` cannot disagree. Every consumer reads the same start arrays (a
single layout is a one-row table), and the integer arithmetic over many points at once
(`Compiled.values`) is exact: int64 where it cannot overflow, Python integers otherwise.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from meshplan.solver.costmodel.factors import INT_SAFE, Factor, Fractions
from meshplan.solver.costmodel.point import Point, Rows, full
from meshplan.solver.record import record

FACTOR_AXES = ("pv", "te", "db")  # order in which factors are applied
POINT_AXES = ("pv", "db", "te", "r", "z")  # a point's axes besides its layout row
MUL_SAFE = 1 << 62  # |x · numerator| below this: the int64 product is exact


@dataclass(frozen=True)
class Term:
    name: str  # breakdown component or memory tenant
    start: Callable[[Rows, object], object]  # float array over the rows (or one float for all)
    sel: str | None = None  # "r" or "z": the start depends on a key of that axis
    key: Callable[[object], object] = lambda x: x  # axis value -> key passed to start
    pv: Factor | None = None
    te: Factor | None = None
    db: Factor | None = None

    def factors(self) -> tuple[Factor | None, ...]:
        return (self.pv, self.te, self.db)

    def starts(self, rows: Rows, keyval: object) -> np.ndarray:
        """The start over every row, computed once per rows (terms sharing a start share it)."""
        k = (self.start, keyval)
        got = rows.memo.get(k)
        if got is None:
            x = self.start(rows, keyval)
            # a float array over the rows is as `full` would give it back
            if type(x) is not np.ndarray or x.dtype != np.float64 or x.shape != rows.tp.shape:
                x = full(x, len(rows))
            got = rows.memo[k] = x
        return got

    def float_value(self, p: Point, rows: Rows | None = None, i: int = 0) -> float:
        """The float value at p, whose layout is row i of `rows` (default: the start computed
        for p's layout alone, on Python numbers: the same bits)."""
        kv = self.key(p.axis(self.sel)) if self.sel else None
        x = float(self.start(p.lay, kv) if rows is None else self.starts(rows, kv)[i])
        for ax, fn in zip(FACTOR_AXES, self.factors(), strict=True):
            if fn is not None:
                x *= float(fn(p.axis(ax)))
        return x


def ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def round_int(x: float, up: bool) -> int:
    return math.ceil(x) if up else math.floor(x)


def apply(x: int, f: Fraction, up: bool) -> int:
    return ceil_div(x * f.numerator, f.denominator) if up else (x * f.numerator) // f.denominator


def round_ints(x: np.ndarray, up: bool) -> np.ndarray:
    """math.ceil (floor) of every entry, exactly: int64, or Python integers past INT_SAFE."""
    y = np.ceil(x) if up else np.floor(x)
    if np.abs(y).max(initial=0.0) < INT_SAFE:  # False for a NaN or an infinity too
        return y.astype(np.int64)
    out = np.empty(len(x), dtype=object)
    out[:] = [round_int(v, up) for v in x.tolist()]
    return out


def apply_many(x: np.ndarray, num: np.ndarray, den: np.ndarray, up: bool) -> np.ndarray:
    """`apply` entry by entry (exact: int64 when the products fit, else Python integers)."""
    # Python integers: an int64 product of the two maxima could itself wrap
    if x.dtype != object and len(x) and int(np.abs(x).max()) * int(np.abs(num).max()) >= MUL_SAFE:
        x = x.astype(object)
    if x.dtype == object:
        num, den = num.astype(object), den.astype(object)
    return -((-x * num) // den) if up else (x * num) // den


@dataclass(eq=False)
class Group:
    """Terms sharing (sel, key, factors): their integer starts are summed, then multiplied."""

    sel: str | None
    key: Callable[[object], object]
    factors: tuple[Factor | None, ...]
    terms: list[Term] = field(default_factory=list)
    # (axis, factor) of the factors present, in FACTOR_AXES order: what `Compiled.value` applies
    chain: tuple[tuple[str, Factor], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        pairs = zip(FACTOR_AXES, self.factors, strict=True)
        self.chain = tuple((ax, fn) for ax, fn in pairs if fn is not None)

    def int_starts(self, rows: Rows, keyval: object, scale: float, up: bool) -> np.ndarray:
        """The group's integer start over every row: each term's start scaled and rounded, then
        summed (computed once per rows)."""
        k = (self, keyval, scale, up)
        got = rows.memo.get(k)
        if got is None:
            cols = [round_ints(t.starts(rows, keyval) * scale, up) for t in self.terms]
            got = cols[0]
            for c in cols[1:]:
                got = got + c
            rows.memo[k] = got
        return got

    def start_int(self, lay_rows: Rows, i: int, keyval: object, scale: float, up: bool) -> int:
        return int(self.int_starts(lay_rows, keyval, scale, up)[i])


def int_starts_many(rows: Rows, asks: Sequence[tuple[Group, object, float, bool]]) -> list:
    """`Group.int_starts(rows, keyval, scale, up)` of each (group, keyval, scale, up): the same
    integers, those not computed yet rounded together (one pass over all their terms' starts
    instead of a few small passes per term) and kept in the rows' memo as `int_starts` keeps
    them. Past INT_SAFE (or a NaN): group by group, as `int_starts`."""
    memo = rows.memo
    todo = [k for k in dict.fromkeys(asks) if k not in memo]
    if len(todo) == 1:  # one group: its own few passes cost less than stacking
        g, kv, s, u = todo[0]
        g.int_starts(rows, kv, s, u)
    elif todo:
        n = len(rows)
        gs, kvs, scales, ups = zip(*todo, strict=True)
        cols = [t.starts(rows, kv) for g, kv in zip(gs, kvs, strict=True) for t in g.terms]
        sizes = [len(g.terms) for g in gs]
        # ceil(v) is -floor(-v), and x·(-s) is -(x·s): one floor for both roundings
        sign = np.where(np.array(ups, dtype=bool), -1.0, 1.0)
        by = np.array(scales, dtype=np.float64) * sign
        if len(cols) > len(todo):  # some group sums several terms
            by, sign = np.repeat(by, sizes), np.repeat(sign, sizes)
        y = np.concatenate(cols).reshape(len(cols), n)  # one copy of every start
        y *= by[:, None]
        np.floor(y, out=y)
        if y.max(initial=0.0) < INT_SAFE and y.min(initial=0.0) > -INT_SAFE:  # False for a NaN
            y *= sign[:, None]  # or an infinity too
            got = y.astype(np.int64)
            if len(cols) > len(todo):  # integer sums: exact in any order (INT_SAFE)
                got = _group_sums(got, sizes)
            memo.update(zip(todo, got, strict=True))
        else:
            for g, kv, s, u in todo:
                g.int_starts(rows, kv, s, u)
    return [memo[k] for k in asks]


def _group_sums(x: np.ndarray, sizes: list[int]) -> np.ndarray:
    """The sums of consecutive runs of rows of an int64 table, of these sizes (each >= 1): the
    first row of each run, plus its second, third... rows run by run (most runs are one row)."""
    size = np.array(sizes, dtype=np.int64)
    first = np.cumsum(size) - size
    out = x[first]
    for r in range(1, int(size.max())):
        more = np.flatnonzero(size > r)
        out[more] += x[first[more] + r]
    return out


@dataclass(eq=False)
class Compiled:
    """A sum of terms in integer units (`scale` per base unit), rounded `up` or down."""

    scale: float
    up: bool
    groups: list[Group]
    fracs: Fractions = field(default_factory=Fractions)
    _key_memo: OrderedDict = field(default_factory=OrderedDict, repr=False)  # see `_keys`

    @staticmethod
    def of(
        terms: list[Term],
        scale: float,
        up: bool,
        merge: bool = True,
        fracs: Fractions | None = None,
    ) -> Compiled:
        """Group terms; `merge=False` keeps one group per term (exact per-term sums)."""
        if not merge:
            groups = [Group(t.sel, t.key, t.factors(), [t]) for t in terms]
            return Compiled(scale, up, groups, fracs or Fractions())
        # by (sel, key, factors), in order of first use; keys and factors compare by identity
        by: dict[tuple, Group] = {}
        for t in terms:
            fs = t.factors()
            k = (t.sel, id(t.key), fs)
            g = by.get(k)
            if g is None:
                by[k] = Group(t.sel, t.key, fs, [t])
            else:
                g.terms.append(t)
        return Compiled(scale, up, list(by.values()), fracs or Fractions())

    def _keyval(self, g: Group, p: Point) -> object:
        return g.key(p.axis(g.sel)) if g.sel else None

    def _chain(self, x: int, factors: tuple[Factor | None, ...], p: Point) -> int:
        for ax, fn in zip(FACTOR_AXES, factors, strict=True):
            if fn is not None:
                x = apply(x, self.fracs(fn, p.axis(ax)), self.up)
        return x

    def group_value(self, g: Group, p: Point, rows: Rows, i: int = 0) -> int:
        x = g.start_int(rows, i, self._keyval(g, p), self.scale, self.up)
        return self._chain(x, g.factors, p)

    def value(self, p: Point, rows: Rows | None = None, i: int = 0) -> int:
        """The integer value at p, whose layout is row i of `rows` (default: p's layout alone):
        the sum of `group_value` over the groups, with p's axis values read once and each
        factor applied as `apply` does, from its kept (numerator, denominator)."""
        rows = Rows.one(p.lay) if rows is None else rows
        scale, up, axes, memo = self.scale, self.up, p.axes(), rows.memo
        pair, kept = self.fracs.pair, self.fracs._pairs  # what pair() keeps: read in place
        total = 0
        for g in self.groups:
            kv = g.key(axes[g.sel]) if g.sel else None
            got = memo.get((g, kv, scale, up))
            if got is None:  # the sum's missing integer starts at p's keys, computed together
                asks = [(h, h.key(axes[h.sel]) if h.sel else None, scale, up) for h in self.groups]
                got = int_starts_many(rows, asks)[self.groups.index(g)]
            x = int(got[i])
            for ax, fn in g.chain:
                v = axes[ax]
                num, den = kept.get((fn, v)) or pair(fn, v)
                x = -((-x * num) // den) if up else (x * num) // den
            total += x
        return total

    def by_name(self, p: Point, rows: Rows | None = None, i: int = 0) -> dict[str, int]:
        """Integer value per term name (groups split back by term; used for memory tenants)."""
        rows = Rows.one(p.lay) if rows is None else rows
        out: dict[str, int] = {}
        for g in self.groups:
            kv = self._keyval(g, p)
            for t in g.terms:
                if len(g.terms) == 1:  # the group's integer start is the term's (kept)
                    x = g.start_int(rows, i, kv, self.scale, self.up)
                else:
                    x = int(round_ints(t.starts(rows, kv)[i : i + 1] * self.scale, self.up)[0])
                out[t.name] = out.get(t.name, 0) + self._chain(x, g.factors, p)
        return out

    def float_terms(self, p: Point, rows: Rows | None = None, i: int = 0) -> list[float]:
        """`Term.float_value` of each term, in order (group by group), with the factors'
        values read from `fracs` (the same rationals: the same floats)."""
        rows = Rows.one(p.lay) if rows is None else rows
        axes, fr, out = p.axes(), self.fracs, []
        for g in self.groups:
            kv = g.key(axes[g.sel]) if g.sel else None
            for t in g.terms:
                x = float(t.starts(rows, kv)[i])
                for ax, fn in g.chain:
                    x *= float(fr(fn, axes[ax]))
                out.append(x)
        return out

    def float_value(self, p: Point, rows: Rows | None = None, i: int = 0) -> float:
        return sum(self.float_terms(p, rows, i))

    # ---- many points at once -------------------------------------------------------------
    def values(self, rows: Rows, at: Points) -> np.ndarray:
        """The integer value of many points (exactly `value` of each), whose layouts are rows
        `at.row` of `rows`."""
        memo, asks = rows.memo, []
        for g in self.groups:  # missing integer starts of every key seen, computed together
            kvs = self._keys(g.key, at.axes[g.sel][0])[0] if g.sel else (None,)
            asks += [k for kv in kvs if (k := (g, kv, self.scale, self.up)) not in memo]
        if asks:
            int_starts_many(rows, asks)
        out: np.ndarray | int = 0
        for g in self.groups:
            out = out + self.group_values(g, rows, at)
        return full(out, len(at.row)).astype(np.int64) if isinstance(out, int) else out

    KEYS = 64  # domains whose keys a compiled sum keeps (an LRU)

    def _keys(self, key: Callable, dom: Sequence[object]) -> tuple[list, np.ndarray]:
        """The distinct keys of a domain's values, and each value's position among them (kept
        in a small LRU by the domain's identity; the domain is kept too, so its id stays
        unique): Python calls per value, once per domain instead of once per group and call."""
        k = (key, id(dom))
        got = self._key_memo.get(k)
        if got is not None and got[0] is dom:
            self._key_memo.move_to_end(k)
            return got[1], got[2]
        keys = [key(v) for v in dom]
        uniq = list(dict.fromkeys(keys))
        which = np.array([uniq.index(x) for x in keys], dtype=np.int64)
        self._key_memo[k] = (dom, uniq, which)
        while len(self._key_memo) > self.KEYS:
            self._key_memo.popitem(last=False)
        return uniq, which

    def group_values(self, g: Group, rows: Rows, at: Points) -> np.ndarray:
        """`group_value` at every point. When (largest |start| + 1) · Π max(|numerator|) <
        MUL_SAFE no product can overflow int64 (each step's magnitude is at most the last one's
        times |numerator|), so the factors are applied without `apply_many`'s check at each
        step (the same integers)."""
        if g.sel is None:
            x = g.int_starts(rows, None, self.scale, self.up)[at.row]
        else:
            k = (g.key, g.sel)
            got = at.memo.get(k)  # groups sharing a key share each point's key position
            if got is None:
                dom, idx = at.axes[g.sel]
                uniq, which = self._keys(g.key, dom)
                got = at.memo[k] = (uniq, which[idx])
            uniq, which = got
            x = None
            for j, kv in enumerate(uniq):
                part = g.int_starts(rows, kv, self.scale, self.up)[at.row]
                x = part if x is None else np.where(which == j, part, x)
        facs = []
        for ax, fn in g.chain:
            got = at.memo.get(fn)  # groups sharing a factor share its values at the points
            if got is None:
                dom, idx = at.axes[ax]
                num, den = self.fracs.arrays(fn, dom)
                num, den = num[idx], den[idx]
                most = None if num.dtype == object else max(int(np.abs(num).max(initial=0)), 1)
                got = at.memo[fn] = (num, den, most)
            facs.append(got)
        bound = None if x.dtype == object or not len(x) else int(np.abs(x).max()) + 1
        for _, _, most in facs:
            bound = None if bound is None or most is None else bound * most
        if bound is not None and bound < MUL_SAFE:
            for num, den, _ in facs:
                x = -((-x * num) // den) if self.up else (x * num) // den
            return x
        for num, den, _ in facs:
            x = apply_many(x, num, den, self.up)
        return x


@record
class Points:
    """Many points as arrays: each point's layout row and, per axis, (domain, index into it)."""

    row: np.ndarray  # int64 positions in the rows the starts are computed over
    axes: dict[str, tuple[Sequence[object], np.ndarray]]
    # per factor (and per (key, selector)): its values at the points, gathered once for every
    # group of every sum read at these points (a factor is one axis' and one cost model's)
    memo: dict = field(default_factory=dict, repr=False, compare=False)

    def take(self, at: np.ndarray) -> Points:
        """The points at these positions."""
        return Points(self.row[at], {a: (dom, idx[at]) for a, (dom, idx) in self.axes.items()})

    @staticmethod
    def of(points: Sequence[Point], rows: Sequence[int]) -> Points:
        """From Point objects and each one's row position: each axis' domain is its values in
        the order they appear, built in one pass over the points."""
        dom: dict[str, dict] = {a: {} for a in POINT_AXES}
        idx: dict[str, list[int]] = {a: [] for a in POINT_AXES}
        for p in points:
            for a in POINT_AXES:
                d = dom[a]
                idx[a].append(d.setdefault(p.axis(a), len(d)))
        axes = {a: (list(dom[a]), np.array(idx[a], dtype=np.int64)) for a in POINT_AXES}
        return Points(np.array(rows, dtype=np.int64), axes)


def frac(x: float, max_den: int = 1 << 20) -> Fraction:
    """A float factor as a rational (bandwidth ratios and the like)."""
    return Fraction(x).limit_denominator(max_den)
