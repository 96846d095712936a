"""The batch policy every cell trains, on its own so a solver process unpickling a cell's task
imports only this (not every request and answer of the scheduler queries)."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    # Every number finite: an infinite deadline or price has no answer (and no cache key).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class BatchPolicyKind(str, Enum):
    """Which batch every cell trains (the only way throughputs compare across counts)."""

    FIXED_GLOBAL = "FIXED_GLOBAL"  # every cell trains exactly global_batch_tokens
    FIXED_PER_REPLICA = "FIXED_PER_REPLICA"  # global = per_replica_batch_tokens x dp
    FREE = "FREE"  # the planner chooses, up to the cap; goodput weighs it


class StatisticalEfficiency(_Strict):
    """Pollux's statistical efficiency (Qiao et al., OSDI'21, section 3.1): progress per token at
    batch B relative to the reference batch B0 is (B_noise + B0) / (B_noise + B)."""

    noise_scale_tokens: float = Field(
        description="Gradient noise scale B_noise (tokens; McCandlish et al. 2018).", gt=0, le=1e15
    )
    reference_batch_tokens: int = Field(
        description="Batch B0 at which the efficiency is 1 (tokens).", ge=1, le=2**40
    )


class BatchPolicy(_Strict):
    """The batch each cell trains."""

    kind: BatchPolicyKind = Field(description="FIXED_GLOBAL, FIXED_PER_REPLICA or FREE.")
    global_batch_tokens: int = Field(
        default=0,
        description="FIXED_GLOBAL: tokens per step in every cell (a multiple of seq_len).",
        ge=0,
        le=2**40,
    )
    per_replica_batch_tokens: int = Field(
        default=0,
        description="FIXED_PER_REPLICA: tokens per step per data-parallel replica (multiple of seq_len).",
        ge=0,
        le=2**40,
    )
    min_global_batch_tokens: int = Field(
        default=0,
        description="FREE: smallest global batch a cell may train (tokens; 0: none).",
        ge=0,
    )
    max_global_batch_tokens: int = Field(
        default=0,
        description="FREE: largest global batch (tokens; 0: training.critical_batch_tokens, else 4 Mi).",
        ge=0,
        le=2**40,
    )
    statistical_efficiency: StatisticalEfficiency | None = Field(
        default=None, description="Weighs throughput into goodput (absent: goodput = throughput)."
    )
