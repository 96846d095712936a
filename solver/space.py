"""The search space: legal values per axis, pruned in Python before any model is built.

The rules (`rules.violations`, re-exported here) are the specification; `Space` generates
exactly the points that obey them, and the oracle checks that by enumerating raw ranges against
the same rules. Values of different axes that must agree (a row and its pipeline, batch split,
expert group and ZeRO stage) are given by `Space.compatible`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import field
from functools import cached_property
from typing import TypeVar

import numpy as np

from meshplan.solver import cache
from meshplan.solver.arch import Arch
from meshplan.solver.costmodel import CostModel, Layout, Point
from meshplan.solver.costmodel.model import STAGES
from meshplan.solver.costmodel.point import Rows
from meshplan.solver.costmodel.terms import Points
from meshplan.solver.hardware import Hardware
from meshplan.solver.profiles import Profile, profile_of
from meshplan.solver.record import record
from meshplan.solver.rules import (
    dualpipe,
    expert_group_ok,
    folds,
    interleave_ok,
    sp_required,
    tp_divides_model,
    violations,
)
from meshplan.solver.schema import Precision, Recompute, SearchSpec, TrainingSpec
from meshplan.solver.space_batch import (
    Batch,
    batch_of,
    batch_shapes,
    divisors,
    divisors_kept,
    fewer_gpu_counts,
)
from meshplan.solver.space_least import least_points, least_zero_stages, memory_starts

__all__ = ["Batch", "Grid", "Space", "batch_of", "divisors", "fewer_gpu_counts", "violations"]
T = TypeVar("T")
_MISSING = object()


# Layouts whose least-memory points the planner scores one by one, in `fit_order`, before the
# rest at once: over the throughput sweep's spaces (benchmarks.suite.throughput_requests) the
# first layout fits in 422 of the 428 where any does, one of the first three in all.
FIT_FIRST = 4


def fit_order(lay: Layout) -> tuple[int, int]:
    """Layouts that split activations most (the largest tp·cp), then the fewest stages, first:
    their least-memory points fit most often."""
    return -lay.tp * lay.cp, lay.pp


@record(frozen=True)
class Grid:
    """A space's values before the memory prune (`Space._grid`): a pure function of
    `Space.grid_key`, so spaces that share the key (one model on GPU types with as many GPUs
    per node, or under other cost models) share it (`cache.grid`)."""

    layouts: tuple[Layout, ...]  # in Layout's order
    db: tuple[tuple[int, int, int], ...]  # (dp, b, M), sorted
    te_of: dict[tuple[int, int], tuple]  # (tp, dp·cp) of a layout -> its (tp, ep, etp) groups
    te: tuple[tuple[int, int, int], ...]  # every group of te_of, sorted
    least_db: dict[int, tuple[int, int]]  # per dp, the smallest (b, M) of `db` (its first)
    # what `Space._generate` derives from the grid alone (no memory prune), kept: the lists
    # every space of the grid shares (a space's lists are never changed once made)
    derived: dict = field(default_factory=dict, compare=False, repr=False)


@record
class Space:
    """Legal values per axis for one request, and the cost model that scores them."""

    A: Arch
    H: Hardware
    training: TrainingSpec
    search: SearchSpec
    cm: CostModel
    batch: Batch
    layouts: list[Layout] = field(default_factory=list)
    all_layouts: list[Layout] = field(default_factory=list)  # before the memory prune
    te_all: list[tuple[int, int, int]] = field(default_factory=list)
    db_all: list[tuple[int, int, int]] = field(default_factory=list)
    pv: list[tuple[int, int]] = field(default_factory=list)
    db: list[tuple[int, int, int]] = field(default_factory=list)
    te: list[tuple[int, int, int]] = field(default_factory=list)  # (tp, ep, etp)
    rs: list[Recompute] = field(default_factory=list)
    zs: list[int] = field(default_factory=list)
    # zero_values by (pp > 1, dp·cp > 1), the least-memory expert group by (tp, cp, dp), and
    # what `kept` keeps
    _zcache: dict = field(default_factory=dict, repr=False)
    # per dp, the smallest (micro-batch size, count) of `db_all` (Grid.least_db)
    _least_db: dict[int, tuple[int, int]] = field(default_factory=dict, repr=False)

    @staticmethod
    def build(
        A: Arch,
        H: Hardware,
        training: TrainingSpec,
        search: SearchSpec,
        cm: CostModel,
        num_gpus: int | None = None,
        prune: bool = True,
    ) -> Space:
        """The space of a request; `prune` drops the layouts whose least memory overflows (the
        planner leaves that to its vectorised bounds, which find the same and more)."""
        sp = Space(A, H, training, search, cm, batch_of(training, A.active_params))
        sp._generate(num_gpus or H.num_gpus, prune)
        return sp

    @property
    def profile(self) -> Profile:
        return profile_of(self.training.framework)

    @cached_property
    def rows(self) -> Rows:
        """The layout rows as arrays, where the cost model's start tables are computed."""
        return cache.rows(self.cm, self.layouts)

    @cached_property
    def index(self) -> dict[Layout, int]:
        """Each layout's position in `layouts` (kept with the space: a request that repeats it
        reads the space from the cache, and hashes no layout again)."""
        return {r: i for i, r in enumerate(self.layouts)}

    @cached_property
    def domains(self) -> cache.Key:
        """The values of the axes besides the layout (pv, db, te, r, z), as tuples: what the
        tables' memo is keyed by (`cache.tables_memo`), hashed once."""
        return cache.Key(*(tuple(d) for d in (self.pv, self.db, self.te, self.rs, self.zs)))

    # -- per-axis domains ------------------------------------------------------------------
    def tp_values(self) -> list[int]:
        A, q, prof = self.A, self.search, self.profile
        g = math.gcd(A.a, A.kv)
        vals = [t for t in divisors(g) if (t <= self.H.gpn or t == q.tp) and tp_divides_model(A, t)]
        vals = [t for t in vals if self.training.seq_len % (2 * t) == 0]
        if not prof.tensor_parallel or (
            self.training.precision is Precision.FP8 and not prof.fp8_with_tp
        ):
            vals = [t for t in vals if t == 1]
        if sp_required(prof, A) and q.sequence_parallel is False:
            vals = [t for t in vals if t == 1]
        return [t for t in vals if not q.tp or t == q.tp]

    def ep_values(self) -> list[int]:
        if not self.A.is_moe:
            return [1]
        return [e for e in divisors(self.A.E) if not self.search.ep or e == self.search.ep]

    def expert_groups(self, tp: int) -> list[tuple[int, int, int]]:
        """(tp, ep, etp) values with this tp, before any layout (pins applied)."""
        q = self.search
        return [
            (tp, e, et)
            for e in self.ep_values()
            for et in self.profile.etp_values(tp, self.A.is_moe)
            if (not q.etp or et == q.etp) and expert_group_ok(self.A, self.profile, tp, e, et)
        ]

    def zero_values(self, row: Layout) -> list[int]:
        """ZeRO stages the framework runs on this layout, within the space's (pinned) stages."""
        return self._zero_values(row.pp > 1, row.dp * row.cp > 1)

    def _zero_values(self, pipelined: bool, sharded: bool) -> list[int]:
        k = (pipelined, sharded, tuple(self.zs))
        if k not in self._zcache:
            fp8 = self.training.precision is Precision.FP8
            ok = self.profile.zero_allowed(1 + pipelined, 1 + sharded, fp8)
            self._zcache[k] = [z for z in self.zs if z in ok]
        return self._zcache[k]

    def grid_key(self, n: int) -> tuple:
        """Everything `_grid` reads: the model, the framework, sequence length and precision,
        the search's fields, the GPUs per node, the count and the batch (not the GPU type's
        speeds or memory, nor the cost model)."""
        t, q = self.training, self.search
        pins = tuple(getattr(q, f) for f in type(q).model_fields)
        key = (self.A, t.framework, t.seq_len, t.precision, pins, self.H.gpn, n, self.batch)
        return (*key, t.pipeline_schedule) if dualpipe(t) else key

    def _grid(self, n: int) -> Grid:
        """The layouts of up to n GPUs that obey the rules and pins, and the values of the other
        axes that agree with them, before the memory prune. Candidates are plain tuples in
        Layout's field order (sorted as Layout sorts), made Layouts once they are kept."""
        A, q, s, prof = self.A, self.search, self.training.seq_len, self.profile
        counts = fewer_gpu_counts(n, self.H.gpn) if q.allow_fewer_gpus else [n]
        no_pp = (A.is_moe and not prof.moe_with_pp) or (A.tied and not prof.tied_with_pp)
        no_pp = no_pp or not prof.pipeline_parallel
        max_p = 1 if no_pp else A.L + prof.extra_chunks
        groups = {t: self.expert_groups(t) for t in self.tp_values()}
        sp_pin = q.sequence_parallel is not False
        # an expert group folds into tp·cp·dp when its size ep·etp divides it (rules.folds): a
        # size that divides tp folds into every layout of that tp
        sizes = {t: sorted({e * et for _, e, et in tes}) for t, tes in groups.items()}
        always = {t: any(t % k == 0 for k in ks) for t, ks in sizes.items()}
        # whether the framework runs some ZeRO stage, by (pp > 1, dp·cp > 1)
        zok = {(a, b): bool(self._zero_values(a, b)) for a in (False, True) for b in (False, True)}
        rows: list[tuple[int, int, int, int, int, bool]] = []  # distinct: each (g, t, c, p) once
        for g in counts:
            for t, tes in groups.items():
                if g % t or not tes:
                    continue
                sp_t = t > 1 and sp_pin
                for c in divisors_kept(g // t):
                    if s % (2 * t * c) or (q.cp and c != q.cp):
                        continue
                    if c > 1 and not prof.context_parallel:
                        continue
                    tc = t * c
                    for p in divisors_kept(g // tc):
                        if p > max_p or (q.pp and p != q.pp):
                            continue
                        d = g // (tc * p)
                        if q.dp and d != q.dp:
                            continue
                        if not always[t] and all((tc * d) % k for k in sizes[t]):
                            continue
                        if zok[p > 1, d * c > 1]:
                            rows.append((t, p, c, d, g, sp_t))
        # Free micro-batch sizes are powers of two (what launchers and kernels are tuned for).
        pow2 = [1 << k for k in range(q.max_micro_batch_size.bit_length())]
        bs = [q.micro_batch_size] if q.micro_batch_size else pow2  # ascending, distinct
        fixed, cap, pin = self.batch.fixed_seqs, self.batch.cap_seqs, q.num_microbatches
        # (dp, b, M) in sorted order as made (dp ascending, b ascending, M ascending: each
        # microbatch_counts tuple is sorted), and per dp its first, the smallest (b, M)
        db_all: list[tuple[int, int, int]] = []
        least_db: dict[int, tuple[int, int]] = {}
        for d in sorted({r[3] for r in rows}):
            for b in bs:
                shapes = batch_shapes(fixed, cap, d, b, pin)
                if shapes:
                    db_all += shapes
                    if d not in least_db:
                        least_db[d] = shapes[0][1:]
        rows.sort()  # Layout's order: (tp, pp, cp, dp, gpus, sp)
        kept = [r for r in rows if r[3] in least_db]
        lays = tuple(Layout(*r) for r in kept)
        # A row's expert groups are those of its tp whose size ep·etp divides tp·cp·dp
        # (rules.folds): which sizes divide it is a function of its gcd with their lcm, so rows
        # with one tp and that gcd share their groups (one tuple, computed once).
        lcm = {t: math.lcm(*ks) if ks else 1 for t, ks in sizes.items()}
        te_of: dict[tuple[int, int], tuple] = {}  # by (tp, dp·cp)
        by_gcd: dict[tuple[int, int], tuple] = {}  # by (tp, gcd(tp·cp·dp, lcm of its sizes))
        for t, _, c, d, _, _ in kept:
            dc = d * c
            if (t, dc) not in te_of:
                k = (t, math.gcd(t * dc, lcm[t]))
                got = by_gcd.get(k)
                if got is None:
                    tcd = t * dc
                    got = by_gcd[k] = tuple(x for x in groups[t] if tcd % (x[1] * x[2]) == 0)
                te_of[t, dc] = got
        te_all = tuple(sorted({x for v in by_gcd.values() for x in v}))
        return Grid(lays, tuple(db_all), te_of, te_all, least_db)

    def _generate(self, n: int, prune: bool = True) -> None:
        q = self.search
        self.rs = [q.recompute] if q.recompute else list(Recompute)
        if not self.profile.selective_recompute:
            if q.recompute is Recompute.SELECTIVE:
                raise ValueError(
                    f"search.recompute SELECTIVE: {self.profile.title} recomputes whole layers "
                    "or nothing (NONE or FULL)"
                )
            self.rs = [r for r in self.rs if r is not Recompute.SELECTIVE]
        self.zs = [q.zero_stage] if q.zero_stage is not None else [0, 1, 2, 3]
        grid = cache.grid(self.grid_key(n), lambda: self._grid(n))
        self._least_db = grid.least_db
        if prune:
            lists = (list(x) for x in (grid.layouts, grid.db, grid.te))
            self.all_layouts, self.db_all, self.te_all = lists
            got = self._derive(grid, self._prune(self.all_layouts))
        else:  # a pure function of the grid (and so of its key): once per grid
            got = grid.derived.get("all")
            if got is None:
                lists = tuple(list(x) for x in (grid.layouts, grid.db, grid.te))
                got = grid.derived.setdefault("all", (lists, self._derive(grid, list(lists[0]))))
            (self.all_layouts, self.db_all, self.te_all), got = got
        self.layouts, self.db, self.pv, self.te = got

    def _derive(self, grid: Grid, lays: list[Layout]) -> tuple[list, list, list, list]:
        """The layouts (of `lays`, those whose pipeline the search allows), micro-batch shapes,
        pipelines and expert groups of the space, from its grid and the layouts kept."""
        A, q, prof = self.A, self.search, self.profile
        keep_d = {r.dp for r in lays}
        db = [x for x in grid.db if x[0] in keep_d]
        vs = range(1, q.max_virtual_stages + 1)
        dual = dualpipe(self.training)  # DualPipeV: two stages per rank (rules.py)
        pv = sorted(
            {
                (p, v)
                for p in {r.pp for r in lays}  # each pp once: the rest is of pp alone
                for v in vs
                if ((v == 2) == (p > 1) if dual else (v == 1 or (p > 1 and prof.interleaving)))
                and p * v <= A.L + prof.extra_chunks
                and (not q.virtual_stages or v == q.virtual_stages)
            }
        )
        te = sorted({x for k in {(r.tp, r.dp * r.cp) for r in lays} for x in grid.te_of[k]})
        pps = {p for p, _ in pv}
        return [r for r in lays if r.pp in pps], db, pv, te

    def compatible(self, axis: str, row: Layout) -> list:
        """Values of an axis that agree with a layout row: (pp, v) with its pp, (dp, b, M) with
        its dp, (tp, ep, etp) with its tp and folding into its tp·cp·dp, z the framework runs."""
        if axis == "pv":
            return [v for v in self.pv if v[0] == row.pp]
        if axis == "db":
            return [v for v in self.db if v[0] == row.dp]
        if axis == "z":
            return self.zero_values(row)
        return [v for v in self.te if v[0] == row.tp and folds(row.tp, row.cp, row.dp, v[1], v[2])]

    def pipeline_fits_batch(self, pv: tuple[int, int], db: tuple[int, int, int]) -> bool:
        """The pipeline schedule runs this micro-batch count (Megatron's interleaving)."""
        return interleave_ok(self.profile, pv[0], pv[1], db[2], dualpipe(self.training))

    def micro_batch_sizes(self) -> list[int]:
        return sorted({b for _, b, _ in self.db})

    def least_memory_points(self, row: Layout) -> list[Point]:
        """The row's candidates for its point of least memory, one a ZeRO stage of
        `least_zero_stages`: memory falls with fuller recomputation, a smaller micro-batch and
        count, a larger expert group and the fewest chunks per stage the search allows (one,
        unless virtual_stages is pinned on a pipelined row), so the least of these points bounds
        the row's others. Empty when the row has no point."""
        v = self.search.virtual_stages if row.pp > 1 and self.search.virtual_stages else 1
        bm = self._least_db.get(row.dp) if v == 1 else self._least_db_interleaved(row.dp, row.pp)
        te = self._least_te(row.tp, row.cp, row.dp)
        if bm is None or te is None:
            return []
        zs = least_zero_stages(self.zero_values(row))
        return [Point(row, v, bm[0], bm[1], te[0], te[1], self._least_r, z) for z in zs]

    def least_memory_point(self, row: Layout) -> Point | None:
        """The row's point of least memory (of `least_memory_points`, the one that needs least;
        the higher ZeRO stage on a tie); None when the row has no point."""
        pts = self.least_memory_points(row)
        if len(pts) < 2:
            return pts[0] if pts else None
        return self.least_memory_needs([row], kept=False)[0][0]

    def _least_db_interleaved(self, dp: int, pp: int) -> tuple[int, int] | None:
        """The smallest (b, M) of `db_all` with this dp whose count the interleaved schedule of
        `pp` stages and the pinned virtual stages runs (pipeline_fits_batch), per (dp, pp) once."""
        k = ("db", dp, pp)
        if k not in self._zcache:
            v = self.search.virtual_stages
            ok = [x for x in self.db_all if x[0] == dp and self.pipeline_fits_batch((pp, v), x)]
            self._zcache[k] = min((x[1:] for x in ok), default=None)
        return self._zcache[k]

    @cached_property
    def _least_r(self) -> Recompute:
        order = [Recompute.FULL, Recompute.SELECTIVE, Recompute.NONE]
        return min(self.rs, key=order.index)

    def _least_te(self, tp: int, cp: int, dp: int) -> tuple[int, int] | None:
        """The largest expert group (ep·etp, then ep) of `te_all` with this tp folding into
        tp·cp·dp (the first in `te_all`'s order on a tie), per (tp, cp, dp) once."""
        k = ("te", tp, cp, dp)
        if k not in self._zcache:
            tes = [x for x in self._te_by_tp.get(tp, ()) if folds(tp, cp, dp, x[1], x[2])]
            best = max(tes, key=lambda x: (x[1] * x[2], x[1]), default=None)
            self._zcache[k] = None if best is None else best[1:]
        return self._zcache[k]

    @cached_property
    def _te_by_tp(self) -> dict[int, list[tuple[int, int, int]]]:
        out: dict[int, list[tuple[int, int, int]]] = {}
        for x in self.te_all:
            out.setdefault(x[0], []).append(x)
        return out

    def least_memory_needs(
        self, layouts: Sequence[Layout] | None = None, kept: bool = True
    ) -> list[tuple[Point, int]]:
        """Each layout's least-memory point (layouts with none are left out) and the memory it
        needs on its fuller stage (model units: exactly `cm.stage_bytes`), computed for all the
        layouts (default: every layout of the space) at once; over rows kept in the cache (the
        planner's, when these are its layouts) unless `kept` is False (a one-off set)."""
        lays = list(self.all_layouts if layouts is None else layouts)
        pts, pos = self._least_points(lays)
        if not pts:
            return []
        rows = cache.rows(self.cm, lays) if kept else Rows.of(lays)
        at = Points.of(pts, pos)
        need = np.max(np.array([self.cm.stage_units(rows, at, st) for st in STAGES]), axis=0)
        out: list[tuple[Point, int]] = []
        pos_of: list[int] = []  # a layout's candidates are adjacent, in pos order
        for p, i, n in zip(pts, pos, need.tolist(), strict=True):
            if out and pos_of[-1] == i:
                if n < out[-1][1]:  # a tie keeps the first candidate (the higher ZeRO stage)
                    out[-1] = (p, int(n))
                continue
            out.append((p, int(n)))
            pos_of.append(i)
        return out

    def least_memory_fits(self, layouts: Sequence[Layout], first: int = 0) -> bool:
        """Whether some layout's least-memory point fits (some need of `least_memory_needs(
        layouts, kept=False)` within the budget): the first `first` layouts one by one, then
        the rest at once, a stage at a time (when the first stage overflows every point, the
        last is not computed)."""
        lays = list(layouts)
        return self._fits_in(Rows.of(lays), lays, list(range(len(lays))), first)

    def some_layout_fits(self, first: int = FIT_FIRST) -> bool:
        """Whether some layout of `layouts` has a least-memory point that fits, over the space's
        rows (`rows`: the start tables its bounds read next), in `fit_order`: the first `first`
        layouts, then the rest. When none does, no point of the space fits: every row's coarse
        bound is infinite (the bounds find the same and more)."""

        def fits() -> bool:
            R = self.rows
            order = np.lexsort((R.pp, -R.tp * R.cp)).tolist()  # stable, as sorted by fit_order
            return self._fits_in(R, self.layouts, order, first)

        return self.kept(("fits", first), fits)

    def kept(self, key: tuple, compute: Callable[[], T]) -> T:
        """compute(), a pure function of the space, computed once and kept with it (a request
        that repeats the space reads it from the cache: `cache.space`). An exception (a stop)
        keeps nothing."""
        got = self._zcache.get(key, _MISSING)
        if got is _MISSING:
            got = self._zcache[key] = compute()
        return got

    def _fits_in(self, rows: Rows, lays: Sequence[Layout], order: list[int], first: int) -> bool:
        """Whether the least-memory point of some lays[i], i in `order`, fits (`rows`: the rows
        of `lays`): the first `first` one by one (a point costs fewer array operations than a
        batch), then the rest at once."""
        pts = [(i, p) for i in order[:first] for p in self.least_memory_points(lays[i])]
        if pts:
            memory_starts(self.cm, rows, {(p.r, p.z) for _, p in pts})
        for i, p in pts:
            if self.cm.fits(p, rows, i):
                return True
        rest = order[first:]
        return bool(rest) and self._fits_any(rows, lays, rest)

    def _fits_any(self, rows: Rows, lays: Sequence[Layout], at: Iterable[int]) -> bool:
        """Whether the least-memory point of some layout lays[i], i in `at`, fits; `rows`: the
        rows of `lays`."""
        points = least_points(self, rows, list(at))
        if points is None:
            return False
        for st in STAGES:
            ok = np.flatnonzero(self.cm.stage_units(rows, points, st) <= self.cm.budget)
            if not len(ok):
                return False
            points = points.take(ok)
        return True

    def _least_points(
        self, lays: Sequence[Layout], at: Iterable[int] | None = None
    ) -> tuple[list[Point], list[int]]:
        """The least-memory candidates (`least_memory_points`) of lays[i], i in `at` (default:
        all), and each one's i (layouts with none are left out)."""
        pts, pos = [], []
        for i in range(len(lays)) if at is None else at:
            for p in self.least_memory_points(lays[i]):
                pts.append(p)
                pos.append(i)
        return pts, pos

    def _prune(self, rows: list[Layout]) -> list[Layout]:
        """The layouts whose least-memory point fits, in their order."""
        budget = self.cm.budget
        return [p.lay for p, need in self.least_memory_needs(rows) if need <= budget]

    def points(self):  # noqa: ANN201  (generator of Point; the product, for small spaces only)
        for lay in self.layouts:
            for pv in self.compatible("pv", lay):
                for db in self.compatible("db", lay):
                    if not self.pipeline_fits_batch(pv, db):
                        continue
                    for _, e, et in self.compatible("te", lay):
                        for r in self.rs:
                            for z in self.compatible("z", lay):
                                yield Point(lay, pv[1], db[1], db[2], e, et, r, z)
