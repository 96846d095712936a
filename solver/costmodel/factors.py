"""Exact factors as numbers and arrays: the rational value of each factor at each axis value,
kept once per cost model (`Fractions`), and the micro-batch factors b^i·M^j over whole domains of
micro-batch shapes at once (`BatchFactor`), with the domains numbered by their values
(`DomainNumbers`) so equal domains share their arrays."""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np

Factor = Callable[[object], Fraction]
INT_SAFE = 1 << 58  # |integer start| below this: int64 sums of up to 32 starts cannot overflow


class DomainNumbers:
    """One number per distinct domain values (equal lists share it, numbers are never reused, so
    a clear cannot alias): found by the domain's identity (the last `ids` domains, kept so that
    their ids stay unique; domains are not changed once made), else by its values (the last
    `values` kept), hashed once per domain object instead of once per call."""

    def __init__(self, ids: int, values: int) -> None:
        self._ids, self._values = ids, values
        self._doms: dict[int, tuple[Sequence[object], int, int]] = {}  # id -> (dom, len, number)
        self._numbers: dict[tuple, int] = {}  # a domain's values -> its number
        self._count = itertools.count()

    def number(self, domain: Sequence[object]) -> int:
        got = self._doms.get(id(domain))
        if got is not None and got[0] is domain and got[1] == len(domain):
            return got[2]
        vals = tuple(domain)
        num = self._numbers.get(vals)
        if num is None:
            if len(self._numbers) >= self._values:
                self._numbers.clear()
            num = self._numbers[vals] = next(self._count)
        if len(self._doms) >= self._ids:
            self._doms.clear()
        self._doms[id(domain)] = (domain, len(domain), num)
        return num


