"""CostModel: the compiled terms of one request and the float/integer scores of a point."""

from __future__ import annotations

from dataclasses import dataclass

from meshplan.solver.arch import Arch
from meshplan.solver.costmodel.constants import Constants, load_constants
from meshplan.solver.costmodel.context import Ctx, Recipe, recipe_for, reserve_default
from meshplan.solver.costmodel.framework_timing import overlaps_for
from meshplan.solver.costmodel.memory import TENANTS, memory_terms
from meshplan.solver.costmodel.point import Point
from meshplan.solver.costmodel.terms import Compiled
from meshplan.solver.costmodel.timing import Rates, dp_terms, objective_terms
from meshplan.solver.hardware import Hardware
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


@dataclass
class StageMemory:
    base: Compiled  # one group per term: tenant sums are exact
    pairs: list[tuple[Compiled, Compiled]]  # only the smaller of each pair counts


class CostModel:
    """Memory and time of any point for one request (model, cluster, training, reserve)."""

    def __init__(
        self,
        arch: Arch,
        hw: Hardware,
        training: TrainingSpec,
        search: SearchSpec,
        constants: Constants | None = None,
        recipe: Recipe | None = None,
    ) -> None:
        self.arch, self.hw, self.training = arch, hw, training
        self.ctx = Ctx(
            arch,
            hw,
            training.seq_len,
            training.precision,
            constants or load_constants(),
            reserve_default(search.memory_reserve_gib),
            search.memory_fragmentation,
            recipe
            or recipe_for(training.framework, training.precision, training.grad_reduce_in_bf16),
            training.framework,
            training.fused_attention,
            overlaps_for(training),
        )
        self.rates = Rates(self.ctx)
        ideal = arch.model_flops_per_token(training.seq_len) / (hw.num_gpus * hw.peak_bf16)
        self.time_unit_s = ideal / TIME_RESOLUTION  # seconds per token of one objective unit
        scale = 1.0 / self.time_unit_s
        self.objective = Compiled.of(objective_terms(self.ctx, self.rates), scale, up=True)
        self.dp: dict[int, tuple[Compiled, Compiled]] = {}
        for z in range(4):
            comm, credit = dp_terms(self.ctx, self.rates, z)
            self.dp[z] = (
                Compiled.of(comm, scale, up=True),
                Compiled.of(credit, scale, up=False),
            )
        self.memory: dict[str, StageMemory] = {}
        for st in STAGES:
            terms, pairs = memory_terms(self.ctx, st)
            unit = 1.0 / MEMORY_UNIT
            self.memory[st] = StageMemory(
                Compiled.of(terms, unit, up=True, merge=False),
                [
                    (Compiled.of([a], unit, True, False), Compiled.of([b], unit, True, False))
                    for a, b in pairs
                ],
            )

    @property
    def budget(self) -> int:
        """Usable memory per GPU in model units (KiB, rounded down)."""
        return self.ctx.budget // MEMORY_UNIT

    # ---- integer form: what CP-SAT optimises and the oracle enumerates --------------------
    def objective_int(self, p: Point) -> int:
        comm, credit = self.dp[p.z]
        return self.objective.value(p) + max(0, comm.value(p) - credit.value(p))

    def tenants_int(self, p: Point, stage: str) -> dict[str, int]:
        """Memory by tenant in model units (KiB, each term rounded up)."""
        m = self.memory[stage]
        out = dict.fromkeys(TENANTS, 0)
        for k, v in m.base.by_name(p).items():
            out[k] += v
        for a, b in m.pairs:
            out["activations"] += min(a.value(p), b.value(p))
        return out

    def stage_bytes(self, p: Point, stage: str) -> int:
        return sum(self.tenants_int(p, stage).values())

    def fits(self, p: Point) -> bool:
        return all(self.stage_bytes(p, st) <= self.budget for st in STAGES)

    # ---- float form: what a plan reports ------------------------------------------------
    def time_per_token(self, p: Point) -> dict[str, float]:
        """Seconds per token by component (the dp exposure is max(0, comm − credit))."""
        out = dict.fromkeys(COMPONENTS, 0.0)
        for g in self.objective.groups:
            for t in g.terms:
                out[t.name] += t.float_value(p)
        comm, credit = self.dp[p.z]
        out["dp_comm"] = max(0.0, comm.float_value(p) - credit.float_value(p))
        return out

    def tokens(self, p: Point) -> int:
        return p.lay.dp * p.b * p.M * self.training.seq_len

    def performance(self, p: Point) -> Performance:
        per_tok = self.time_per_token(p)
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
        )

    def memory_bill(self, p: Point) -> MemoryBill:
        per = {st: self.tenants_int(p, st) for st in STAGES}
        stage = max(STAGES, key=lambda st: sum(per[st].values()))
        t = {k: v * MEMORY_UNIT for k, v in per[stage].items()}
        used = sum(t.values())
        reserve = self.ctx.reserve_for(used)
        return MemoryBill(**t, reserve=reserve, total=used + reserve, hbm=self.hw.hbm, stage=stage)
