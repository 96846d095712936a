"""Answers: the plan, its memory bill, its time breakdown, and the solver's account of itself."""

# No `from __future__ import annotations`: pydantic would evaluate every field's annotation
# string when the class is made (typing.ForwardRef compiles each one).
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

from meshplan.solver.schema import ParallelConfig


def _no_items() -> list:
    """An empty list, as a Python function: pydantic reads each default factory's signature, and
    a builtin's (`list`) is parsed from its text signature by tokenize, whose first use compiles
    its large token regex (13 M instructions of the first plan)."""
    return []


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class PlanStatus(str, Enum):
    """Outcome of a plan: proven optimal, best found within the limit, or no layout fits."""

    OPTIMAL = "OPTIMAL"
    FEASIBLE = "FEASIBLE"
    INFEASIBLE = "INFEASIBLE"


class Wall(str, Enum):
    """What stops the next step up: the constraint that binds this plan (the README defines each)."""

    NONE = "NONE"  # compute-bound sweet spot: nothing is tight
    MEMORY = "MEMORY"  # per-GPU memory is nearly full
    WEIGHTS = "WEIGHTS"  # weights alone force model parallelism (tp/pp)
    BUBBLE = "BUBBLE"  # the pipeline bubble costs the most
    COMMUNICATION = "COMMUNICATION"  # exposed communication costs the most
    DP_CAP = "DP_CAP"  # the critical batch caps data parallelism


class BatchSource(str, Enum):
    """What set the global batch of a plan."""

    GLOBAL_BATCH = "GLOBAL_BATCH"  # training.global_batch_tokens fixes it
    CRITICAL_BATCH = "CRITICAL_BATCH"  # the solver chooses it up to training.critical_batch_tokens
    SCALING_LAW = "SCALING_LAW"  # the solver chooses it up to the scaling law's optimal batch


class BatchChoice(_Strict):
    """The global batch a plan may train, and the rule that set it."""

    source: BatchSource = Field(description="What set the batch or its cap.")
    cap_tokens: int = Field(description="Largest global batch allowed (tokens; 0: no cap).")
    train_tokens: int = Field(
        default=0, description="Training tokens D the scaling law assumed (tokens; 0: unused)."
    )
    compute_flops: float = Field(
        default=0.0, description="Compute budget C = 6·N·D the scaling law read (FLOP; 0: unused)."
    )
    reason: str = Field(description="The rule in words, with its source.")


class NumParameters(_Strict):
    """Parameter counts of the model."""

    total: int = Field(description="All parameters (count).")
    active: int = Field(description="Parameters a token passes through (count; = total if dense).")


class MemoryBill(_Strict):
    """Per-GPU memory on the most loaded pipeline stage (bytes)."""

    weights: int = Field(description="Model weights incl. ZeRO-3 gather buffers (bytes).")
    gradients: int = Field(description="Gradients (bytes).")
    optimizer: int = Field(description="Optimizer state incl. fp32 master weights (bytes).")
    activations: int = Field(description="Activations in flight, incl. logits (bytes).")
    reserve: int = Field(description="CUDA context, NCCL buffers, fragmentation (bytes).")
    total: int = Field(description="Sum of the tenants (bytes).")
    hbm: int = Field(description="HBM per GPU (bytes).")
    stage: str = Field(description="Which pipeline stage is the most loaded: first or last.")


class TimeBreakdown(_Strict):
    """Where a step's time goes (seconds)."""

    compute_s: float = Field(description="Model FLOPs at the achievable rate (s).")
    recompute_s: float = Field(description="Recomputed forward work (s).")
    tp_comm_s: float = Field(description="Exposed tensor-parallel collectives (s).")
    cp_comm_s: float = Field(description="Exposed context-parallel K/V exchange (s).")
    ep_comm_s: float = Field(description="Exposed expert-parallel all-to-all (s).")
    pp_comm_s: float = Field(description="Pipeline point-to-point sends (s).")
    dp_comm_s: float = Field(description="Exposed data-parallel / FSDP collectives (s).")
    bubble_s: float = Field(description="Pipeline fill and drain (s).")
    optimizer_s: float = Field(description="Optimizer step (s).")


class ErrorBand(_Strict):
    """The expected error of a prediction, from published runs of its kind the fit never saw."""

    category: str = Field(description="Which published runs the error is read from (words).")
    scope: str = Field(description="cell (category and kernel family), category, or all.")
    num_runs: int = Field(description="Published runs behind the figures (count).")
    median_error: float = Field(description="Median |predicted / measured − 1| (fraction).")
    p90_error: float = Field(description="90th percentile of that error (fraction).")
    signed_median_error: float = Field(
        description="Median predicted / measured − 1 (fraction; > 0: the model is optimistic)."
    )
    low_tokens_per_s: float = Field(description="Slow end: tokens/s / (1 + p90) (tokens/s).")
    high_tokens_per_s: float = Field(description="Fast end: tokens/s / (1 − p90) (tokens/s).")
    basis: str = Field(description="How the band is derived (words).")


