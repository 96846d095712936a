"""Layout rows kept across requests (`cache.rows`), bounded in the bytes their memos hold.

A Rows' memo (`costmodel.point.Rows.memo`) fills as a request is planned over the rows: the
terms' start tables, their integer forms (`costmodel.terms.int_starts_many`), the bounds' stacked
sums (`cpsat.bounds.stack_sums`), per-row quantities. Kept rows get a `RowsMemo`, which marks
itself grown when stored into; `count()` (each call of the cache: a plan's first is its tables'
memo) weighs what the grown memos hold since (`weigh`) and drops the least recently used rows
past MAX_ROW_BYTES (set by `cache.configure`). Rows dropped lose their memo at once, even while
a kept search space still refers to them (`Space.rows`): its rows compute again, and are kept
again once their memo grows.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from contextlib import suppress
from itertools import islice
from operator import attrgetter
from typing import Any

import numpy as np

from meshplan.solver.costmodel.point import Rows

MAX_ROW_BYTES = 128 * 2**20  # set by cache.configure (its share of the caches' bound)
_lock = threading.Lock()
_rows: OrderedDict[tuple, Rows] = OrderedDict()  # least recently used first, under _lock
_rows_bytes = 0

ENTRY_BYTES = 160  # a memo's entry besides its value: the key (a tuple) and the dict's slot
SCALAR_BYTES = 32  # a value that is neither an array nor a container (a float, an object shared)


def weigh(value: Any, seen: set[int]) -> int:
    """The bytes a memo's value holds: its arrays' (`_weigh_array`), its containers' (tuples,
    lists, dicts: a Sums, a per-row quantity with its context), and SCALAR_BYTES for anything
    else (what it refers to is shared, e.g. a request's context). `seen`: the ids of the arrays
    counted already, which count nothing again."""
    if isinstance(value, np.ndarray):
        return _weigh_array(value, seen)
    if isinstance(value, (tuple, list)):
        n = 56 + 8 * len(value)
        for v in value:
            n += _weigh_array(v, seen) if type(v) is np.ndarray else weigh(v, seen)
        return n
    if isinstance(value, dict):
        n = 64 + ENTRY_BYTES * len(value)
        for v in value.values():
            n += weigh(v, seen)
        return n
    return SCALAR_BYTES


_OBJECT = np.dtype(object)


def _weigh_array(value: np.ndarray, seen: set[int]) -> int:
    """The bytes of the array that owns `value`'s memory (numpy points a view's `base` at it):
    counted once, however many of its views a memo keeps (the rows of one start table, a
    scalar broadcast over the rows); Python objects in an object array at SCALAR_BYTES each.
    A memo keeps the arrays it counted alive, so their ids stay theirs."""
    base = value.base
    if type(base) is not np.ndarray:  # owns its memory (or a buffer's)
        base = value
    if id(base) in seen:
        return 0
    seen.add(id(base))
    n = base.nbytes + 112
    return n + SCALAR_BYTES * base.size if base.dtype is _OBJECT else n


class RowsMemo(dict):
    """The memo of rows kept in the cache (`Rows.memo`): what is stored into it is weighed
    (`weigh`) and counted against MAX_ROW_BYTES, as the start tables, sums and per-row
    quantities are computed in use. A store only marks the memo grown (a plan stores a few
    hundred entries); the entries added since it was last counted are weighed together at the
    cache's next call (`count`: each plan's first is its tables' memo). Reads are a
    dict's."""

    __slots__ = ("key", "rows", "base", "nbytes", "seen", "counted")

    def __init__(self, key: tuple, rows: Rows, base: int) -> None:
        super().__init__()
        self.key = key
        self.rows = weakref.ref(rows)  # the rows whose memo this is (a weak reference: no cycle)
        self.base = base  # the rows' own arrays
        self.nbytes = base  # and what the memo holds
        self.seen: set[int] = set()  # the arrays counted (`weigh`)
        self.counted = 0  # entries weighed (the first ones: a dict keeps its order)

    def __setitem__(self, k: object, v: object) -> None:
        dict.__setitem__(self, k, v)
        _grown[id(self)] = self

    def update(self, *args: Any, **kwargs: Any) -> None:
        dict.update(self, *args, **kwargs)
        _grown[id(self)] = self

    def __reduce__(self) -> tuple:  # pickled (a Rows sent to another process) as a plain dict
        return (dict, (dict(self),))


_grown: dict[int, RowsMemo] = {}  # memos stored into since they were counted, by id


