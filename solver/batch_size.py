"""The global batch a plan may train when the request does not fix it: a published scaling law.

With no `global_batch_tokens`, the solver chooses the batch up to a cap. An explicit
`critical_batch_tokens` is that cap. Without one, the cap is the compute-optimal batch of
DeepSeek LLM's scaling law (Bi et al. 2024, arXiv:2401.02954, §3.1 Eq. 1), fitted on their
IsoFLOP runs:

    B_opt(C) = 0.2920 · C^0.3271   tokens,   C = 6 · N · D   FLOP

with N the active parameters (6 FLOPs per parameter and token, Kaplan et al. 2020) and D the
tokens of the whole run (`train_tokens`, default 20 per active parameter: the compute-optimal
ratio of Hoffmann et al. 2022).
"""

from __future__ import annotations

from meshplan.solver.results import BatchChoice, BatchSource
from meshplan.solver.schema import TrainingSpec

TOKENS_PER_PARAMETER = 20  # Hoffmann et al. 2022 (Chinchilla): compute-optimal D ≈ 20·N
FLOPS_PER_PARAMETER_TOKEN = 6  # forward + backward (Kaplan et al. 2020, C ≈ 6·N·D)
LAW_COEFFICIENT = 0.2920  # DeepSeek LLM Eq. 1: B_opt = 0.2920 · C^0.3271 (tokens)
LAW_EXPONENT = 0.3271


def optimal_batch_tokens(compute_flops: float) -> float:
    """DeepSeek LLM's compute-optimal batch (tokens) for a compute budget in FLOP (Eq. 1)."""
    if compute_flops <= 0:
        raise ValueError(f"the compute budget must be positive, got {compute_flops}")
    return LAW_COEFFICIENT * compute_flops**LAW_EXPONENT


def batch_choice(training: TrainingSpec, active_params: int) -> BatchChoice:
    """The cap on the global batch (whole sequences, at least one) and why."""
    s = training.seq_len
    if training.global_batch_tokens:
        g = training.global_batch_tokens
        return BatchChoice(
            source=BatchSource.GLOBAL_BATCH,
            cap_tokens=training.critical_batch_tokens,
            reason=f"training.global_batch_tokens fixes the batch at {g:,} tokens",
        )
    if training.critical_batch_tokens:
        cap = training.critical_batch_tokens
        return BatchChoice(
            source=BatchSource.CRITICAL_BATCH,
            cap_tokens=cap,
            reason=f"up to training.critical_batch_tokens = {cap:,} tokens",
        )
    given = training.train_tokens > 0
    d = training.train_tokens if given else TOKENS_PER_PARAMETER * active_params
    c = float(FLOPS_PER_PARAMETER_TOKEN) * active_params * d
    law = optimal_batch_tokens(c)
    cap = max(int(law) // s, 1) * s  # whole sequences, at least one
    origin = (
        "training.train_tokens"
        if given
        else f"{TOKENS_PER_PARAMETER} per parameter, Hoffmann et al. 2022"
    )
    return BatchChoice(
        source=BatchSource.SCALING_LAW,
        cap_tokens=cap,
        train_tokens=d,
        compute_flops=c,
        reason=(
            f"up to {cap:,} tokens ({cap // s:,} sequences of {s:,}): the optimal batch "
            f"0.2920·C^0.3271 = {law:,.0f} tokens of DeepSeek LLM's scaling law (Bi et al. "
            f"2024) for C = 6·N·D = {c:.3g} FLOP, N = {active_params:.3g} active parameters, "
            f"D = {d:.3g} training tokens ({origin}); training.critical_batch_tokens overrides"
        ),
    )
