"""Reuse across requests: cost models and their start tables, kept in bounded LRUs.

A `CostModel` depends only on the model, the GPU and the cluster's size and links, the
framework and the training fields that change its terms (sequence length, precision, the
recipe's switches, the overlaps and kernels; not the global batch, its cap or the run's
tokens), the memory reserve and fragmentation, and the efficiency constants. Its terms, grouped
into its sums (`costmodel.model.Grouped`), do not depend on the GPU count either (only its unit
of time does): the cost models of one request at several counts share them (`grouped`). The
start tables of its terms over a set of layout rows (`Rows`, whose memo holds them) depend on
nothing else. So a sweep over batch sizes or pins, or a scheduler asking many variants of one
job on one cluster, builds them once.

Bounds: `MAX_MODELS` cost models (each small: the one-row tables of at most
`costmodel.model.ONE_ROW_CACHE` single layouts), `MAX_GROUPED` groupings of terms, and rows whose
memos (the start tables, the stacked sums of the bounds, per-row quantities) weigh at most
`rowmemo.MAX_ROW_BYTES` in all, weighed as they grow in use (`rowmemo`), as `grew` does for the
tables; rows dropped lose their memo even while a kept space holds them. The least recently used
go first. `configure(total)` sets the bounds in bytes of the rows, tables, spaces and grids
together (the server's `solver_cache_bytes`).

The tables and bounds of one search space (`cpsat.tables.Tables`: which axis values agree with
which rows, the factors, the coarse, shape and fine bounds) depend on the rows and the space's
domains as well, so a request that repeats a space (its pins, batch and options aside from the
time limit, workers, gap and alternatives) computes none of them again: `tables_memo`, at most
`MAX_TABLE_BYTES` in all; the space itself (its layouts and domains) and the greedy recipe's
point over it are kept too (`space`, at most `MAX_SPACE_BYTES`, weighed by their layouts). The layouts and axis values a space
starts from (`space.Grid`) depend only on the model, the framework, sequence length, precision,
pins, the GPUs per node and count and the batch, not on the GPU type's speeds or memory nor on
the cost model: spaces that share those share them (`grid`, at most `MAX_GRID_BYTES`). Whether a
request fits on k GPUs (what the explanation's search for the smallest cluster asks, count after
count) depends on the request less its GPU count, so requests for one job at several counts
share the answers (`fits_by_count`, at most `MAX_FIT_KEYS` such requests). `clear()` empties
every cache; `info()` reports their sizes. The caches are per process and thread-safe; all but
the rows (`rowmemo`) and the tables' memos (whose weight grows in use: `grew`) are cachetools'
LRU caches.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import replace
from typing import TypeVar

from cachetools import LRUCache

from meshplan.solver import rowmemo
from meshplan.solver.arch import Arch
from meshplan.solver.costmodel import CostModel, Layout
from meshplan.solver.costmodel import model as costmodel
from meshplan.solver.costmodel.constants import Constants
from meshplan.solver.costmodel.point import Rows
from meshplan.solver.hardware import Hardware
from meshplan.solver.schema import SearchSpec, TrainingSpec

T = TypeVar("T")

MAX_MODELS = 64
# Groupings of terms: one per (model, GPU type, training fields), shared by every GPU count. The
# distinct mix (benchmarks.suite.distinct_requests) holds 200 such families at 12 counts each,
# shuffled: with 64 kept, 855 of its first 1,200 requests grouped their terms (and computed their
# factors' fractions) afresh; with 256, 200, once per family. What a grouping holds is mostly
# held as well by the spaces and rows that read it (dropping 194 of them freed 0.1 MB).
MAX_GROUPED = 256
# The bounds in bytes of one process's rows, tables, spaces and grids: DEFAULT_BYTES in all, split
# by SHARES (`configure` sets them from another total). Measured on the distinct mix's first 600
# requests in one process: the rows' memos held ~220 MiB when bounded by 65,536 rows (the stacked
# sums, `cpsat/bounds.py` stack_sums, ~100 KB a space; the integer start tables of
# `costmodel/terms.py` int_starts_many), the tables' 35 MiB, the spaces' and grids' ~80 MiB.
DEFAULT_BYTES = 512 * 2**20
SHARES = {"rows": 0.25, "tables": 0.25, "spaces": 0.375, "grids": 0.125}
MAX_TABLE_BYTES = int(DEFAULT_BYTES * SHARES["tables"])
MAX_SPACES = 64
# A space weighs what its layouts hold once planned over (1.75 KB a layout, measured: 38 spaces
# of 200,564 layouts freed 351 MB; those of a 1,048,576-GPU request hold ~10,500 layouts each):
# kept within MAX_SPACE_BYTES, so a query over many large clusters cannot grow a worker without
# bound (64 such spaces held ~0.6 GB).
SPACE_LAYOUT_BYTES = 2048
SPACE_BASE_BYTES = 64 * 2**10
MAX_SPACE_BYTES = int(DEFAULT_BYTES * SHARES["spaces"])
# A grid's layouts and the lists derived from them, and its base (upper bounds: the grids of
# the distinct mix's first 400 requests, 314 of 40,880 layouts, held 15.4 MB, 396 bytes a layout
# with the base; these weigh them 22 MB). With the whole mix's ~600 grids within MAX_GRID_BYTES,
# the four GPU types of each (model, sequence, count) read one grid.
GRID_LAYOUT_BYTES = 512
GRID_BASE_BYTES = 4 * 2**10
MAX_GRID_BYTES = int(DEFAULT_BYTES * SHARES["grids"])
MAX_FIT_KEYS = 1024  # each ~3.5 KiB at most (two JSON keys, up to ~60 counts): ~3.5 MiB
# Training fields that do not change the cost model's terms (they shape the search space).
BATCH_FIELDS = ("global_batch_tokens", "critical_batch_tokens", "train_tokens")


def _space_bytes(space: object) -> int:
    layouts = len(getattr(space, "all_layouts", ())) or len(getattr(space, "layouts", ()))
    return SPACE_BASE_BYTES + SPACE_LAYOUT_BYTES * layouts


def _grid_bytes(grid: object) -> int:
    return GRID_BASE_BYTES + GRID_LAYOUT_BYTES * len(getattr(grid, "layouts", ()))


_lock = threading.Lock()
# cachetools' LRU caches (bounded in entries, or in bytes through getsizeof), under _lock
_models: LRUCache[tuple, CostModel] = LRUCache(MAX_MODELS)
_grouped: LRUCache[tuple, costmodel.Grouped] = LRUCache(MAX_GROUPED)
# the rows: rowmemo (bounded by the bytes their memos hold, weighed as they grow)
_tables: OrderedDict[tuple, Memo] = OrderedDict()  # bounded by `grew` (its memos grow in use)
_spaces: LRUCache[tuple, object] = LRUCache(MAX_SPACE_BYTES, getsizeof=_space_bytes)
_grids: LRUCache[tuple, object] = LRUCache(MAX_GRID_BYTES, getsizeof=_grid_bytes)
_fits: LRUCache[tuple, dict[int, bool]] = LRUCache(MAX_FIT_KEYS)
_tables_bytes = 0


def configure(total_bytes: int) -> None:
    """Bound this process's rows, tables, spaces and grids to `total_bytes` together (split by
    SHARES); empties every cache."""
    global MAX_TABLE_BYTES, MAX_SPACE_BYTES, MAX_GRID_BYTES, _spaces, _grids
    if total_bytes < 1:
        raise ValueError(f"the caches' bound must be at least 1 byte, not {total_bytes}")
    with _lock:
        rowmemo.MAX_ROW_BYTES = max(1, int(total_bytes * SHARES["rows"]))
        MAX_TABLE_BYTES = max(1, int(total_bytes * SHARES["tables"]))
        MAX_SPACE_BYTES = max(1, int(total_bytes * SHARES["spaces"]))
        MAX_GRID_BYTES = max(1, int(total_bytes * SHARES["grids"]))
        _spaces = LRUCache(MAX_SPACE_BYTES, getsizeof=_space_bytes)
        _grids = LRUCache(MAX_GRID_BYTES, getsizeof=_grid_bytes)
    clear()


def bounds() -> dict[str, int]:
    """The bounds in bytes of this process's rows, tables, spaces and grids (`configure`)."""
    return {
        "rows": rowmemo.MAX_ROW_BYTES,
        "tables": MAX_TABLE_BYTES,
        "spaces": MAX_SPACE_BYTES,
        "grids": MAX_GRID_BYTES,
    }


