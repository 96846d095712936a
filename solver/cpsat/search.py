"""Row generation: CP-SAT over the most promising layout rows, proven against the rest.

Rows are taken in the order of their lower bounds (`bounds.py`: coarse for every row, fine for
the rows looked at). CP-SAT solves the model over the rows taken so far; its optimum v is the
global optimum once every row left out has a bound ≥ v (within the relative gap), since no point
of such a row can beat v. Otherwise the rows whose bound is below v join the model and it is
solved again. Alternatives repeat this with the earlier answers excluded by no-good cuts. Each
model stays small, and CP-SAT still proves the optimum over the rows it holds.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from dataclasses import field

import numpy as np

from meshplan.solver.costmodel import Point
from meshplan.solver.cpsat.exact import exact_round, held
from meshplan.solver.cpsat.solved import Solved
from meshplan.solver.cpsat.tables import Stopped, Tables
from meshplan.solver.record import record
from meshplan.solver.space import Space

FIRST_ROWS = 1  # rows in the first model; a model found infeasible doubles its rows
REFINE_BATCH = 32  # rows whose fine bounds are computed at once
FIRST_REFINE = 16  # rows refined first (the most promising one before the rest: Tables.lead)
GROW_MIN = 4  # rows a round adds at least, when rows below the optimum were left out
INF = float("inf")
ALT_MARGIN = 0.02  # an alternative is first looked for within 2% of the last answer
CAP_LIMIT = 1 << 60  # a cap raised past this is dropped


@record
class Found:
    """The outcome of the search: the best point and the alternatives, with the proof's figures."""

    status: str  # OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN
    points: list[Point] = field(default_factory=list)  # best first
    bound: float = 0.0  # proven lower bound on the best point's objective
    solve_time_s: float = 0.0  # time inside CP-SAT, all rounds
    rounds: int = 0  # CP-SAT solves
    num_variables: int = 0  # of the largest model solved
    num_constraints: int = 0
    num_rows: int = 0  # layout rows in the largest model solved


class _Rows:
    """Rows by bound: the coarse order of every row, the fine bounds of those looked at, and
    the rows in the model (positions in the space's layouts). A row not refined yet has a fine
    bound at least its coarse one."""

    def __init__(self, tables: Tables) -> None:
        self.tb = tables
        co = tables.coarse()
        order = np.argsort(co, kind="stable")
        self.todo: list[int] = order[: int(np.isfinite(co).sum())].tolist()
        self.pos = 0  # todo[pos:] are not refined yet
        self.ranked: list[tuple[float, int]] = []  # refined rows that can fit, by fine bound
        self.model: list[int] = []
        self.best_only = True  # no point found yet: rows above the cap cannot hold the best

    def _next_coarse(self) -> float:
        return float(self.tb.coarse()[self.todo[self.pos]]) if self.pos < len(self.todo) else INF

    def _refine(self, k: int, below: float = INF) -> None:
        """Refine the next k rows in coarse order, at most as many as are refined already (the
        first time only a few), and only those whose coarse bound is below `below` (at least
        one): the exact scores of each batch's best points (its most promising row's first,
        `Tables.lead`) lower the cap, and the cells above the cap need no fine bounds. While
        the best point is sought, nor do rows whose coarse bound exceeds the cap (a point known
        to fit costs that much): they are left for a later batch (the alternatives' search),
        if one is needed."""
        self.tb.check()
        k = min(k, max(FIRST_REFINE, self.pos))  # doubling: the cap tightens between batches
        batch = self.todo[self.pos : self.pos + k]
        ranks = self.tb.coarse()[batch]  # ascending: todo is in coarse order
        n = min(int(np.searchsorted(ranks, below)), self._admitted(ranks))
        batch = batch[: max(1, n)]  # the rest need no bounds
        self.tb.lead(batch)
        # the lead may have lowered the cap (its own row stays: its bound is at most the cap)
        batch = batch[: max(1, self._admitted(ranks))]
        self.pos += len(batch)
        self.tb.refine(batch)
        self.tb.improve_cap(batch)
        for r in batch:
            b = self.tb.bound(r)
            if b < INF:
                bisect.insort(self.ranked, (b, r))

    def _admitted(self, ranks: np.ndarray) -> int:
        """How many of these ascending coarse bounds the cap admits (all of them once the best
        point is found: alternatives may lie above it)."""
        if not self.best_only:
            return len(ranks)
        return int(np.searchsorted(ranks, self.tb.cap, side="right"))

    def _out(self) -> list[tuple[float, int]]:
        have = set(self.model)
        return [(b, r) for b, r in self.ranked if r not in have]

    def any_left(self) -> bool:
        return self.pos < len(self.todo) or bool(self._out())

    def add_best(self, n: int) -> None:
        """Add the n best rows left out of the model (by fine bound, refining as needed)."""
        while True:
            out = self._out()
            if len(out) >= n and out[n - 1][0] <= self._next_coarse():
                break
            if self.pos >= len(self.todo):
                break
            # rows whose coarse bound is at least the n-th best fine bound cannot be among the n
            self._refine(max(REFINE_BATCH, n), out[n - 1][0] if len(out) >= n else INF)
        self.model += [r for _, r in self._out()[:n]]

    def lower(self) -> float:
        """A lower bound on every row, in the model or not."""
        return min([self.tb.bound(r) for r in self.model] + [self.next_bound()])

    def next_bound(self) -> float:
        """A lower bound on every row left out of the model."""
        out = self._out()
        return min(out[0][0] if out else INF, self._next_coarse())

    def cover(self, value: float, gap: float) -> bool:
        """True if no row left out has a bound below value·(1 − gap); else add the best of
        them, at most as many as the model holds (a better optimum may rule out the rest)."""
        cut = value * (1 - gap)
        while self._next_coarse() < cut:
            self._refine(REFINE_BATCH, cut)
        add = [r for b, r in self._out() if b < cut]
        self.model += add[: max(len(self.model), GROW_MIN)]
        return not add


