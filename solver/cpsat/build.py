"""The CP-SAT model, one constraint family at a time: memory per stage, dp exposure, objective."""

from __future__ import annotations

import copy
import math
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from meshplan.solver import cache
from meshplan.solver.costmodel import Point
from meshplan.solver.costmodel.model import STAGES
from meshplan.solver.cpsat.chains import compiled_vars, group_var
from meshplan.solver.cpsat.tables import Tables
from meshplan.solver.cpsat.variables import Axes


class _Model(cp_model.CpModel):
    """A CpModel without the camelCase aliases OR-Tools 9.15 sets on every new model
    (`CpModel._add_pre_pep8_methods`, cp_model.py: ~1-2 ms per model, several models a plan);
    nothing here calls them."""

    def _add_pre_pep8_methods(self) -> None:
        pass


@dataclass
class Built:
    model: cp_model.CpModel
    axes: Axes
    objective: cp_model.LinearExpr


def add_memory(m: cp_model.CpModel, ax: Axes) -> None:
    """Each stage's tenants fit the usable HBM; of each pair only the smaller counts (min)."""
    cm = ax.tb.sp.cm
    for st in STAGES:
        mem = cm.memory[st]
        parts, _ = compiled_vars(m, ax, mem.base)
        for a, b in mem.pairs:
            (va, ha), (vb, hb) = group_var(m, ax, a, a.groups[0]), group_var(m, ax, b, b.groups[0])
            hi = max(ha, hb)
            pick = m.new_bool_var("pick_first")
            both = m.new_int_var(0, max(hi, 0), "min_pair")
            m.add(both == va).only_enforce_if(pick)
            m.add(both == vb).only_enforce_if(~pick)
            parts.append(both)
        m.add(sum(parts) <= cm.budget)


def add_dp_exposure(m: cp_model.CpModel, ax: Axes) -> cp_model.IntVar | int:
    """exposed >= comm(z) − credit(z) for the chosen ZeRO stage, and >= 0."""
    cm, zs = ax.tb.sp.cm, ax.tb.domain["z"]
    terms = []
    hi = 0
    for i in ax.values("z"):
        comm, credit = cm.dp[zs[i]]
        (cv, chi), (rv, _) = compiled_vars(m, ax, comm), compiled_vars(m, ax, credit)
        if chi == 0:
            continue
        hi = max(hi, chi)
        terms.append((ax.any_of("z", [i]), sum(cv) - sum(rv)))
    if not terms:
        return 0
    e = m.new_int_var(0, hi, "dp_exposed")
    for zb, expr in terms:
        c = m.add(e >= expr)
        if zb is not True:
            c.only_enforce_if(zb)
    return e


MODELS = 64  # models kept across every space's tables (each holds ~100 Python objects)
MODEL_BYTES = 256  # bytes counted per variable and constraint of a kept model (an estimate)
_order: OrderedDict[tuple[int, tuple], weakref.ref] = OrderedDict()  # kept models, oldest first
_lock = threading.Lock()


def build(
    tables: Tables,
    rows: Sequence[int],
    nogoods: tuple[Point, ...] = (),
    cap: float | None = None,
) -> Built:
    """The model over some layout rows of `tables` (positions in its space), excluding the given
    points (no-good cuts for alternatives). `cap`: the objective of a point known to fit; every
    (row, db, te, r, z) whose bound exceeds it is left out, and the objective kept below it.

    The model is a function of the space's tables and these arguments alone, so it is kept with
    the tables (`cache.tables_memo`; the last `MODELS` across every space): a search that repeats
    a round (a repeated request) gets a copy of the kept model instead of building it again.
    The bound is a count, not bytes: a model's Python objects (its variables) are what every
    full garbage collection walks."""
    key = (tuple(rows), nogoods, cap)
    memo = tables.memo
    kept: dict = memo.setdefault("models", {})
    got = kept.get(key)
    if got is None:
        got = _build(tables, rows, nogoods, cap)
        if memo.key is not None:  # a memo kept across requests (cache.tables_memo)
            kept[key] = got
            cache.grew(memo, _nbytes(got))
            _keep(memo, key)
    else:
        _keep(memo, key)
        tables.refine(list(rows), math.inf if cap is None else cap)  # as Axes() does
    return _copy(got, tables)


def _keep(memo: cache.Memo, key: tuple) -> None:
    """Mark the memo's model `key` most recently used; drop the least recently used past
    MODELS (from memos still alive: a dropped memo took its models with it)."""
    with _lock:
        k = (id(memo), key)
        _order.pop(k, None)
        _order[k] = weakref.ref(memo)
        while len(_order) > MODELS:
            (_, old), ref = _order.popitem(last=False)
            owner = ref()
            dropped = None if owner is None else owner.get("models", {}).pop(old, None)
            if dropped is not None:
                cache.grew(owner, -_nbytes(dropped))


def _nbytes(b: Built) -> int:
    """What a kept model counts in its memo's bytes (an estimate per variable and constraint)."""
    return MODEL_BYTES * (len(b.model.proto.variables) + len(b.model.proto.constraints))


def _copy(b: Built, tables: Tables) -> Built:
    """A copy of a built model to solve and hint (the kept one stays without hints): the same
    variables, which are indices into the model."""
    m = _Model()
    m.proto.copy_from(b.model.proto)
    m.rebuild_constant_map()
    ax = copy.copy(b.axes)
    ax.m, ax.tb = m, tables
    return Built(m, ax, b.objective)


def _build(
    tables: Tables, rows: Sequence[int], nogoods: tuple[Point, ...], cap: float | None
) -> Built:
    m = _Model()
    ax = Axes(m, tables, rows, cap)
    if not ax.k:  # nothing in these rows can fit (below the cap): an infeasible model
        m.add_bool_or([])
        return Built(m, ax, cp_model.LinearExpr.sum([]))
    add_memory(m, ax)
    obj = sum(compiled_vars(m, ax, tables.sp.cm.objective)[0]) + add_dp_exposure(m, ax)
    # Valid cuts: the objective is at least the chosen combination's bound (which is what lets
    # CP-SAT prove the optimum quickly), and at most the known point's.
    lbs = [int(x) for x in ax.lb.tolist()]
    m.add(obj >= cp_model.LinearExpr.weighted_sum(ax.combo, lbs))
    if cap is not None and math.isfinite(cap):
        m.add(obj <= int(cap))
    for p in nogoods:
        lits = ax.point_literals(p)
        if lits is not None:
            m.add(sum(lits) <= len(lits) - 1)
    m.minimize(obj)
    return Built(m, ax, obj)
