"""Everything a term needs to know about one request, resolved once."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from meshplan.solver.arch import Arch
from meshplan.solver.costmodel.constants import Constants
from meshplan.solver.costmodel.framework_timing import Overlaps
from meshplan.solver.hardware import GIB, Hardware
from meshplan.solver.schema import Framework, Precision

# Static bytes per parameter (weights, gradients, optimizer incl. fp32 master): seed 002.
STATE_BYTES = {Precision.BF16: (2, 2, 12), Precision.FP8: (1, 2, 6)}
ACT_BYTES = 2  # bf16 activations and collectives
# Logits at the loss, bytes per element: bf16 logits kept by the training loop + the fp32 log-
# probabilities + the fp32 and bf16 gradients of a non-fused cross-entropy (PyTorch's
# F.cross_entropy on .float(), as torchtitan calls it). Megatron's fused vocab-parallel loss
# needs ~6; 12 is the safe side for a framework we do not know.
LOGIT_BYTES = 12


@dataclass(frozen=True)
class Recipe:
    """What a framework keeps in memory per parameter and per logit element (bytes)."""

    weights: int  # per parameter; ZeRO-3 shards it over dp·cp
    gradients: int  # per parameter; ZeRO-2 shards it
    optimizer: int  # per parameter (master copy and moments); ZeRO-1 shards it
    accumulation: int = 0  # per TP-local parameter, never sharded: grads kept across micro-batches
    logits: int = LOGIT_BYTES  # per logit element at the loss
    vocab_parallel: bool = True  # input embedding and logits split over tp (else replicated)
    reduce_bytes: int = 0  # FSDP2 no-sync: bytes per parameter reduce-scattered once per step
    activations: str = "seed002"  # stored-activation form: "seed002" or "korthikanti" (memory.py)
    tp_exposed: bool = False  # tp collectives never overlap compute (else the fitted eps_tp)


# KempnerForge (seed 001; solver/catalog/NOTES.md §4, read from its code):
# - parameters and AdamW moments in BF16 (param_dtype is "the master weight dtype"): 2 + 4 B,
#   sharded by FSDP2;
# - gradient accumulation runs under set_requires_gradient_sync(False), so FSDP2 keeps every
#   parameter's unsharded gradient upcast to reduce_dtype=fp32 (4 B per TP-local parameter)
#   until the last micro-batch reduce-scatters it; the sharded BF16 gradient only exists after
#   that, past the backward peak, so it is not counted. The buffer is counted for one
#   micro-batch too (an over-estimate there): Space's prune needs memory to fall with a
#   smaller micro-batch at a fixed batch, which an M-dependent buffer would break;
# - the token embedding is replicated across tp and the output head is gathered to Replicate,
#   so every tp rank holds the embedding and the full [b, s, V] logits; 8 B per logit element
#   (bf16 logits + fp32 log-probabilities + bf16 gradient) is what the seed's three memory
#   figures leave once the state, the checkpoints and one block's recompute are taken out;
# - TP is DTensor with sequence parallelism and no async TP: "TP fires all-gather/reduce-scatter
#   on every matmul" (seed 001), so its collectives are counted fully exposed.
KEMPNERFORGE = Recipe(
    weights=2,
    gradients=0,
    optimizer=4,
    accumulation=4,
    logits=8,
    vocab_parallel=False,
    reduce_bytes=4,
    tp_exposed=True,
)


def recipe_for(framework: Framework, precision: Precision) -> Recipe:
    """The memory recipe of a framework profile (GENERIC: seed 002's recipes by precision)."""
    if framework is Framework.KEMPNERFORGE:
        # Float8 in KempnerForge converts the matmuls only; the state stays as in BF16.
        return KEMPNERFORGE
    return Recipe(*STATE_BYTES[precision])


@dataclass(frozen=True)
class Ctx:
    A: Arch
    H: Hardware
    s: int  # sequence length
    precision: Precision
    K: Constants
    reserve_bytes: int
    fragmentation: float
    recipe: Recipe = field(default_factory=lambda: Recipe(*STATE_BYTES[Precision.BF16]))
    framework: Framework = Framework.GENERIC  # the profile: its overlaps and kernels (timing)
    overlaps: Overlaps | None = None  # the profile's overlaps with the request's switches

    @property
    def wb(self) -> int:
        return self.recipe.weights

    @property
    def gb(self) -> int:
        return self.recipe.gradients

    @property
    def ob(self) -> int:
        return self.recipe.optimizer

    @property
    def budget(self) -> int:
        """Bytes the tenants may use: HBM less the fixed reserve, less fragmentation (seed 002)."""
        return int((self.H.hbm - self.reserve_bytes) / (1.0 + self.fragmentation))

    def reserve_for(self, used: int) -> int:
        return self.reserve_bytes + int(self.fragmentation * used + 0.999999)


def n_chunk(L: int, pp: int, v: int) -> int:
    """Layers per model chunk on the heaviest stage (uneven splits round up)."""
    return -(-L // (pp * v))


def n_stage(L: int, pp: int, v: int) -> Fraction:
    return Fraction(v * n_chunk(L, pp, v))


def reserve_default(gib: float) -> int:
    return int(gib * GIB)