class Key(tuple):
    """A cache key that hashes once: a tuple of a space's layouts (frozen dataclasses, each
    hashed in Python) would hash them all again at every lookup, store and `grew`."""

    def __new__(cls, *parts: object) -> Key:
        self = super().__new__(cls, parts)
        self._hash = tuple.__hash__(self)
        return self

    def __hash__(self) -> int:
        return self._hash


_LAYOUT_TUPLES = 8  # layout lists whose tuple (hashed once) is kept, by the list's identity
_tuples: OrderedDict[int, tuple[Sequence[Layout], int, Key]] = OrderedDict()


def _layouts_key(layouts: Sequence[Layout]) -> Key:
    """tuple(layouts), hashed once, kept for the last few lists (a space's `layouts`, which the
    rows and the tables' memo are both keyed by; a list is not changed once made, and kept with
    its length so that its id stays unique)."""
    with _lock:
        got = _tuples.get(id(layouts))
        if got is not None and got[0] is layouts and got[1] == len(layouts):
            return got[2]
        key = Key(*layouts)
        _tuples[id(layouts)] = (layouts, len(layouts), key)
        while len(_tuples) > _LAYOUT_TUPLES:
            _tuples.popitem(last=False)
        return key


class Memo(dict):
    """What the tables of one space computed (by name), and the bytes of its arrays so far."""

    def __init__(self, key: tuple | None = None) -> None:
        super().__init__()
        self.key = key  # None: not kept across requests
        self.nbytes = 0


