"""Everything a term needs to know about one request, resolved once."""

from __future__ import annotations

import functools
from dataclasses import field
from fractions import Fraction

from meshplan.solver.arch import Arch
from meshplan.solver.costmodel.constants import Constants
from meshplan.solver.costmodel.framework_timing import Overlaps
from meshplan.solver.hardware import GIB, Hardware
from meshplan.solver.profiles import ACT_BYTES, LOGIT_BYTES, Profile, Recipe, profile_of
from meshplan.solver.record import record
from meshplan.solver.schema import FRAGMENTATION, RESERVE_GIB, Framework, Precision, TrainingSpec

__all__ = [
    "ACT_BYTES",
    "FRAGMENTATION",
    "LOGIT_BYTES",
    "RESERVE_GIB",
    "STATE_BYTES",
    "Ctx",
    "Recipe",
    "recipe_for",
    "recipe_of",
]

# Static bytes per parameter (weights, gradients, optimizer incl. fp32 master): 16 B BF16, 9 B FP8,
# "Why one GPU is not enough" (DeepSeek-V3 book, ch. 11).
STATE_BYTES = {Precision.BF16: (2, 2, 12), Precision.FP8: (1, 2, 6)}


def recipe_for(framework: Framework, precision: Precision, grad_bf16: bool = False) -> Recipe:
    """The memory recipe of a framework profile (solver/profiles/)."""
    return profile_of(framework).recipe(precision, grad_bf16)


def recipe_of(training: TrainingSpec) -> Recipe:
    """The memory recipe of a request: its profile's, with the request's knobs applied."""
    return profile_of(training.framework).recipe_for(training)


@record(frozen=True)
class Ctx:
    A: Arch
    H: Hardware
    s: int  # sequence length
    precision: Precision
    K: Constants
    reserve_bytes: int
    fragmentation: float
    recipe: Recipe = field(default_factory=lambda: Recipe(*STATE_BYTES[Precision.BF16]))
    framework: Framework = Framework.GENERIC  # the profile: rules, recipe, overlaps, kernels
    fused_attention: bool = True  # no stored s x s attention scores (FlashAttention)
    overlaps: Overlaps | None = None  # the profile's overlaps with the request's switches
    grad_reduce_bf16: bool = False  # training.grad_reduce_in_bf16: gradients reduced in bf16

    @property
    def profile(self) -> Profile:
        return profile_of(self.framework)

    @property
    def wb(self) -> int:
        return self.recipe.weights

    @property
    def gb(self) -> int:
        return self.recipe.gradients

    @property
    def rb(self) -> int:
        """Bytes per gradient element the dp collectives move: 2 where the request reduces in
        bf16 (Megatron's --grad-reduce-in-bf16, whose recipe keeps bf16 gradients too; FSDP's
        reduce_dtype bf16, e.g. Composer's mixed_precision PURE: mosaicml/composer @ 1b7ba47
        composer/distributed/mosaic_parallelism.py get_mixed_precision, over fp32 shards), else
        the recipe's gradients."""
        return 2 if self.grad_reduce_bf16 else self.recipe.gradients

    @property
    def ob(self) -> int:
        return self.recipe.optimizer

    @property
    def budget(self) -> int:
        """Bytes the tenants may use: HBM less the fixed reserve, less fragmentation ("Why one GPU
        is not enough", DeepSeek-V3 book, ch. 11)."""
        return int((self.H.hbm - self.reserve_bytes) / (1.0 + self.fragmentation))

    def usable_words(self) -> str:
        """'X GiB usable of Y GiB HBM', or, when the reserve leaves nothing, that said plainly
        with the fields to change (never a negative amount)."""
        gib = 2**30
        if self.budget > 0:
            return f"{self.budget / gib:.1f} GiB usable of {self.H.hbm / gib:.1f} GiB HBM"
        return (
            f"no usable memory: the GPU's {self.H.hbm / gib:.2f} GiB HBM (cluster.hbm_gib) "
            f"is not above the {self.reserve_bytes / gib:.2f} GiB reserve "
            f"(search.memory_reserve_gib)"
        )

    def reserve_for(self, used: int) -> int:
        return self.reserve_bytes + int(self.fragmentation * used + 0.999999)


def n_chunk(L: int, pp: int, v: int) -> int:
    """Layers per model chunk on the heaviest stage (uneven splits round up)."""
    return -(-L // (pp * v))


@functools.lru_cache(maxsize=4096)  # a factor of every cost model: built once per (L, pp, v)
def n_stage(L: int, pp: int, v: int) -> Fraction:
    return Fraction(v * n_chunk(L, pp, v))


def reserve_default(gib: float) -> int:
    return int(gib * GIB)
