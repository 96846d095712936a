"""The scheduler queries' answers. Every field says its unit; nothing here depends on timing, so
the same request gives the same answer (and the same bytes)."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

from meshplan.solver.results import MemoryBill, Wall
from meshplan.solver.scheduler.requests import AdmitObjective, CompatibilityLevel
from meshplan.solver.scheduler.status import CellStatus
from meshplan.solver.schema import ParallelConfig


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Cell(_Strict):
    """One cell of a scaling curve."""

    cluster: str = Field(description="Cluster template label.")
    num_gpus: int = Field(description="The grid's GPU count (count).")
    status: CellStatus = Field(description="PLANNED, DOES_NOT_FIT, COUNT_NOT_USABLE or UNSOLVED.")
    reason: str = Field(default="", description="Why the cell is not planned (words).")
    config: ParallelConfig | None = Field(default=None, description="The layout (when planned).")
    num_gpus_used: int = Field(default=0, description="GPUs the layout occupies (count).")
    global_batch_tokens: int = Field(default=0, description="Tokens per step (tokens).")
    step_time_s: float = Field(default=0.0, description="Time per step, corrected (s).")
    tokens_per_s: float = Field(default=0.0, description="Throughput, corrected (tokens/s).")
    goodput_tokens_per_s: float = Field(
        default=0.0, description="Throughput x statistical efficiency (tokens/s)."
    )
    statistical_efficiency: float = Field(
        default=0.0, description="Progress per token against the reference batch (fraction)."
    )
    mfu: float = Field(default=0.0, description="Model FLOPs utilisation, corrected (fraction).")
    model_step_time_s: float = Field(
        default=0.0, description="The cost model's step time before any correction (s)."
    )
    memory_headroom_bytes: int = Field(
        default=0, description="HBM minus the memory bill on the most loaded GPU (bytes)."
    )
    binding_wall: Wall = Field(default=Wall.NONE, description="What stops the next step up.")
    band_low_tokens_per_s: float = Field(
        default=0.0, description="Slow end of the uncertainty band (tokens/s)."
    )
    band_high_tokens_per_s: float = Field(
        default=0.0, description="Fast end of the uncertainty band (tokens/s)."
    )
    extrapolates: bool = Field(
        default=False, description="Far beyond the observed cells (see the fit's note)."
    )
    envelope_goodput_tokens_per_s: float = Field(
        default=0.0, description="Best goodput over this type's counts <= num_gpus (tokens/s)."
    )
    envelope_num_gpus: int = Field(
        default=0, description="GPUs the envelope's best cell really uses (count; 0: none yet)."
    )
    speedup: float = Field(
        default=0.0, description="Goodput over the smallest feasible count's (ratio)."
    )
    envelope_speedup: float = Field(
        default=0.0, description="Envelope over the smallest feasible count's goodput (ratio)."
    )


class ClusterCurve(_Strict):
    """Per GPU type: where the curve starts, its scale unit, knee and end."""

    cluster: str = Field(description="Cluster template label.")
    gpu: str = Field(description="Catalog GPU name.")
    gpus_per_node: int = Field(description="GPUs per node (count).")
    min_feasible_gpus: int = Field(description="Smallest grid count that plans (count; 0: none).")
    scale_unit_gpus: int = Field(
        description="GPUs one more data-parallel replica adds at the best cell's tp*pp*cp (count)."
    )
    knee_gpus: int = Field(
        description="Smallest count past which the envelope gains < knee_gain per doubling (count; 0: not within the grid)."
    )
    largest_useful_gpus: int = Field(
        description="GPUs used where the envelope stops rising (count; 0: none)."
    )
    largest_useful_reason: str = Field(description="Why more GPUs stop helping there (words).")
    peak_goodput_tokens_per_s: float = Field(description="The envelope's top (tokens/s).")


class ObservationFit(_Strict):
    """The per-job correction fitted to the observations."""

    num_observations: int = Field(description="Observations used (count).")
    compute_factor: float = Field(description="Multiplies compute, recompute and optimizer time.")
    communication_factor: float = Field(description="Multiplies exposed communication time.")
    relative_error: float = Field(
        description="Band half-width at an observed count: the largest leave-one-out error (fraction)."
    )
    residuals: list[float] = Field(
        description="Per observation: predicted / measured step time - 1, after the fit (fraction)."
    )
    note: str = Field(description="How the band and the extrapolation flag are derived (words).")


class CurveResult(_Strict):
    """The answer to ScalingCurve()."""

    cache_key: str = Field(description="Hash of the canonical request and the cost-model version.")
    cost_model_version: str = Field(description="Digest of the planning core's code and data.")
    knee_gain: float = Field(description="The knee's threshold per doubling (fraction).")
    cells: list[Cell] = Field(description="One per (cluster, count), by cluster then count.")
    clusters: list[ClusterCurve] = Field(description="One per cluster template.")
    fit: ObservationFit | None = Field(default=None, description="Set when observations were sent.")
    band_source: str = Field(description="Where the uncertainty band comes from (words).")


class StateMove(_Strict):
    """State the worst-placed GPU must receive after the replan (bytes per GPU)."""

    weights_bytes: int = Field(description="Weights received by the worst GPU (bytes).")
    optimizer_bytes: int = Field(description="Optimizer state received by the worst GPU (bytes).")
    total_bytes: int = Field(description="Sum (bytes).")
    state_bytes_per_gpu: int = Field(
        description="Weights + optimizer each GPU holds after (bytes)."
    )


class ReplanRow(_Strict):
    """The new layout at one cluster size."""

    delta_nodes: int = Field(description="Nodes lost (negative) or gained (count).")
    num_gpus: int = Field(description="GPUs available after the event (count).")
    status: CellStatus = Field(description="PLANNED, DOES_NOT_FIT or COUNT_NOT_USABLE.")
    reason: str = Field(default="", description="Why nothing is planned at this level (words).")
    config: ParallelConfig | None = Field(default=None, description="The new layout.")
    num_gpus_used: int = Field(default=0, description="GPUs it occupies (count).")
    memory: MemoryBill | None = Field(default=None, description="Its memory bill (bytes per GPU).")
    global_batch_tokens: int = Field(default=0, description="Tokens per step (tokens).")
    step_time_s: float = Field(default=0.0, description="Time per step (s).")
    tokens_per_s: float = Field(default=0.0, description="Throughput (tokens/s).")
    mfu: float = Field(default=0.0, description="Model FLOPs utilisation (fraction).")
    throughput_kept: float = Field(default=0.0, description="tokens/s over before (ratio).")
    free_config: ParallelConfig | None = Field(
        default=None, description="The free optimum at this size."
    )
    free_tokens_per_s: float = Field(default=0.0, description="Its throughput (tokens/s).")
    price_of_compatibility: float = Field(
        default=0.0, description="1 - tokens/s over the free optimum's (fraction)."
    )
    state_move: StateMove | None = Field(default=None, description="What changes owner.")
    restart_implied: bool = Field(default=False, description="True if the job must restart.")
    restart_reason: str = Field(default="", description="Why (or why not) it restarts (words).")
    least_level: CompatibilityLevel | None = Field(
        default=None, description="When nothing fits at the level: the least level that fits."
    )
    min_nodes_at_level: int = Field(
        default=0, description="When nothing fits: nodes at which the level fits (count; 0: none)."
    )


class ReplanResult(_Strict):
    """The answer to Replan()."""

    cache_key: str = Field(description="Hash of the canonical request and the cost-model version.")
    cost_model_version: str = Field(description="Digest of the planning core's code and data.")
    compatibility: CompatibilityLevel = Field(description="The level asked.")
    before_num_gpus: int = Field(description="GPUs before the event (count).")
    before_tokens_per_s: float = Field(description="The running layout's throughput (tokens/s).")
    before_memory: MemoryBill = Field(description="The running layout's memory bill.")
    before_global_batch_tokens: int = Field(description="Its tokens per step (tokens).")
    rows: list[ReplanRow] = Field(description="One per event (k = 1..K in precompute mode).")
    notes: list[str] = Field(default_factory=list, description="Things to look at (sentences).")


class AdmitStatus(str, Enum):
    """Whether a GPU type can meet the deadline."""

    MEETS_DEADLINE = "MEETS_DEADLINE"
    TOO_SLOW = "TOO_SLOW"  # it plans, but even its fastest count finishes late
    DOES_NOT_FIT = "DOES_NOT_FIT"  # no count available plans


class Allocation(_Strict):
    """One GPU type's answer."""

    cluster: str = Field(description="Cluster template label.")
    status: AdmitStatus = Field(description="MEETS_DEADLINE, TOO_SLOW or DOES_NOT_FIT.")
    reason: str = Field(default="", description="Why it cannot (words).")
    num_gpus: int = Field(default=0, description="GPUs to allocate (count; those the layout uses).")
    config: ParallelConfig | None = Field(default=None, description="The layout.")
    tokens_per_s: float = Field(default=0.0, description="Throughput the estimate uses (tokens/s).")
    finish_s: float = Field(default=0.0, description="Time from start to the end of the work (s).")
    gpu_hours: float = Field(default=0.0, description="num_gpus x finish (GPU-hours).")
    cost: float = Field(default=0.0, description="gpu_hours x price (currency; 0: no price).")
    earliest_finish_s: float = Field(
        default=0.0, description="Fastest finish of this type over its counts (s; 0: none)."
    )
    earliest_finish_gpus: int = Field(default=0, description="GPUs of that fastest finish (count).")