def model_key(
    A: Arch, H: Hardware, training: TrainingSpec, search: SearchSpec, constants: Constants
) -> tuple:
    """What a cost model depends on, as a hashable key."""
    return (A, H, *_key_rest(training, search, constants))


def _key_rest(training: TrainingSpec, search: SearchSpec, constants: Constants) -> tuple:
    """model_key less the model and the GPU (shared by the keys of one request's cost model
    and of its terms at every count)."""
    terms = training.model_dump(exclude=set(BATCH_FIELDS))
    return (
        tuple(sorted((k, str(v)) for k, v in terms.items())),
        search.memory_reserve_gib,
        search.memory_fragmentation,
        _repr(constants),
    )


_reprs: dict[int, tuple[Constants, str]] = {}  # id -> (constants, repr): a few objects at most


def _repr(constants: Constants) -> str:
    """repr(constants), kept by identity (Constants is frozen; every default CostModel shares
    one object, whose repr costs tens of microseconds)."""
    got = _reprs.get(id(constants))
    if got is None or got[0] is not constants:
        if len(_reprs) >= 16:
            _reprs.clear()
        got = _reprs[id(constants)] = (constants, repr(constants))
    return got[1]


def _built_once(store: LRUCache, key: tuple, build: Callable[[], T]) -> T:
    """store[key], built (outside the lock) when missing; the store's bound drops the least
    recently used (a value heavier than the whole bound is used, not kept). Two threads may
    both build: the first stored wins."""
    with _lock:
        got = store.get(key)
        if got is not None:
            return got
    got = build()
    with _lock:
        kept = store.get(key)
        if kept is not None:
            return kept
        with suppress(ValueError):  # too large to keep
            store[key] = got
    return got


