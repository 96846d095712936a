"""The batch and the counts a space is built over: divisors, the micro-batch counts the global
batch allows (fixed, or chosen under the critical-batch cap) and the smaller GPU counts an
infeasible request's explanation tries."""

from __future__ import annotations

from functools import lru_cache

from meshplan.solver.batch_size import batch_choice
from meshplan.solver.record import record
from meshplan.solver.schema import TrainingSpec

__all__ = [
    "Batch",
    "batch_of",
    "batch_shapes",
    "divisors",
    "divisors_kept",
    "fewer_gpu_counts",
    "microbatch_counts",
]


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@lru_cache(maxsize=4096)
def divisors_kept(n: int) -> tuple[int, ...]:
    """divisors(n), kept: a space's generation asks for the same few numbers many times."""
    return tuple(divisors(n))


def fewer_gpu_counts(n: int, gpn: int) -> list[int]:
    """GPU counts tried below n: m·2^k for m in {1, 3, 5, 7}, whole nodes (or within one)."""
    out = {n}
    for m in (1, 3, 5, 7):
        x = m
        while x < n:
            if x % gpn == 0 or gpn % x == 0:
                out.add(x)
            x *= 2
    return sorted(out, reverse=True)


@record(frozen=True)
class Batch:
    """The global batch: fixed (sequences) or chosen below a cap (sequences)."""

    fixed_seqs: int  # 0 when the solver chooses
    cap_seqs: int  # 0: no cap

    def microbatches(self, dp: int, b: int, pin: int = 0) -> list[int]:
        """Micro-batch counts allowed for (dp, b): the space of the batch identity."""
        return list(microbatch_counts(self.fixed_seqs, self.cap_seqs, dp * b, pin))


@lru_cache(maxsize=4096)
def microbatch_counts(fixed_seqs: int, cap_seqs: int, seqs: int, pin: int) -> tuple[int, ...]:
    """Batch.microbatches, of a micro-batch step of `seqs` sequences (dp·b), kept."""
    if fixed_seqs:
        if fixed_seqs % seqs:
            return ()
        m = fixed_seqs // seqs
        return (m,) if not pin or pin == m else ()
    top = cap_seqs // seqs
    if pin:
        return (pin,) if pin <= top else ()
    if top < 1:
        return ()
    # The largest batch under the cap, and powers of two below it: fewer micro-batches in
    # flight is the only reason to take a smaller batch (pipeline memory).
    out = {top}
    m = 1
    while m < top:
        out.add(m)
        m *= 2
    return tuple(sorted(out))


@lru_cache(maxsize=4096)
def batch_shapes(
    fixed_seqs: int, cap_seqs: int, dp: int, b: int, pin: int
) -> tuple[tuple[int, int, int], ...]:
    """(dp, b, M) for each micro-batch count M of `microbatch_counts` (dp·b sequences a step),
    kept: the grids of one batch at other GPU counts and pins ask for the same shapes."""
    return tuple((dp, b, m) for m in microbatch_counts(fixed_seqs, cap_seqs, dp * b, pin))


def batch_of(training: TrainingSpec, active_params: int) -> Batch:
    s = training.seq_len
    if training.global_batch_tokens:
        cap = training.critical_batch_tokens // s if training.critical_batch_tokens else 0
        return Batch(training.global_batch_tokens // s, cap)
    cap = batch_choice(training, active_params).cap_tokens  # given, or the scaling law's
    return Batch(0, cap // s)