def count() -> None:
    """Weigh what the grown memos hold since they were counted, and count it (`_grew`)."""
    while _grown:
        try:
            _, memo = _grown.popitem()
        except KeyError:  # emptied by another thread
            return
        try:
            new = list(islice(memo.values(), memo.counted, None))
        except RuntimeError:  # stored into by another thread meanwhile: counted next time
            _grown[id(memo)] = memo
            return
        memo.counted += len(new)
        if new:
            _grew(memo, ENTRY_BYTES * len(new) + _weigh_many(new, memo.seen))


_NBYTES = attrgetter("nbytes")


def _weigh_many(values: list, seen: set[int]) -> int:
    """`weigh` of each value, summed; the arrays among them (most of a memo's entries) by their
    own bytes, without looking for their bases (a few hundred a plan: summed in C): a view or a
    broadcast counts as much as a copy, never less than it holds."""
    ndarray = np.ndarray
    arrays = [v for v in values if type(v) is ndarray]
    n = sum(map(_NBYTES, arrays)) + 112 * len(arrays)
    if len(arrays) < len(values):
        for v in values:
            t = type(v)
            if t is tuple:  # a per-row quantity: (its context, its arrays), or several arrays
                n += 56 + 8 * len(v)
                for x in v:
                    tx = type(x)
                    if tx is ndarray:
                        n += x.nbytes + 112
                    elif isinstance(x, (tuple, list, dict, ndarray)):
                        n += weigh(x, seen)
                    else:
                        n += SCALAR_BYTES
            elif t is not ndarray:
                n += weigh(v, seen)
    return n


def _keep(key: tuple, r: Rows) -> Rows:
    """Keep rows `r` under `key` with a fresh counting memo (under the lock): its arrays weighed
    now, its memo as it grows."""
    global _rows_bytes
    base = sum(a.nbytes for a in (r.tp, r.pp, r.cp, r.dp, r.gpus, r.sp)) + 6 * 112
    r.memo = RowsMemo(key, r, base)
    _rows[key] = r
    _rows_bytes += base
    _drop(key)
    return r


def _drop(keep: tuple) -> None:
    """Drop the least recently used rows past MAX_ROW_BYTES, all but `keep` (under the lock):
    each loses its memo, so that a space still holding it frees its tables too."""
    global _rows_bytes
    while _rows_bytes > MAX_ROW_BYTES and len(_rows) > 1:
        key, old = next(iter(_rows.items()))
        if key == keep:
            _rows.move_to_end(key)
            continue
        del _rows[key]
        _rows_bytes -= old.memo.nbytes
        old.memo = RowsMemo(key, old, old.memo.base)


def _grew(memo: RowsMemo, nbytes: int) -> None:
    """`memo` holds `nbytes` more: count them; rows whose memo grows while dropped are kept
    again (in use); drop the least recently used past MAX_ROW_BYTES."""
    global _rows_bytes
    with _lock:
        memo.nbytes += nbytes
        r = memo.rows()
        if r is None or r.memo is not memo:
            return  # a memo dropped with its rows, still in use by a call: not kept
        kept = _rows.get(memo.key)
        if kept is r:
            _rows_bytes += nbytes
            _rows.move_to_end(memo.key)
        else:
            if kept is not None:  # other rows under that key: this one, in use, wins
                _rows_bytes -= kept.memo.nbytes
                kept.memo = RowsMemo(memo.key, kept, kept.memo.base)
            _rows[memo.key] = r
            _rows_bytes += memo.nbytes
        _drop(memo.key)


def get(key: tuple, make: Callable[[], Rows]) -> Rows:
    """The rows kept under `key`, or make() kept there (made outside the lock)."""
    count()
    with _lock:
        got = _rows.get(key)
        if got is not None:
            _rows.move_to_end(key)
            return got
    made = make()
    with _lock:
        got = _rows.get(key)
        if got is not None:  # another thread made them first
            _rows.move_to_end(key)
            return got
        return _keep(key, made)


def touch(key: tuple) -> None:
    """The rows under `key` (if kept) are in use: the most recently used."""
    count()
    with _lock, suppress(KeyError):
        _rows.move_to_end(key)


def clear() -> None:
    """Drop every rows (those still held elsewhere, by a space, lose their memo)."""
    global _rows_bytes
    with _lock:
        for key, r in _rows.items():
            r.memo = RowsMemo(key, r, r.memo.base)
        _rows.clear()
        _rows_bytes = 0
        _grown.clear()


def sizes() -> dict[str, int]:
    """Row sets kept, their layout rows, and the bytes counted."""
    count()
    with _lock:
        return {
            "row_sets": len(_rows),
            "rows": sum(len(r) for r in _rows.values()),
            "row_bytes": _rows_bytes,
        }