def cost_model(A: Arch, H: Hardware, training: TrainingSpec, search: SearchSpec) -> CostModel:
    """The request's cost model (with the constants every CostModel loads), built once; its
    terms, grouped, are shared with the request at other GPU counts (`grouped`)."""
    constants = costmodel.load_constants()
    rest = _key_rest(training, search, constants)
    key = (A, H, *rest)

    def build() -> CostModel:
        g = grouped(A, H, training, search, constants, rest)
        cm = CostModel(A, H, training, search, constants, grouped=g)
        cm.cache_key = Key(*key)  # hashed once: every key of its rows and tables starts with it
        return cm

    return _built_once(_models, key, build)


def grouped(
    A: Arch,
    H: Hardware,
    training: TrainingSpec,
    search: SearchSpec,
    constants: Constants,
    rest: tuple | None = None,
) -> costmodel.Grouped:
    """The terms of the request grouped into the cost model's sums, built once for every GPU
    count: over a context whose count is 0, as no term reads it (only the unit of time does,
    which the CostModel sets). `rest`: `_key_rest` of the same arguments, when known."""
    free = replace(H, num_gpus=0)
    key = (A, free, *(rest or _key_rest(training, search, constants)))

    def build() -> costmodel.Grouped:
        return costmodel.Grouped.of(costmodel.context(A, free, training, search, constants))

    return _built_once(_grouped, key, build)


def space(cm: CostModel, key: tuple, build: Callable[[], T]) -> T:
    """The search space of a request (`Space.build`, a pure function of the cost model and the
    request's training and search fields, which `key` must name), built once: a repeated request
    does not enumerate its layouts again. A cost model built outside the cache: built afresh."""
    base = getattr(cm, "cache_key", None)
    if base is None:
        return build()
    return _built_once(_spaces, (base, *key), build)


def grid(key: tuple, build: Callable[[], T]) -> T:
    """The layouts and axis values a space starts from (`space.Space._grid`), built once per
    `key` (`Space.grid_key`, which must name everything the build reads)."""
    return _built_once(_grids, key, build)


def fits_by_count(
    cm: CostModel,
    training: TrainingSpec,
    search: SearchSpec,
    jsons: tuple[str, str] | None = None,
) -> dict[int, bool]:
    """Whether the request fits on k GPUs, by k, as far as known: shared by the requests that
    differ from it only in cluster.num_gpus (and search.allow_fewer_gpus, which the search for
    the smallest cluster sets off). The cost model's memory, all the answer reads of it, does
    not depend on the GPU count. A cost model built outside the cache: a fresh dict. `jsons`:
    the training's and the search's model_dump_json, when known."""
    base = getattr(cm, "cache_key", None)
    if base is None:
        return {}
    A, H, *rest = base
    t_json, s_json = jsons or (training.model_dump_json(), None)
    if s_json is None or search.allow_fewer_gpus:
        s_json = search.model_copy(update={"allow_fewer_gpus": False}).model_dump_json()
    key = (A, replace(H, num_gpus=0), *rest, t_json, s_json)
    return _built_once(_fits, key, dict)


def rows(cm: CostModel, layouts: Sequence[Layout]) -> Rows:
    """The rows of these layouts, with the start tables already computed over them for this
    cost model (a cost model built outside the cache gets fresh rows)."""
    base = getattr(cm, "cache_key", None)
    if base is None:
        return Rows.of(layouts)
    return rowmemo.get(Key(base, _layouts_key(layouts)), lambda: Rows.of(layouts))


# What `cpsat.tables.Tables._classes` puts in a memo (which axis values agree with which rows:
# "pos" last, once the rest is there) depends on the rows, the axis domains, the framework and
# the precision alone (the ZeRO stages a row runs), not on the cost model: a new memo starts
# with those of another cost model's memo over the same rows (the same model on GPU types with
# as many GPUs per node), and the empty dicts `_classes` starts the rest with.
CLASS_ENTRIES = ("cls", "members", "flat", "z_ok")
EMPTY_ENTRIES = ("fmat", "by_db", "fine", "scores")
MAX_CLASS_SOURCES = 4 * MAX_SPACES  # each a few arrays over the rows: a few KiB
# per (rows, domains, framework, precision): the class entries, or a memo that computes them
_class_sources: OrderedDict[tuple, dict | weakref.ref] = OrderedDict()