class Performance(_Strict):
    """Predicted speed of one step."""

    step_time_s: float = Field(description="Time per optimizer step (s).")
    tokens_per_s: float = Field(description="Training throughput (tokens/s).")
    mfu: float = Field(
        description="Model FLOPs utilisation vs dense BF16 peak; 6N+12Lhs per token, no causal halving."
    )
    hfu: float = Field(description="Hardware FLOPs utilisation: MFU plus recomputed FLOPs.")
    global_batch_tokens: int = Field(description="Tokens per step (tokens).")
    num_gpus_used: int = Field(description="GPUs the plan occupies (count).")
    model_flops_per_token: float = Field(description="Model FLOPs per token (FLOP).")
    bubble_fraction: float = Field(description="Bubble time over step time (fraction).")
    breakdown: TimeBreakdown = Field(description="Step time by component.")
    error_band: ErrorBand | None = Field(
        default=None,
        description="Expected error of this prediction (absent when the shipped fit has none).",
    )


class SolverInfo(_Strict):
    """What the CP-SAT solve reported."""

    status: str = Field(description="CP-SAT status name (OPTIMAL, FEASIBLE, INFEASIBLE, ...).")
    objective: float = Field(
        description="Objective in model units of time per token (see objective_unit_s)."
    )
    bound: float = Field(description="Best proven bound on the objective (same unit).")
    objective_unit_s: float = Field(
        default=0.0, description="Seconds per token of one objective unit (1e-7 of the ideal)."
    )
    gap: float = Field(description="Relative gap between objective and bound (fraction).")
    wall_time_s: float = Field(description="Wall time of the whole plan call (s).")
    solve_time_s: float = Field(description="Wall time inside CP-SAT (s).")
    num_variables: int = Field(
        description="Variables in the largest CP-SAT model solved (count; 0 when the bounds and "
        "an exact scoring of the few points they leave proved the plan without a model)."
    )
    num_constraints: int = Field(
        description="Constraints in the largest CP-SAT model solved (count; 0 without a model)."
    )
    num_layouts: int = Field(description="Layout rows (tp, pp, cp, dp, gpus) in the model (count).")
    used_fallback: bool = Field(description="True if the greedy plan was returned unproven.")


class Explanation(_Strict):
    """Why nothing fits, and what would."""

    reason: str = Field(description="Which constraints cannot hold together, in words.")
    min_gpus: int = Field(description="Smallest GPU count that fits (count; 0: none found).")
    min_memory_bytes: int = Field(
        default=0, description="Least per-GPU memory any layout needs here (bytes)."
    )


class Alternative(_Strict):
    """One more distinct plan, scored."""

    config: ParallelConfig = Field(description="The layout.")
    memory: MemoryBill = Field(description="Its memory bill.")
    performance: Performance = Field(description="Its speed.")
    binding_wall: Wall = Field(description="What binds it.")


class PlanResult(_Strict):
    """The answer to Plan()."""

    status: PlanStatus = Field(description="OPTIMAL, FEASIBLE or INFEASIBLE.")
    config: ParallelConfig | None = Field(default=None, description="The chosen layout.")
    num_parameters: NumParameters = Field(description="Model size.")
    memory: MemoryBill | None = Field(default=None, description="Memory bill of the layout.")
    performance: Performance | None = Field(default=None, description="Speed of the layout.")
    binding_wall: Wall = Field(default=Wall.NONE, description="What stops the next step up.")
    warnings: list[str] = Field(default_factory=_no_items, description="Things to look at.")
    alternatives: list[Alternative] = Field(
        default_factory=_no_items, description="Next-best plans."
    )
    explanation: Explanation | None = Field(default=None, description="Set when infeasible.")
    solver: SolverInfo | None = Field(default=None, description="The solve's own account.")
    batch: BatchChoice | None = Field(
        default=None, description="The global batch's cap and the rule that set it."
    )


class Evaluation(_Strict):
    """The answer to Evaluate()."""

    fits: bool = Field(description="True if every rule holds and memory fits.")
    violations: list[str] = Field(default_factory=_no_items, description="Rules the layout breaks.")
    config: ParallelConfig = Field(description="The layout scored.")
    num_parameters: NumParameters = Field(description="Model size.")
    memory: MemoryBill = Field(description="Memory bill.")
    performance: Performance | None = Field(
        default=None, description="Speed (absent when the layout breaks a structural rule)."
    )
    binding_wall: Wall = Field(default=Wall.NONE, description="What binds it.")
    warnings: list[str] = Field(default_factory=_no_items, description="Things to look at.")
    notes: list[str] = Field(
        default_factory=_no_items,
        description="What the evaluation filled in, e.g. a num_microbatches derived from the batch.",
    )
