"""The scheduler queries' requests: a count grid per GPU type, a batch policy, observations.

Single-field limits live here (pydantic); rules across fields (a grid above a cluster's cap, an
observation for a cell not in the grid, ...) are checked by `validate.py`, which names the field.
"""

from __future__ import annotations

from enum import Enum

from pydantic import Field

from meshplan.solver.scheduler.policy import BatchPolicy, _Strict
from meshplan.solver.scheduler.policy import BatchPolicyKind as BatchPolicyKind  # re-exported
from meshplan.solver.scheduler.policy import StatisticalEfficiency as StatisticalEfficiency
from meshplan.solver.schema import (
    ClusterSpec,
    ModelSpec,
    ParallelConfig,
    SearchSpec,
    TrainingSpec,
)

MAX_CLUSTERS = 16
MAX_CELLS = 4096  # cells per query (GPU types x counts)
# Observations per query: each costs one evaluation per distinct (cluster, count, layout) and a
# linear fit; 16,384 of them (~900 KiB on the wire) fit in a 1 MiB request.
MAX_OBSERVATIONS = 16_384


class ClusterTemplate(_Strict):
    """One GPU type: a ClusterSpec without the count, with its cap and price."""

    name: str = Field(default="", description="Label of this type in answers (default: gpu).")
    gpu: str = Field(default="h100-sxm-80gb", description="Catalog GPU name, e.g. h100-sxm-80gb.")
    gpus_per_node: int | None = Field(
        default=None, description="GPUs per node (count; default: catalog).", ge=1, le=1024
    )
    hbm_gib: float | None = Field(
        default=None, description="Override of HBM (GiB).", gt=0, le=65536
    )
    peak_bf16_tflops: float | None = Field(
        default=None, description="Override of the dense BF16 peak (TFLOP/s).", gt=0, le=1e6
    )
    intra_node_gbps: float | None = Field(
        default=None, description="Override of in-node bandwidth per GPU (GB/s).", gt=0, le=1e6
    )
    inter_node_gbps: float | None = Field(
        default=None, description="Override of inter-node bandwidth per GPU (GB/s).", gt=0, le=1e6
    )
    max_gpus: int = Field(
        default=0,
        description="GPUs of this type available (count; 0: no cap below 1,048,576).",
        ge=0,
        le=1_048_576,
    )
    price_per_gpu_hour: float = Field(
        default=0.0, description="Price of one GPU for one hour (currency units; 0: unknown).", ge=0
    )

    @property
    def label(self) -> str:
        return self.name or self.gpu

    def spec(self, num_gpus: int) -> ClusterSpec:
        """The ClusterSpec of this type at a count."""
        return ClusterSpec(
            gpu=self.gpu,
            num_gpus=num_gpus,
            gpus_per_node=self.gpus_per_node,
            hbm_gib=self.hbm_gib,
            peak_bf16_tflops=self.peak_bf16_tflops,
            intra_node_gbps=self.intra_node_gbps,
            inter_node_gbps=self.inter_node_gbps,
        )


class CountGrid(_Strict):
    """GPU counts per type: an explicit list, or whole nodes min..max (with sub_node: first 1, 2,
    4, ... below one node)."""

    counts: list[int] = Field(default_factory=list, description="Explicit GPU counts (count each).")
    min_nodes: int = Field(default=0, description="First whole-node count (nodes; 0: 1).", ge=0)
    max_nodes: int = Field(default=0, description="Last whole-node count (nodes).", ge=0)
    sub_node: bool = Field(default=False, description="Also 1, 2, 4, ... GPUs below one node.")
    clip_to_cap: bool = Field(
        default=False,
        description="Drop a type's counts above its max_gpus instead of rejecting the grid.",
    )


class Observation(_Strict):
    """A measured step time of a cell the caller ran."""

    cluster: str = Field(description="The cluster template's label (its name, or its gpu).")
    num_gpus: int = Field(description="The cell's GPU count (count; must be in the grid).", ge=1)
    config: ParallelConfig = Field(description="The layout that ran.")
    step_time_s: float = Field(description="Measured time per optimizer step (s).", gt=0, le=1e7)


class SchedulerOptions(_Strict):
    """How each cell is planned, and the knee's threshold."""

    cell_time_limit_s: float = Field(
        default=10.0, description="Solve time cap of each cell's plan (seconds).", gt=0, le=3600
    )
    knee_gain: float = Field(
        default=0.05,
        description="Knee: the envelope gains less than this per doubling of GPUs (fraction).",
        gt=0,
        lt=1,
    )


class _Query(_Strict):
    model: ModelSpec = Field(description="The transformer.")
    training: TrainingSpec = Field(
        default_factory=TrainingSpec,
        description="The step (global_batch_tokens stays 0: the batch policy states the batch).",
    )
    search: SearchSpec = Field(
        default_factory=SearchSpec, description="Pins and memory reserve applied to every cell."
    )
    options: SchedulerOptions = Field(
        default_factory=SchedulerOptions, description="Per-cell solve options."
    )