def tables_memo(cm: CostModel, layouts: Sequence[Layout], domains: tuple) -> Memo:
    """The memo of the tables over these rows with these axis domains (a cost model built
    outside the cache gets a fresh one); a new one holds the classes of rows already computed
    over the same rows and domains under another cost model (CLASS_ENTRIES)."""
    base = getattr(cm, "cache_key", None)
    if base is None:
        return Memo()
    lays = _layouts_key(layouts)
    key = Key(base, lays, domains)
    rowmemo.touch(Key(base, lays))  # the space's rows are in use too (a space kept holds them)
    with _lock:
        got = _tables.get(key)
        if got is None:
            got = _tables[key] = Memo(key)
            t = cm.training
            _seed(got, Key(lays, domains, t.framework, t.precision))
        _tables.move_to_end(key)
        return got


def _seed(memo: Memo, key: Key) -> None:
    """Start a new memo with the classes of rows of a memo of the same rows and domains (the
    arrays are shared: the tables only read them), or make it the source for the next (under
    the lock)."""
    src = _class_sources.get(key)
    if isinstance(src, weakref.ref):  # the classes only (not the memo's bounds), once computed
        m = src()
        src = None if m is None or "pos" not in m else _class_entries(m)
    if src is None:
        _class_sources[key] = weakref.ref(memo)  # its tables compute the classes next
        while len(_class_sources) > MAX_CLASS_SOURCES:
            _class_sources.popitem(last=False)
        return
    _class_sources[key] = src
    _class_sources.move_to_end(key)
    memo.update({k: v for k, v in src.items() if k != "pos"})
    memo.update({k: {} for k in EMPTY_ENTRIES})
    memo["pos"] = src["pos"]  # last, as Tables._classes: the memo is complete


def _class_entries(memo: Memo) -> dict:
    """The entries of a memo that depend on its rows and domains alone (CLASS_ENTRIES, "pos"
    and the domains as arrays)."""
    out = {k: memo[k] for k in (*CLASS_ENTRIES, "pos")}
    out.update({k: v for k, v in memo.items() if isinstance(k, tuple) and k[0] == "dom"})
    return out


def grew(memo: Memo, nbytes: int) -> None:
    """The memo holds `nbytes` more: count them, and drop the least recently used memos past
    MAX_TABLE_BYTES (one in use still works, it is only not kept)."""
    global _tables_bytes
    rowmemo.count()  # the rows' memos grew with these tables
    with _lock:
        memo.nbytes += nbytes
        if memo.key is None or _tables.get(memo.key) is not memo:
            return
        _tables_bytes += nbytes
        while _tables_bytes > MAX_TABLE_BYTES and len(_tables) > 1:
            _, old = _tables.popitem(last=False)
            _tables_bytes -= old.nbytes


def clear() -> None:
    """Forget every cost model, start table and space's tables."""
    global _tables_bytes
    rowmemo.clear()
    with _lock:
        _models.clear()
        _grouped.clear()
        _tables.clear()
        _spaces.clear()
        _grids.clear()
        _fits.clear()
        _tuples.clear()
        _class_sources.clear()
        _tables_bytes = 0


def info() -> dict[str, int]:
    """The caches' sizes: cost models, their grouped terms, row sets, layout rows and their
    memos' bytes, spaces' tables and their bytes, spaces, grids, requests (less their GPU count)
    with counts known to fit or not, and those counts."""
    rows_info = rowmemo.sizes()
    with _lock:
        return {
            "models": len(_models),
            "grouped": len(_grouped),
            **rows_info,
            "tables": len(_tables),
            "spaces": len(_spaces),
            "grids": len(_grids),
            "space_bytes": int(_spaces.currsize),
            "grid_bytes": int(_grids.currsize),
            "table_bytes": _tables_bytes,
            "fit_requests": len(_fits),
            "fit_counts": sum(len(v) for v in _fits.values()),
        }