class AdmitResult(_Strict):
    """The answer to SmallestAllocation()."""

    cache_key: str = Field(description="Hash of the canonical request and the cost-model version.")
    cost_model_version: str = Field(description="Digest of the planning core's code and data.")
    curve_cache_key: str = Field(description="Cache key of the scaling curve it walked.")
    time_available_s: float = Field(description="Deadline minus start (s).")
    objective: AdmitObjective = Field(description="What the pick minimises.")
    feasible: bool = Field(description="True if some type meets the deadline.")
    pick: Allocation | None = Field(default=None, description="The overall pick (when feasible).")
    allocations: list[Allocation] = Field(description="One per cluster template.")
    reason: str = Field(default="", description="When none can: the earliest finish and why.")


class FrontPoint(_Strict):
    """One (type, count) point of the front."""

    cluster: str = Field(description="Cluster template label.")
    num_gpus: int = Field(description="The grid count (count).")
    num_gpus_used: int = Field(description="GPUs the layout uses (count).")
    config: ParallelConfig = Field(description="The layout.")
    days: float = Field(description="Wall-clock time to train the budget (days).")
    gpu_hours: float = Field(description="num_gpus_used x time (GPU-hours).")
    cost: float = Field(description="gpu_hours x price (currency; 0: no price).")
    goodput_tokens_per_s: float = Field(description="Goodput (tokens/s).")
    binding_wall: Wall = Field(description="What stops the next step up.")
    on_front_gpu_hours: bool = Field(description="Not dominated in (days, GPU-hours).")
    on_front_cost: bool = Field(description="Not dominated in (days, cost); false without prices.")
    days_fast: float = Field(
        default=0.0, description="Days at the fast end of the cell's error band (days; 0: none)."
    )
    days_slow: float = Field(
        default=0.0, description="Days at the slow end of the cell's error band (days; 0: none)."
    )


class FrontCluster(_Strict):
    """Per GPU type: where more GPUs stop helping."""

    cluster: str = Field(description="Cluster template label.")
    largest_useful_gpus: int = Field(description="GPUs where the envelope stops rising (count).")
    reason: str = Field(description="Why (words).")
    critical_batch_gpus: int = Field(
        description="Smallest count whose plan is capped by the critical batch (count; 0: none)."
    )


class FrontResult(_Strict):
    """The answer to TrainingFront()."""

    cache_key: str = Field(description="Hash of the canonical request and the cost-model version.")
    cost_model_version: str = Field(description="Digest of the planning core's code and data.")
    curve_cache_key: str = Field(description="Cache key of the scaling curve it read.")
    token_budget: int = Field(description="Tokens to train (tokens).")
    priced: bool = Field(description="True if every cluster has a price (the cost front is set).")
    points: list[FrontPoint] = Field(description="Every planned point, by days.")
    clusters: list[FrontCluster] = Field(description="One per cluster template.")