def search(
    tables: Tables,
    hint: Point | None,
    deadline: float,
    workers: int,
    gap: float,
    top_k: int,
    stop: threading.Event | None = None,
) -> Found:
    """The best point and up to `top_k` distinct alternatives, by row generation."""
    sp = tables.sp
    rows = _Rows(tables)
    known = None if hint is None else tables.score(hint)
    if known is not None:  # cells above a known point need no bounds
        tables.cap = min(tables.cap, known)
    try:
        rows.add_best(FIRST_ROWS)
    except Stopped:  # out of time (or stopped) before the first model
        return Found("UNKNOWN")
    out = Found("OPTIMAL" if rows.model else "INFEASIBLE")
    while rows.model and len(out.points) < 1 + top_k:
        try:
            res = _solve_one(sp, tables, rows, hint, deadline, workers, gap, stop, out)
        except Stopped as s:  # stopped between CP-SAT rounds: the best so far stands
            res = s.args[0] if s.args else Solved("UNKNOWN", None, 0.0, 0.0, 0.0)
        if res is None:  # no further point anywhere
            break
        if res.status not in ("OPTIMAL",):
            if not out.points:  # out of time on the best: report what CP-SAT had
                out.status = res.status
                if res.point is not None:
                    out.points.append(res.point)
                    out.bound = min(res.bound, rows.next_bound())
            break
        if not out.points:
            out.bound = min(res.bound, rows.next_bound())
        out.points.append(res.point)
        rows.best_only = False
        hint = None
    if not out.points and out.status == "OPTIMAL":
        out.status = "INFEASIBLE"
    return out


def _incumbent(tables: Tables, hint: Point | None, rows: _Rows) -> tuple[int, Point] | None:
    """The best fitting point known before the first model (the hint, or where the best row's
    fine bound is reached): its objective bounds the optimum from above."""
    cands = [hint, tables.best, tables.guess(rows.model[0])] if rows.model else [hint]
    best = None
    for p in cands:
        obj = None if p is None else tables.score(p)
        if obj is not None and (best is None or obj < best[0]):
            best = (obj, p)
    return best