class BatchFactor:
    """The factor b^i · M^j of a micro-batch shape (dp, b, M), i and j in {−1, 0, 1}: exact for
    one value, and as (numerators, denominators) arrays over many at once. One object per
    (i, j) (`BatchFactor.of`), so that equal factors are one column of the bounds' tables."""

    _made: dict[tuple[int, int], BatchFactor] = {}

    def __init__(self, b: int, m: int) -> None:
        self.b, self.m = b, m
        self._memo: dict[tuple[int, int, int], Fraction] = {}  # shared by every cost model
        self._arrays: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # by domain number

    @classmethod
    def of(cls, b: int, m: int) -> BatchFactor:
        if (b, m) not in cls._made:
            cls._made[(b, m)] = cls(b, m)
        return cls._made[(b, m)]

    def __call__(self, db: tuple[int, int, int]) -> Fraction:
        got = self._memo.get(db)
        if got is None:
            num, den = 1, 1
            for x, e in ((db[1], self.b), (db[2], self.m)):
                if e > 0:
                    num *= x
                elif e < 0:
                    den *= x
            got = self._memo[db] = Fraction(num, den)
        return got

    def arrays(self, values: Sequence[tuple[int, int, int]]) -> tuple[np.ndarray, np.ndarray]:
        """(numerators, denominators) in lowest terms over a domain, kept by the domain's values
        for every cost model (spaces of many requests share their micro-batch shapes)."""
        k = _BATCH_DOMAINS.number(values)
        got = self._arrays.get(k)
        if got is None:
            if len(self._arrays) >= 64:  # the last few domains (~3.5 KB each)
                self._arrays.clear()
            got = self._arrays[k] = self._arrays_of(_batch_values(k, values))
            for a in got:  # shared by every cost model: read-only
                a.flags.writeable = False
        return got

    def _arrays_of(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        num = np.ones(len(v), dtype=np.int64)
        den = np.ones(len(v), dtype=np.int64)
        for x, e in ((v[:, 1], self.b), (v[:, 2], self.m)):
            if e > 0:
                num = num * x
            elif e < 0:
                den = den * x
        if self.b * self.m >= 0:  # num or den is all ones: already in lowest terms
            return num, den
        g = np.gcd(num, den)
        return num // g, den // g


# micro-batch domains, shared by every BatchFactor (a space's few, ~16 KB of values each)
_BATCH_DOMAINS = DomainNumbers(ids=64, values=256)
_BATCH_VALUES: dict[int, np.ndarray] = {}  # domain number -> its values, (|domain|, 3) int64
# (micro-batch factors, domain number) -> Fractions.float_matrix, for every cost model
_BATCH_MATRICES: dict[tuple[tuple[BatchFactor, ...], int], np.ndarray] = {}


class _FloatTable:
    """numerator / denominator (floats, as `Fractions.float_matrix` gives them) of factors at
    axis values, one entry per (factor, value) for the life of a cost model's `Fractions`: the
    spaces of one request at several GPU counts ask for other domains of the same pipeline and
    expert-group values, which become one gather instead of a pass over every value and factor."""

    def __init__(self) -> None:
        self._rows: dict[Factor, int] = {}  # factor -> its row
        self._cols: dict[object, int] = {}  # axis value -> its column
        self._table = np.full((8, 64), np.nan)  # nan: not computed yet (a factor is finite)
        # one cost model's table is read by every thread solving with it (a scheduler query's
        # cells on the server's threads): numbering, growing and filling it are one step
        self._lock = threading.Lock()

    def matrix(
        self,
        fns: Sequence[Factor],
        domain: Sequence[object],
        pairs: Callable[[list[tuple[Factor, object]]], list[tuple[int, int]]],
    ) -> np.ndarray:
        """(len(fns), len(domain)): each factor's float over the domain; `pairs(keys)` gives the
        entries not computed yet, (factor, value) keys, as (numerator, denominator) pairs."""
        with self._lock:
            rows, cols = self._rows, self._cols
            ri = [rows.setdefault(fn, len(rows)) for fn in fns]
            ci = [cols.setdefault(v, len(cols)) for v in domain]
            self._fit(len(rows), len(cols))
            sub = self._table[np.ix_(ri, ci)]
            todo = np.argwhere(np.isnan(sub))
            if len(todo):
                at = todo.tolist()
                got = pairs([(fns[i], domain[j]) for i, j in at])
                table = self._table
                for (i, j), (num, den) in zip(at, got, strict=True):
                    sub[i, j] = table[ri[i], ci[j]] = float(num) / float(den)
            return sub

    def _fit(self, nr: int, nc: int) -> None:
        r, c = self._table.shape
        if nr > r or nc > c:
            grown = np.full((max(nr, 2 * r), max(nc, 2 * c)), np.nan)
            grown[:r, :c] = self._table
            self._table = grown


def _batch_values(k: int, values: Sequence[tuple[int, int, int]]) -> np.ndarray:
    """The micro-batch domain numbered k as an int64 array (kept: every BatchFactor of a space
    reads the same domain, converted once instead of once per factor)."""
    got = _BATCH_VALUES.get(k)
    if got is None:
        if len(_BATCH_VALUES) >= 64:  # the last few domains, as BatchFactor keeps its arrays
            _BATCH_VALUES.clear()
        got = _BATCH_VALUES[k] = np.array(values, dtype=np.int64).reshape(-1, 3)
        got.flags.writeable = False
    return got


class Fractions:
    """Factor values per axis value, computed once (factors are exact rationals); and as arrays
    over the few domains recently asked for (an LRU of `ARRAYS` domains)."""

    ARRAYS = 64

    def __init__(self) -> None:
        self._memo: dict[tuple[Factor, object], Fraction] = {}
        self._pairs: dict[tuple[Factor, object], tuple[int, int]] = {}
        self._arrays: OrderedDict[tuple[Factor, int], tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._domains = DomainNumbers(ids=self.ARRAYS * 4, values=self.ARRAYS * 4)
        self._matrices: dict[tuple[tuple[Factor, ...], int], np.ndarray] = {}  # float_matrix
        self._floats = _FloatTable()  # every factor's float at every axis value asked for

    def __call__(self, fn: Factor, v: object) -> Fraction:
        k = (fn, v)
        f = self._memo.get(k)
        if f is None:
            f = self._memo[k] = fn(v)
        return f

    def pair(self, fn: Factor, v: object) -> tuple[int, int]:
        """(numerator, denominator) of `self(fn, v)` as Python integers, kept."""
        k = (fn, v)
        got = self._pairs.get(k)
        if got is None:
            f = self(fn, v)
            got = self._pairs[k] = (f.numerator, f.denominator)
        return got

    def pairs(self, keys: list[tuple[Factor, object]]) -> list[tuple[int, int]]:
        """`pair(fn, v)` of each (fn, v) key, kept as `pair` keeps them: one loop over the keys
        (a new cost model's float matrices ask for a few hundred at once)."""
        memo, kept = self._memo, self._pairs
        out = []
        for k in keys:
            got = kept.get(k)
            if got is None:
                f = memo.get(k)
                if f is None:
                    f = memo[k] = k[0](k[1])
                got = kept[k] = (f.numerator, f.denominator)
            out.append(got)
        return out

    def domain_number(self, domain: Sequence[object]) -> int:
        """One number per distinct domain values (`DomainNumbers`)."""
        return self._domains.number(domain)

    def arrays(self, fn: Factor, domain: Sequence[object]) -> tuple[np.ndarray, np.ndarray]:
        """(numerators, denominators) over a domain of axis values (int64, or Python integers
        when one does not fit). Kept by the domain's values (`domain_number`: spaces of one cost
        model at other GPU counts often have the same pipelines, expert groups and micro-batch
        shapes), for every factor, micro-batch factors included."""
        k = (fn, self.domain_number(domain))
        got = self._arrays.get(k)
        if got is not None:
            with contextlib.suppress(KeyError):  # another thread dropped it since: still good
                self._arrays.move_to_end(k)
            return got
        got = self._arrays[k] = self._arrays_of(fn, domain)
        while len(self._arrays) > self.ARRAYS * 16:
            self._arrays.popitem(last=False)
        return got

    def float_matrix(self, fns: tuple[Factor, ...], domain: Sequence[object]) -> np.ndarray:
        """Row 0 ones, then each factor of `fns` as floats (numerator / denominator) over the
        domain: (1 + len(fns), |domain|), read-only. Kept by the factors and the domain's values
        (the micro-batch factors' for every cost model: `_BATCH_MATRICES`), as spaces of one
        request family, and other families on the same micro-batch shapes, repeat them."""
        batch = all(isinstance(fn, BatchFactor) for fn in fns)
        if batch:
            memo, k = _BATCH_MATRICES, (fns, _BATCH_DOMAINS.number(domain))
        else:
            memo, k = self._matrices, (fns, self.domain_number(domain))
        got = memo.get(k)
        if got is None:
            if len(memo) >= self.ARRAYS:  # the last few (a few KB each)
                memo.clear()
            got = np.ones((1 + len(fns), len(domain)))
            if batch:
                for i, fn in enumerate(fns):
                    num, den = self.arrays(fn, domain)
                    got[1 + i] = num.astype(float) / den.astype(float)
            else:  # a gather: each (factor, value) is computed once for every domain
                got[1:] = self._floats.matrix(fns, domain, self.pairs)
            got.flags.writeable = False
            memo[k] = got
        return got

    def _arrays_of(self, fn: Factor, domain: Sequence[object]) -> tuple[np.ndarray, np.ndarray]:
        if isinstance(fn, BatchFactor):
            return fn.arrays(domain)
        pair = self.pair
        pairs = [pair(fn, v) for v in domain]
        try:  # one conversion of the (numerator, denominator) pairs; denominators are positive
            a = np.array(pairs, dtype=np.int64).reshape(-1, 2)
            if a.max(initial=0) < INT_SAFE and a.min(initial=0) > -INT_SAFE:
                num, den = a.T.copy()
                return num, den
        except OverflowError:
            pass
        return np.array([n for n, _ in pairs], dtype=object), np.array(
            [d for _, d in pairs], dtype=object
        )