class CurveRequest(_Query):
    """ScalingCurve(): throughput over (GPU type, GPU count), with the envelope and its knee."""

    clusters: list[ClusterTemplate] = Field(description="One template per GPU type (1..16).")
    grid: CountGrid = Field(description="The GPU counts of every type.")
    batch: BatchPolicy = Field(description="The batch every cell trains.")
    observations: list[Observation] = Field(
        default_factory=list,
        description="Measured step times that correct the curve (at most 16,384).",
        max_length=MAX_OBSERVATIONS,
    )


class CompatibilityLevel(str, Enum):
    """What a replan keeps from the running layout."""

    SAME_MODEL_PARALLEL = "SAME_MODEL_PARALLEL"  # tp, pp, cp, ep, virtual stages kept; dp changes
    SAME_TP = "SAME_TP"  # tp kept
    FREE = "FREE"  # anything


class CheckpointReshard(str, Enum):
    """How the job's checkpoint can be reloaded."""

    DP_ONLY = "DP_ONLY"  # across data parallelism only (Megatron-Core's distributed optimizer)
    FULL = "FULL"  # to any layout


class ReplanEvent(_Strict):
    """Lose or gain nodes (delta_nodes), or precompute a table for losing 1..precompute_nodes."""

    delta_nodes: int = Field(
        default=0, description="Nodes lost (negative) or gained (positive).", ge=-1_048_576
    )
    precompute_nodes: int = Field(
        default=0, description="K: one row per loss of k = 1..K nodes (count).", ge=0, le=1024
    )


class ReplanRequest(_Query):
    """Replan(): the layout after losing or gaining nodes, at a compatibility level."""

    cluster: ClusterSpec = Field(description="The cluster the job runs on now.")
    config: ParallelConfig = Field(description="The layout running now.")
    event: ReplanEvent = Field(description="What happens to the cluster.")
    compatibility: CompatibilityLevel = Field(description="What the new layout keeps.")
    batch: BatchPolicy = Field(
        description="FIXED_GLOBAL / FIXED_PER_REPLICA with 0 keep the running layout's batch."
    )
    checkpoint_reshard: CheckpointReshard = Field(
        default=CheckpointReshard.FULL, description="How the checkpoint reloads (default FULL)."
    )
    allow_idle_gpus: bool = Field(
        default=True, description="The new layout may leave some of the GPUs idle."
    )


class AdmitObjective(str, Enum):
    """What the overall pick minimises among the allocations that meet the deadline."""

    FEWEST_GPUS = "FEWEST_GPUS"
    CHEAPEST = "CHEAPEST"
    FEWEST_GPU_HOURS = "FEWEST_GPU_HOURS"


class Work(_Strict):
    """Work left: tokens or optimizer steps (one of them)."""

    tokens: int = Field(default=0, description="Training tokens left (tokens).", ge=0, le=2**62)
    steps: int = Field(default=0, description="Optimizer steps left (count).", ge=0, le=2**40)


class AdmitRequest(_Query):
    """SmallestAllocation(): the fewest (or cheapest) GPUs per type that meet a deadline."""

    clusters: list[ClusterTemplate] = Field(
        description="Allowed GPU types; max_gpus is the count available, price optional."
    )
    batch: BatchPolicy = Field(description="The batch the job trains.")
    work: Work = Field(description="Work left.")
    deadline_s: float = Field(
        default=0.0, description="Time from now to the deadline (s; or use deadline_unix_s).", ge=0
    )
    deadline_unix_s: float = Field(
        default=0.0, description="Deadline as a Unix time (s since 1970; 0: use deadline_s).", ge=0
    )
    now_unix_s: float = Field(
        default=0.0, description="The time the allocation would start (Unix s; 0: the clock).", ge=0
    )
    startup_overhead_s: float = Field(
        default=0.0, description="Time to start before the first step (s).", ge=0, le=1e8
    )
    downtime_fraction: float = Field(
        default=0.0,
        description="Share of wall time lost to failures and restarts (fraction).",
        ge=0,
        lt=1,
    )
    use_band_upper: bool = Field(
        default=False, description="Plan on the slow end of each cell's uncertainty band."
    )
    objective: AdmitObjective = Field(
        default=AdmitObjective.FEWEST_GPUS, description="What the overall pick minimises."
    )
    grid: CountGrid | None = Field(
        default=None,
        description="Counts to consider (default: 1, 2, 4, ... then whole nodes up to max_gpus).",
    )
    observations: list[Observation] = Field(
        default_factory=list,
        description="Measured step times that correct the estimates (at most 16,384).",
        max_length=MAX_OBSERVATIONS,
    )


class FrontRequest(_Query):
    """TrainingFront(): days against GPU-hours and cost for a token budget."""

    clusters: list[ClusterTemplate] = Field(description="GPU types, with price and cap.")
    grid: CountGrid = Field(description="GPU counts of every type.")
    batch: BatchPolicy = Field(description="The batch every cell trains.")
    token_budget: int = Field(description="Tokens to train (tokens).", ge=1, le=2**62)
    observations: list[Observation] = Field(
        default_factory=list,
        description="Measured step times that correct the estimates (at most 16,384).",
        max_length=MAX_OBSERVATIONS,
    )
