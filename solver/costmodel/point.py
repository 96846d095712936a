"""A configuration as the values of the solver's axes.

The CP-SAT model chooses one value per axis: `lay` (tp, pp, cp, dp, gpus, sp: a factorisation of
the GPU count), `pv` (pp, virtual stages), `db` (dp, micro-batch size, micro-batch count), `te`
(tp, ep, etp: the expert group), `r` (recomputation) and `z` (ZeRO stage). Composite axes share
a component with `lay` and are channelled to it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from meshplan.solver.record import record
from meshplan.solver.schema import ParallelConfig, Recompute

ROW_FIELDS = ("tp", "pp", "cp", "dp", "gpus", "sp")


@dataclass(frozen=True, order=True)
class Layout:
    tp: int
    pp: int
    cp: int
    dp: int
    gpus: int
    sp: bool


@record(eq=False)
class Rows:
    """Layout rows as arrays, one entry per row (a struct of arrays): what every term's start is
    evaluated over, all rows at once. A single Layout evaluates as a one-row Rows, so the float
    evaluator, the integer tables and the oracle compute each start by the same array code.
    `memo` holds what has been computed over these rows (Rates' per-row quantities, the terms'
    starts), so each is computed once."""

    tp: np.ndarray  # int64
    pp: np.ndarray
    cp: np.ndarray
    dp: np.ndarray
    gpus: np.ndarray
    sp: np.ndarray  # bool
    memo: dict = field(default_factory=dict, repr=False)

    @staticmethod
    def of(layouts: Iterable[Layout]) -> Rows:
        cols = list(zip(*((r.tp, r.pp, r.cp, r.dp, r.gpus, r.sp) for r in layouts), strict=True))
        if not cols:
            cols = [()] * len(ROW_FIELDS)
        ints = [np.array(c, dtype=np.int64) for c in cols[:5]]
        return Rows(*ints, np.array(cols[5], dtype=bool))

    @staticmethod
    def one(lay: Layout) -> Rows:
        return Rows.of((lay,))

    def __len__(self) -> int:
        return len(self.tp)

    def layout(self, i: int) -> Layout:
        return Layout(
            int(self.tp[i]),
            int(self.pp[i]),
            int(self.cp[i]),
            int(self.dp[i]),
            int(self.gpus[i]),
            bool(self.sp[i]),
        )

    def layouts(self) -> list[Layout]:
        cols = [c.tolist() for c in (self.tp, self.pp, self.cp, self.dp, self.gpus, self.sp)]
        return [Layout(*x) for x in zip(*cols, strict=True)]

    def take(self, idx: np.ndarray) -> Rows:
        """The rows at these positions (a new table: nothing computed yet)."""
        return Rows(*(getattr(self, f)[idx] for f in ROW_FIELDS))


LayoutOrRows = Rows | Layout  # what a start or a per-row quantity is computed over


@dataclass(frozen=True)
class Point:
    lay: Layout
    v: int
    b: int
    M: int
    ep: int
    etp: int
    r: Recompute
    z: int

    def axis(self, name: str) -> object:
        """The value of one axis, as the term tables are keyed."""
        if name == "pv":
            return (self.lay.pp, self.v)
        if name == "db":
            return (self.lay.dp, self.b, self.M)
        if name == "te":
            return (self.lay.tp, self.ep, self.etp)
        if name == "r":
            return self.r
        if name == "z":
            return self.z
        raise KeyError(name)

    def axes(self) -> dict[str, object]:
        """`axis(name)` of every name at once (for reading many terms at one point)."""
        lay = self.lay
        return {
            "pv": (lay.pp, self.v),
            "db": (lay.dp, self.b, self.M),
            "te": (lay.tp, self.ep, self.etp),
            "r": self.r,
            "z": self.z,
        }

    def config(self) -> ParallelConfig:
        return ParallelConfig(
            tp=self.lay.tp,
            pp=self.lay.pp,
            dp=self.lay.dp,
            cp=self.lay.cp,
            ep=self.ep,
            etp=self.etp,
            virtual_stages=self.v,
            micro_batch_size=self.b,
            num_microbatches=self.M,
            zero_stage=self.z,
            recompute=self.r,
            sequence_parallel=self.lay.sp,
        )

    @staticmethod
    def from_config(c: ParallelConfig) -> Point:
        sp = c.sequence_parallel and c.tp > 1
        lay = Layout(c.tp, c.pp, c.cp, c.dp, c.tp * c.pp * c.cp * c.dp, sp)
        return Point(
            lay,
            c.virtual_stages,
            c.micro_batch_size,
            c.num_microbatches,
            c.ep,
            c.etp if c.etp is not None else c.tp,
            c.recompute,
            c.zero_stage,
        )


def pick(cond, a, b):  # noqa: ANN001, ANN201
    """`a if cond else b`, row by row when cond is an array of rows."""
    return np.where(cond, a, b) if isinstance(cond, np.ndarray) else (a if cond else b)


def maximum(a, b):  # noqa: ANN001, ANN201
    """max(a, b), row by row over arrays (the same IEEE value either way)."""
    return np.maximum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else max(a, b)


def minimum(a, b):  # noqa: ANN001, ANN201
    """min(a, b), row by row over arrays (the same IEEE value either way)."""
    return np.minimum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else min(a, b)


_BROADCAST: dict[tuple[str, int], np.ndarray] = {}  # (float.hex(), n) -> read-only array


def full(x: object, n: int) -> np.ndarray:
    """A start or per-row quantity as a float array over n rows (a scalar is the same for all;
    a Python float's read-only broadcast is kept, by its bits: a few constants recur)."""
    if type(x) is float:
        k = (x.hex(), n)
        got = _BROADCAST.get(k)
        if got is None:
            if len(_BROADCAST) >= 1024:
                _BROADCAST.clear()
            got = _BROADCAST[k] = np.broadcast_to(np.float64(x), (n,))
        return got
    a = np.asarray(x, dtype=np.float64)
    return a if a.shape == (n,) else np.broadcast_to(a, (n,))


def per_rows(fn: Callable[..., Any], c: object, lay: LayoutOrRows, *args: object) -> Any:
    """fn(c, lay, *args), a per-row quantity of a request's context (or rates) `c`: over `Rows`
    computed once and kept in their memo (by fn, c's id and args; c is kept with the value, so
    its id stays unique), over a single Layout computed each time. Callers must not modify it."""
    if isinstance(lay, Layout):
        return fn(c, lay, *args)
    k = (fn, id(c), args)  # three entries: not taken for a group's (four: `Group.int_starts`)
    got = lay.memo.get(k)
    if got is None or got[0] is not c:
        got = lay.memo[k] = (c, fn(c, lay, *args))
    return got[1]


def column(fn: Callable[..., Any], lay: LayoutOrRows, *args: object) -> Any:
    """fn(lay, *args), a quantity of the rows alone (no request's context, e.g. dp·cp): over
    `Rows` computed once and kept in their memo (by fn and args; fn a module-level function),
    over a single Layout computed each time. Callers must not modify it."""
    if isinstance(lay, Layout):
        return fn(lay, *args)
    k = (fn, args)
    got = lay.memo.get(k)
    if got is None:
        got = lay.memo[k] = fn(lay, *args)
    return got


def dp_cp(lay: LayoutOrRows) -> Any:
    """dp·cp of every row: the ZeRO shard group (kept per rows)."""
    return column(_dp_cp, lay)


def tp_dp_cp(lay: LayoutOrRows) -> Any:
    """tp·dp·cp of every row: what a sharded expert's state is split over (kept per rows)."""
    return column(_tp_dp_cp, lay)


def _dp_cp(lay: LayoutOrRows) -> Any:
    return lay.dp * lay.cp


def _tp_dp_cp(lay: LayoutOrRows) -> Any:
    return lay.tp * lay.dp * lay.cp


def rowwise(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A per-row quantity (a method of one argument, the rows): over `Rows`, computed once per
    Rows and kept in its memo. Over a single `Layout` the same code runs on Python numbers
    (`pick`, `maximum`, `minimum` choose the scalar form); every operation is exactly rounded,
    so a row computes the same bits alone as among others."""
    name = fn.__qualname__

    @functools.wraps(fn)
    def wrapper(self: object, lay: Rows | Layout) -> Any:
        if isinstance(lay, Layout):
            return fn(self, lay)
        key = (self, name)
        got = lay.memo.get(key)
        if got is None:
            out, n = fn(self, lay), len(lay)
            got = tuple(full(x, n) for x in out) if isinstance(out, tuple) else full(out, n)
            lay.memo[key] = got
        return got

    return wrapper
