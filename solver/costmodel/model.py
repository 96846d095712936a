"""CostModel: the compiled terms of one request and the float/integer scores of a point."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import field
from typing import TypeVar
from weakref import WeakKeyDictionary

import numpy as np

from meshplan.solver.arch import Arch
from meshplan.solver.costmodel.band import error_band
from meshplan.solver.costmodel.constants import Constants, load_constants
from meshplan.solver.costmodel.context import Ctx, Recipe, recipe_of, reserve_default
from meshplan.solver.costmodel.factors import Fractions
from meshplan.solver.costmodel.framework_timing import overlaps_for
from meshplan.solver.costmodel.memory import TENANTS, memory_terms
from meshplan.solver.costmodel.point import Layout, Point, Rows
from meshplan.solver.costmodel.terms import Compiled, Group, Points
from meshplan.solver.costmodel.timing import Rates, dp_terms, objective_terms
from meshplan.solver.hardware import Hardware
from meshplan.solver.record import record
from meshplan.solver.results import MemoryBill, Performance, TimeBreakdown
from meshplan.solver.schema import Recompute, SearchSpec, TrainingSpec

# Integer units of the CP-SAT model. Magnitudes must stay far below 2^63 even after presolve
# multiplies coefficients together (OR-Tools 9.15 wrongly proved INFEASIBLE at fs and bytes), so
# time is counted in 1e-7 of the ideal time per token and memory in KiB (rounded up).
TIME_RESOLUTION = 1e7
MEMORY_UNIT = 1024
STAGES = ("first", "last")
COMPONENTS = (
    "compute",
    "recompute",
    "tp_comm",
    "cp_comm",
    "ep_comm",
    "pp_comm",
    "dp_comm",
    "bubble",
    "optimizer",
)
T = TypeVar("T")
ONE_ROW_CACHE = 256  # single layouts whose start tables a CostModel keeps (evaluate, oracle)
# Points whose fit and objective a CostModel keeps per rows: a plan scores its hint and its best
# point several times (the search's incumbent and cap, the answer): each point 2.8 times on
# average over the throughput sweep (benchmarks.suite.throughput_requests).
SCORES_KEPT = 64


@record
class StageMemory:
    base: Compiled  # one group per term: tenant sums are exact
    pairs: list[tuple[Compiled, Compiled]]  # only the smaller of each pair counts


def context(
    arch: Arch,
    hw: Hardware,
    training: TrainingSpec,
    search: SearchSpec,
    constants: Constants | None = None,
    recipe: Recipe | None = None,
) -> Ctx:
    """What every term of a request reads (Ctx)."""
    return Ctx(
        arch,
        hw,
        training.seq_len,
        training.precision,
        constants or load_constants(),
        reserve_default(search.memory_reserve_gib),
        search.memory_fragmentation,
        recipe or recipe_of(training),
        framework=training.framework,
        overlaps=overlaps_for(training),
        fused_attention=training.fused_attention,
        grad_reduce_bf16=training.grad_reduce_in_bf16,
    )


@record(frozen=True)
class Grouped:
    """A cost model's terms grouped into its sums: everything of it but the GPU count, which only
    sets the unit of time (`CostModel.time_unit_s`), so cost models of one request at several
    counts share them (`cache.cost_model`)."""

    ctx: Ctx
    rates: Rates
    fracs: Fractions  # factor values, shared by every compiled sum
    objective: list[Group]
    dp: dict[int, tuple[list[Group], list[Group]]]  # per ZeRO stage: traffic, credit
    memory: dict[str, StageMemory]
    # float(fracs(fn, v)) by (fn, v): what the float scores multiply by (`CostModel._floats`)
    floats: dict[tuple[Callable, object], float] = field(default_factory=dict)

    @staticmethod
    def of(ctx: Ctx) -> Grouped:
        """The terms of `ctx` grouped (each sum's unit of time, 1 here, is the CostModel's)."""
        rates, fr = Rates(ctx), Fractions()
        dp = {}
        for z in range(4):
            comm, credit = dp_terms(ctx, rates, z)
            dp[z] = (
                Compiled.of(comm, 1.0, True, True, fr).groups,
                Compiled.of(credit, 1.0, False, True, fr).groups,
            )
        memory: dict[str, StageMemory] = {}
        unit = 1.0 / MEMORY_UNIT
        for st in STAGES:
            terms, pairs = memory_terms(ctx, st)
            memory[st] = StageMemory(
                Compiled.of(terms, unit, True, False, fr),
                [
                    (
                        Compiled.of([a], unit, True, False, fr),
                        Compiled.of([b], unit, True, False, fr),
                    )
                    for a, b in pairs
                ],
            )
        objective = Compiled.of(objective_terms(ctx, rates), 1.0, True, True, fr).groups
        return Grouped(ctx, rates, fr, objective, dp, memory)


class CostModel:
    """Memory and time of any point for one request (model, cluster, training, reserve).

    Every score reads the terms' start tables over `Rows` (point.py): a space's rows, all at
    once, or one layout's own one-row table (kept in a small LRU). Methods of a single point
    take the rows its layout is row i of (default: its own one-row table). `grouped`: the terms
    of this request at another GPU count (whose context is this one's but for the count),
    grouped already; by default they are grouped here."""

    def __init__(
        self,
        arch: Arch,
        hw: Hardware,
        training: TrainingSpec,
        search: SearchSpec,
        constants: Constants | None = None,
        recipe: Recipe | None = None,
        grouped: Grouped | None = None,
    ) -> None:
        self.arch, self.hw, self.training = arch, hw, training
        self.cache_key: tuple | None = None  # set by solver/cache.py when it keeps this model
        self.ctx = context(arch, hw, training, search, constants, recipe)
        g = grouped or Grouped.of(self.ctx)
        self.rates, self.fracs, self._float_of = g.rates, g.fracs, g.floats
        self._one: OrderedDict[Layout, Rows] = OrderedDict()
        self._lock = threading.Lock()
        self._scores: WeakKeyDictionary[Rows, OrderedDict] = WeakKeyDictionary()  # see _kept
        ideal = arch.model_flops_per_token(training.seq_len) / (hw.num_gpus * hw.peak_bf16)
        self.time_unit_s = ideal / TIME_RESOLUTION  # seconds per token of one objective unit
        scale = 1.0 / self.time_unit_s
        self.objective = Compiled(scale, True, g.objective, g.fracs)
        self.dp: dict[int, tuple[Compiled, Compiled]] = {
            z: (Compiled(scale, True, comm, g.fracs), Compiled(scale, False, credit, g.fracs))
            for z, (comm, credit) in g.dp.items()
        }
        self.memory: dict[str, StageMemory] = g.memory

    def compiled(self) -> list[Compiled]:
        """Every compiled sum of the model (objective, dp traffic and credit, memory)."""
        return [c for c, _ in self.sums(range(4))]

    def sums(self, zs: Iterable[int] | None = None) -> list[tuple[Compiled, bool]]:
        """The compiled sums in the order the bounds read them, each with whether it counts as a
        cost (bounded from below) or a credit: the objective; per stage the memory's base and
        each pair's two sides; per ZeRO stage (default: those of `self.dp`) its dp traffic and
        credit."""
        out: list[tuple[Compiled, bool]] = [(self.objective, True)]
        for st in STAGES:
            m = self.memory[st]
            out += [(m.base, True)] + [(c, True) for pair in m.pairs for c in pair]
        for z in self.dp if zs is None else zs:
            out += [(self.dp[z][0], True), (self.dp[z][1], False)]
        return out

    @property
    def budget(self) -> int:
        """Usable memory per GPU in model units (KiB, rounded down)."""
        return self.ctx.budget // MEMORY_UNIT

    def rows_of(self, lay: Layout) -> Rows:
        """The one-row table of a layout (kept in an LRU of ONE_ROW_CACHE layouts)."""
        with self._lock:
            rows = self._one.get(lay)
            if rows is not None:
                self._one.move_to_end(lay)
                return rows
        rows = Rows.one(lay)
        with self._lock:
            self._one[lay] = rows
            while len(self._one) > ONE_ROW_CACHE:
                self._one.popitem(last=False)
        return rows

    def _at(self, p: Point, rows: Rows | None) -> Rows:
        return self.rows_of(p.lay) if rows is None else rows

    def _kept(self, what: str, p: Point, rows: Rows, i: int, score: Callable[[], T]) -> T:
        """score(), kept while the rows live (at most SCORES_KEPT points per rows, the least
        recently used dropped first): the same point is scored once."""
        key = (what, p, i)
        with self._lock:
            memo = self._scores.get(rows)
            if memo is None:
                memo = self._scores[rows] = OrderedDict()
            got = memo.get(key)
            if got is not None:
                memo.move_to_end(key)
                return got
        got = score()
        with self._lock:
            memo[key] = got
            while len(memo) > SCORES_KEPT:
                memo.popitem(last=False)
        return got

    # ---- integer form: what CP-SAT optimises and the oracle enumerates --------------------
    def objective_int(self, p: Point, rows: Rows | None = None, i: int = 0) -> int:
        rows = self._at(p, rows)
        return self._kept("objective", p, rows, i, lambda: self._objective_int(p, rows, i))

    def _objective_int(self, p: Point, rows: Rows, i: int) -> int:
        comm, credit = self.dp[p.z]
        dp = comm.value(p, rows, i) - credit.value(p, rows, i)
        return self.objective.value(p, rows, i) + max(0, dp)

    def tenants_int(
        self, p: Point, stage: str, rows: Rows | None = None, i: int = 0
    ) -> dict[str, int]:
        """Memory by tenant in model units (KiB, each term rounded up)."""
        rows = self._at(p, rows)
        m = self.memory[stage]
        out = dict.fromkeys(TENANTS, 0)
        for k, v in m.base.by_name(p, rows, i).items():
            out[k] += v
        for a, b in m.pairs:  # a pair's two terms bill one tenant
            out[a.groups[0].terms[0].name] += min(a.value(p, rows, i), b.value(p, rows, i))
        return out

    def stage_bytes(self, p: Point, stage: str, rows: Rows | None = None, i: int = 0) -> int:
        """The sum of tenants_int, from the memoised group starts (the base has one group per
        term, so its value is the sum of its tenants)."""
        rows = self._at(p, rows)
        m = self.memory[stage]
        out = m.base.value(p, rows, i)
        for a, b in m.pairs:
            out += min(a.value(p, rows, i), b.value(p, rows, i))
        return out

    def fits(self, p: Point, rows: Rows | None = None, i: int = 0) -> bool:
        rows = self._at(p, rows)
        budget = self.budget
        return self._kept(
            "fits",
            p,
            rows,
            i,
            lambda: all(self.stage_bytes(p, st, rows, i) <= budget for st in STAGES),
        )

    # ---- many points at once (exactly the methods above, point by point) -----------------
    def objective_ints(self, rows: Rows, at: Points) -> np.ndarray:
        """objective_int of every point of `at` (their ZeRO stages in at.axes["z"])."""
        out = self.objective.values(rows, at)
        dom, idx = at.axes["z"]
        dp = np.zeros(len(at.row), dtype=np.int64)
        for k, z in enumerate(dom):
            hit = np.flatnonzero(idx == k)
            if not len(hit):
                continue
            comm, credit = self.dp[z]
            sub = at.take(hit)  # only the points of this ZeRO stage
            e = np.maximum(comm.values(rows, sub) - credit.values(rows, sub), 0)
            if e.dtype == object:
                dp = dp.astype(object)
            dp[hit] = e
        return out + dp

    def stage_units(self, rows: Rows, at: Points, stage: str) -> np.ndarray:
        """stage_bytes of every point of `at` (KiB)."""
        m = self.memory[stage]
        out = m.base.values(rows, at)
        for a, b in m.pairs:
            out = out + np.minimum(a.values(rows, at), b.values(rows, at))
        return out

    def fits_many(self, rows: Rows, at: Points) -> np.ndarray:
        ok = np.ones(len(at.row), dtype=bool)
        for st in STAGES:
            ok &= self.stage_units(rows, at, st) <= self.budget
        return ok

    # ---- float form: what a plan reports ------------------------------------------------
    def time_per_token(self, p: Point, rows: Rows | None = None, i: int = 0) -> dict[str, float]:
        """Seconds per token by component (the dp exposure is max(0, comm − credit))."""
        rows = self._at(p, rows)
        out = dict.fromkeys(COMPONENTS, 0.0)
        axes = p.axes()
        for name, x in self._float_terms(self.objective, axes, rows, i):
            out[name] += x
        comm, credit = self.dp[p.z]
        sums = [0.0, 0.0]  # Compiled.float_value of each: its terms added in order
        for k, c in enumerate((comm, credit)):
            for _, x in self._float_terms(c, axes, rows, i):
                sums[k] += x
        out["dp_comm"] += max(0.0, sums[0] - sums[1])  # the tail and stragglers: objective
        return out

    def _float_terms(
        self, c: Compiled, axes: dict[str, object], rows: Rows, i: int
    ) -> Iterable[tuple[str, float]]:
        """(name, `Term.float_value`) of each term of `c`, in order, as `Compiled.float_terms`
        computes them (the start, then times each factor's float in FACTOR_AXES order), the
        factors' floats kept (`Grouped.floats`: float of a Fraction costs three Python calls)."""
        floats, fr = self._float_of, self.fracs
        for g in c.groups:
            kv = g.key(axes[g.sel]) if g.sel else None
            fs = []
            for ax, fn in g.chain:
                k = (fn, axes[ax])
                f = floats.get(k)
                if f is None:
                    f = floats[k] = float(fr(fn, axes[ax]))
                fs.append(f)
            for t in g.terms:
                x = float(t.starts(rows, kv)[i])
                for f in fs:
                    x *= f
                yield t.name, x

    def tokens(self, p: Point) -> int:
        return p.lay.dp * p.b * p.M * self.training.seq_len

    def performance(self, p: Point, rows: Rows | None = None, i: int = 0) -> Performance:
        per_tok = self.time_per_token(p, rows, i)
        tokens = self.tokens(p)
        step = sum(per_tok.values()) * tokens
        flops_tok = self.arch.model_flops_per_token(self.training.seq_len)
        tps = tokens / step
        peak = p.lay.gpus * self.hw.peak_bf16
        mfu = tps * flops_tok / peak
        extra = {
            Recompute.NONE: 0.0,
            Recompute.SELECTIVE: self.rates.F_core,
            Recompute.FULL: self.rates.F_layer / 3,
        }[p.r] * self.arch.L
        bd = TimeBreakdown(**{f"{k}_s": v * tokens for k, v in per_tok.items()})
        return Performance(
            step_time_s=step,
            tokens_per_s=tps,
            mfu=mfu,
            hfu=tps * (flops_tok + extra) / peak,
            global_batch_tokens=tokens,
            num_gpus_used=p.lay.gpus,
            model_flops_per_token=flops_tok,
            bubble_fraction=bd.bubble_s / step,
            breakdown=bd,
            error_band=error_band(
                self.arch.is_moe, self.training.precision, self.training.framework, tps
            ),
        )

    def memory_bill(self, p: Point, rows: Rows | None = None, i: int = 0) -> MemoryBill:
        rows = self._at(p, rows)
        # the fuller stage: its tenants' sum is stage_bytes (which sums the same integers)
        units = {st: self.stage_bytes(p, st, rows, i) for st in STAGES}
        stage = max(STAGES, key=units.__getitem__)
        t = {k: v * MEMORY_UNIT for k, v in self.tenants_int(p, stage, rows, i).items()}
        used = sum(t.values())
        reserve = self.ctx.reserve_for(used)
        return MemoryBill(**t, reserve=reserve, total=used + reserve, hbm=self.hw.hbm, stage=stage)