def _solve_one(
    sp: Space,
    tables: Tables,
    rows: _Rows,
    hint: Point | None,
    deadline: float,
    workers: int,
    gap: float,
    stop: threading.Event | None,
    out: Found,
) -> Solved | None:
    """Solve over growing row sets until the answer is proven against the rows left out.

    A cap on the objective keeps each model small: every (row, db, te, r, z) whose bound
    exceeds it is left out. For the best point the cap is the objective of a point known to fit
    (then of each round's optimum), which cannot exclude the optimum. For an alternative it is
    a guess a little above the last answer, raised while nothing is found below it."""
    prev = None  # the optimum over a smaller row set
    if out.points:
        last = out.points[-1]
        base = sp.cm.objective_int(last, tables.rows, tables.index[last.lay])
        cap: float | None = base + max(1, math.ceil(ALT_MARGIN * base))
    else:
        best = _incumbent(tables, hint, rows)
        base, cap = 0, (best[0] if best is not None else None)
        if cap is not None:
            tables.cap = min(tables.cap, cap)
        if best is not None and (hint is None or not _fits(tables, hint)):
            hint = best[1]
    first = None
    if not out.points and cap is not None:  # the first round: proven exactly if few points
        if hint is None or not held(tables, rows.model, cap, hint):
            hint = tables.guess(rows.model[0])  # the hint CP-SAT would get
        first = exact_round(tables, rows.model, hint, cap)
    while True:
        res, first = first, None
        if res is None:
            res, hint = _cpsat_round(
                tables, rows, hint, cap, deadline, workers, gap, stop, out, prev
            )
        if res.status == "INFEASIBLE":
            if rows.any_left() and (cap is None or rows.next_bound() <= cap):
                rows.add_best(len(rows.model))
            elif cap is None:
                return None
            else:  # nothing below the cap anywhere: raise it (a tenfold margin each time)
                margin = (cap - base) * 10
                cap = base + margin if margin < CAP_LIMIT else None
            continue
        if res.status != "OPTIMAL" or res.point is None:
            if res.point is None and prev is not None:
                # Out of time in a larger model: the last round's optimum still stands.
                return _best_so_far(sp, prev, rows)
            return res
        hint = prev = res.point
        cap = res.objective if cap is None else min(cap, res.objective)
        if not out.points:
            tables.cap = min(tables.cap, cap)
        try:
            if rows.cover(res.objective, gap):
                return res
        except Stopped:
            raise Stopped(_best_so_far(sp, prev, rows)) from None


def _cpsat_round(
    tables: Tables,
    rows: _Rows,
    hint: Point | None,
    cap: float | None,
    deadline: float,
    workers: int,
    gap: float,
    stop: threading.Event | None,
    out: Found,
    prev: Point | None,
) -> tuple[Solved, Point | None]:
    """Build the model over the rows in it, hint it and solve it (a round, counted in `out`);
    the hint it had."""
    if prev is not None and (time.perf_counter() >= deadline or (stop and stop.is_set())):
        raise Stopped(_best_so_far(tables.sp, prev, rows))
    # OR-Tools (and pandas, which it imports) load here, with the first CP-SAT model: most
    # plans are settled by the bounds and exact scores and never build one
    from meshplan.solver.cpsat.build import build
    from meshplan.solver.cpsat.solve import solve

    try:
        b = build(tables, rows.model, tuple(out.points), cap)
    except Stopped:  # stopped while bounding the model's rows: an earlier optimum stands
        if prev is not None:
            raise Stopped(_best_so_far(tables.sp, prev, rows)) from None
        raise
    if hint is None or not b.axes.holds(hint):
        hint = tables.guess(rows.model[0])  # where the best bound is reached
    if hint is not None:
        b.axes.hint(hint)
    left = deadline - time.perf_counter()
    res = solve(b, max(left, 1e-3), workers, gap, stop)
    out.rounds += 1
    out.solve_time_s += res.solve_time_s
    nv, nc = len(b.model.proto.variables), len(b.model.proto.constraints)
    if len(rows.model) >= out.num_rows:
        out.num_variables, out.num_constraints, out.num_rows = nv, nc, len(rows.model)
    return res, hint


def _fits(tables: Tables, p: Point) -> bool:
    return tables.score(p) is not None


def _best_so_far(sp: Space, prev: Point, rows: _Rows) -> Solved:
    """An earlier round's optimum, unproven: its bound is the least bound of any row."""
    return Solved("FEASIBLE", prev, float(sp.cm.objective_int(prev)), rows.lower(), 0.0)
