"""Everything a term needs to know about one request, resolved once."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from solver.arch import Arch
from solver.costmodel.constants import Constants
from solver.hardware import GIB, Hardware
from solver.schema import Precision

# Static bytes per parameter (weights, gradients, optimizer incl. fp32 master): seed 002.
STATE_BYTES = {Precision.BF16: (2, 2, 12), Precision.FP8: (1, 2, 6)}
ACT_BYTES = 2  # bf16 activations and collectives
LOGIT_BYTES = 6  # bf16 logits + their fp32 copy for the loss


@dataclass(frozen=True)
class Ctx:
    A: Arch
    H: Hardware
    s: int  # sequence length
    precision: Precision
    K: Constants
    reserve_bytes: int
    fragmentation: float

    @property
    def wb(self) -> int:
        return STATE_BYTES[self.precision][0]

    @property
    def gb(self) -> int:
        return STATE_BYTES[self.precision][1]

    @property
    def ob(self) -> int:
        return STATE_BYTES[self.precision][2]

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
