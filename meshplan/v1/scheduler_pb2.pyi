from meshplan.v1 import result_pb2 as _result_pb2
from meshplan.v1 import spec_pb2 as _spec_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BatchPolicyKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BATCH_POLICY_KIND_UNSPECIFIED: _ClassVar[BatchPolicyKind]
    BATCH_POLICY_KIND_FIXED_GLOBAL: _ClassVar[BatchPolicyKind]
    BATCH_POLICY_KIND_FIXED_PER_REPLICA: _ClassVar[BatchPolicyKind]
    BATCH_POLICY_KIND_FREE: _ClassVar[BatchPolicyKind]

class CellStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CELL_STATUS_UNSPECIFIED: _ClassVar[CellStatus]
    CELL_STATUS_PLANNED: _ClassVar[CellStatus]
    CELL_STATUS_DOES_NOT_FIT: _ClassVar[CellStatus]
    CELL_STATUS_COUNT_NOT_USABLE: _ClassVar[CellStatus]
    CELL_STATUS_UNSOLVED: _ClassVar[CellStatus]

class CompatibilityLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPATIBILITY_LEVEL_UNSPECIFIED: _ClassVar[CompatibilityLevel]
    COMPATIBILITY_LEVEL_SAME_MODEL_PARALLEL: _ClassVar[CompatibilityLevel]
    COMPATIBILITY_LEVEL_SAME_TP: _ClassVar[CompatibilityLevel]
    COMPATIBILITY_LEVEL_FREE: _ClassVar[CompatibilityLevel]

class CheckpointReshard(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHECKPOINT_RESHARD_UNSPECIFIED: _ClassVar[CheckpointReshard]
    CHECKPOINT_RESHARD_DP_ONLY: _ClassVar[CheckpointReshard]
    CHECKPOINT_RESHARD_FULL: _ClassVar[CheckpointReshard]

class AdmitObjective(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ADMIT_OBJECTIVE_UNSPECIFIED: _ClassVar[AdmitObjective]
    ADMIT_OBJECTIVE_FEWEST_GPUS: _ClassVar[AdmitObjective]
    ADMIT_OBJECTIVE_CHEAPEST: _ClassVar[AdmitObjective]
    ADMIT_OBJECTIVE_FEWEST_GPU_HOURS: _ClassVar[AdmitObjective]

class AdmitStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ADMIT_STATUS_UNSPECIFIED: _ClassVar[AdmitStatus]
    ADMIT_STATUS_MEETS_DEADLINE: _ClassVar[AdmitStatus]
    ADMIT_STATUS_TOO_SLOW: _ClassVar[AdmitStatus]
    ADMIT_STATUS_DOES_NOT_FIT: _ClassVar[AdmitStatus]
BATCH_POLICY_KIND_UNSPECIFIED: BatchPolicyKind
BATCH_POLICY_KIND_FIXED_GLOBAL: BatchPolicyKind
BATCH_POLICY_KIND_FIXED_PER_REPLICA: BatchPolicyKind
BATCH_POLICY_KIND_FREE: BatchPolicyKind
CELL_STATUS_UNSPECIFIED: CellStatus
CELL_STATUS_PLANNED: CellStatus
CELL_STATUS_DOES_NOT_FIT: CellStatus
CELL_STATUS_COUNT_NOT_USABLE: CellStatus
CELL_STATUS_UNSOLVED: CellStatus
COMPATIBILITY_LEVEL_UNSPECIFIED: CompatibilityLevel
COMPATIBILITY_LEVEL_SAME_MODEL_PARALLEL: CompatibilityLevel
COMPATIBILITY_LEVEL_SAME_TP: CompatibilityLevel
COMPATIBILITY_LEVEL_FREE: CompatibilityLevel
CHECKPOINT_RESHARD_UNSPECIFIED: CheckpointReshard
CHECKPOINT_RESHARD_DP_ONLY: CheckpointReshard
CHECKPOINT_RESHARD_FULL: CheckpointReshard
ADMIT_OBJECTIVE_UNSPECIFIED: AdmitObjective
ADMIT_OBJECTIVE_FEWEST_GPUS: AdmitObjective
ADMIT_OBJECTIVE_CHEAPEST: AdmitObjective
ADMIT_OBJECTIVE_FEWEST_GPU_HOURS: AdmitObjective
ADMIT_STATUS_UNSPECIFIED: AdmitStatus
ADMIT_STATUS_MEETS_DEADLINE: AdmitStatus
ADMIT_STATUS_TOO_SLOW: AdmitStatus
ADMIT_STATUS_DOES_NOT_FIT: AdmitStatus

class StatisticalEfficiency(_message.Message):
    __slots__ = ("noise_scale_tokens", "reference_batch_tokens")
    NOISE_SCALE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_BATCH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    noise_scale_tokens: float
    reference_batch_tokens: int
    def __init__(self, noise_scale_tokens: _Optional[float] = ..., reference_batch_tokens: _Optional[int] = ...) -> None: ...

class BatchPolicy(_message.Message):
    __slots__ = ("kind", "global_batch_tokens", "per_replica_batch_tokens", "min_global_batch_tokens", "max_global_batch_tokens", "statistical_efficiency")
    KIND_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_BATCH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PER_REPLICA_BATCH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MIN_GLOBAL_BATCH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_GLOBAL_BATCH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STATISTICAL_EFFICIENCY_FIELD_NUMBER: _ClassVar[int]
    kind: BatchPolicyKind
    global_batch_tokens: int
    per_replica_batch_tokens: int
    min_global_batch_tokens: int
    max_global_batch_tokens: int
    statistical_efficiency: StatisticalEfficiency
    def __init__(self, kind: _Optional[_Union[BatchPolicyKind, str]] = ..., global_batch_tokens: _Optional[int] = ..., per_replica_batch_tokens: _Optional[int] = ..., min_global_batch_tokens: _Optional[int] = ..., max_global_batch_tokens: _Optional[int] = ..., statistical_efficiency: _Optional[_Union[StatisticalEfficiency, _Mapping]] = ...) -> None: ...

class ClusterTemplate(_message.Message):
    __slots__ = ("name", "gpu", "gpus_per_node", "hbm_gib", "peak_bf16_tflops", "intra_node_gbps", "inter_node_gbps", "max_gpus", "price_per_gpu_hour")
    NAME_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    HBM_GIB_FIELD_NUMBER: _ClassVar[int]
    PEAK_BF16_TFLOPS_FIELD_NUMBER: _ClassVar[int]
    INTRA_NODE_GBPS_FIELD_NUMBER: _ClassVar[int]
    INTER_NODE_GBPS_FIELD_NUMBER: _ClassVar[int]
    MAX_GPUS_FIELD_NUMBER: _ClassVar[int]
    PRICE_PER_GPU_HOUR_FIELD_NUMBER: _ClassVar[int]
    name: str
    gpu: str
    gpus_per_node: int
    hbm_gib: float
    peak_bf16_tflops: float
    intra_node_gbps: float
    inter_node_gbps: float
    max_gpus: int
    price_per_gpu_hour: float
    def __init__(self, name: _Optional[str] = ..., gpu: _Optional[str] = ..., gpus_per_node: _Optional[int] = ..., hbm_gib: _Optional[float] = ..., peak_bf16_tflops: _Optional[float] = ..., intra_node_gbps: _Optional[float] = ..., inter_node_gbps: _Optional[float] = ..., max_gpus: _Optional[int] = ..., price_per_gpu_hour: _Optional[float] = ...) -> None: ...

class CountGrid(_message.Message):
    __slots__ = ("counts", "min_nodes", "max_nodes", "sub_node", "clip_to_cap")
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    MIN_NODES_FIELD_NUMBER: _ClassVar[int]
    MAX_NODES_FIELD_NUMBER: _ClassVar[int]
    SUB_NODE_FIELD_NUMBER: _ClassVar[int]
    CLIP_TO_CAP_FIELD_NUMBER: _ClassVar[int]
    counts: _containers.RepeatedScalarFieldContainer[int]
    min_nodes: int
    max_nodes: int
    sub_node: bool
    clip_to_cap: bool
    def __init__(self, counts: _Optional[_Iterable[int]] = ..., min_nodes: _Optional[int] = ..., max_nodes: _Optional[int] = ..., sub_node: _Optional[bool] = ..., clip_to_cap: _Optional[bool] = ...) -> None: ...

class Observation(_message.Message):
    __slots__ = ("cluster", "num_gpus", "config", "step_time_s")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    NUM_GPUS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    STEP_TIME_S_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    num_gpus: int
    config: _spec_pb2.ParallelConfig
    step_time_s: float
    def __init__(self, cluster: _Optional[str] = ..., num_gpus: _Optional[int] = ..., config: _Optional[_Union[_spec_pb2.ParallelConfig, _Mapping]] = ..., step_time_s: _Optional[float] = ...) -> None: ...

class SchedulerOptions(_message.Message):
    __slots__ = ("cell_time_limit_s", "knee_gain")
    CELL_TIME_LIMIT_S_FIELD_NUMBER: _ClassVar[int]
    KNEE_GAIN_FIELD_NUMBER: _ClassVar[int]
    cell_time_limit_s: float
    knee_gain: float
    def __init__(self, cell_time_limit_s: _Optional[float] = ..., knee_gain: _Optional[float] = ...) -> None: ...

class ScalingCurveRequest(_message.Message):
    __slots__ = ("model", "training", "search", "options", "clusters", "grid", "batch", "observations")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TRAINING_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    GRID_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    model: _spec_pb2.ModelSpec
    training: _spec_pb2.TrainingSpec
    search: _spec_pb2.SearchSpec
    options: SchedulerOptions
    clusters: _containers.RepeatedCompositeFieldContainer[ClusterTemplate]
    grid: CountGrid
    batch: BatchPolicy
    observations: _containers.RepeatedCompositeFieldContainer[Observation]
    def __init__(self, model: _Optional[_Union[_spec_pb2.ModelSpec, _Mapping]] = ..., training: _Optional[_Union[_spec_pb2.TrainingSpec, _Mapping]] = ..., search: _Optional[_Union[_spec_pb2.SearchSpec, _Mapping]] = ..., options: _Optional[_Union[SchedulerOptions, _Mapping]] = ..., clusters: _Optional[_Iterable[_Union[ClusterTemplate, _Mapping]]] = ..., grid: _Optional[_Union[CountGrid, _Mapping]] = ..., batch: _Optional[_Union[BatchPolicy, _Mapping]] = ..., observations: _Optional[_Iterable[_Union[Observation, _Mapping]]] = ...) -> None: ...

class CurveCell(_message.Message):
    __slots__ = ("cluster", "num_gpus", "status", "reason", "config", "num_gpus_used", "global_batch_tokens", "step_time_s", "tokens_per_s", "goodput_tokens_per_s", "statistical_efficiency", "mfu", "model_step_time_s", "memory_headroom_bytes", "binding_wall", "band_low_tokens_per_s", "band_high_tokens_per_s", "extrapolates", "envelope_goodput_tokens_per_s", "envelope_num_gpus", "speedup", "envelope_speedup")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    NUM_GPUS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    NUM_GPUS_USED_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_BATCH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STEP_TIME_S_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    GOODPUT_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    STATISTICAL_EFFICIENCY_FIELD_NUMBER: _ClassVar[int]
    MFU_FIELD_NUMBER: _ClassVar[int]
    MODEL_STEP_TIME_S_FIELD_NUMBER: _ClassVar[int]
    MEMORY_HEADROOM_BYTES_FIELD_NUMBER: _ClassVar[int]
    BINDING_WALL_FIELD_NUMBER: _ClassVar[int]
    BAND_LOW_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    BAND_HIGH_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    EXTRAPOLATES_FIELD_NUMBER: _ClassVar[int]
    ENVELOPE_GOODPUT_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    ENVELOPE_NUM_GPUS_FIELD_NUMBER: _ClassVar[int]
    SPEEDUP_FIELD_NUMBER: _ClassVar[int]
    ENVELOPE_SPEEDUP_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    num_gpus: int
    status: CellStatus
    reason: str
    config: _spec_pb2.ParallelConfig
    num_gpus_used: int
    global_batch_tokens: int
    step_time_s: float
    tokens_per_s: float
    goodput_tokens_per_s: float
    statistical_efficiency: float
    mfu: float
    model_step_time_s: float
    memory_headroom_bytes: int
    binding_wall: _result_pb2.Wall
    band_low_tokens_per_s: float
    band_high_tokens_per_s: float
    extrapolates: bool
    envelope_goodput_tokens_per_s: float
    envelope_num_gpus: int
    speedup: float
    envelope_speedup: float
    def __init__(self, cluster: _Optional[str] = ..., num_gpus: _Optional[int] = ..., status: _Optional[_Union[CellStatus, str]] = ..., reason: _Optional[str] = ..., config: _Optional[_Union[_spec_pb2.ParallelConfig, _Mapping]] = ..., num_gpus_used: _Optional[int] = ..., global_batch_tokens: _Optional[int] = ..., step_time_s: _Optional[float] = ..., tokens_per_s: _Optional[float] = ..., goodput_tokens_per_s: _Optional[float] = ..., statistical_efficiency: _Optional[float] = ..., mfu: _Optional[float] = ..., model_step_time_s: _Optional[float] = ..., memory_headroom_bytes: _Optional[int] = ..., binding_wall: _Optional[_Union[_result_pb2.Wall, str]] = ..., band_low_tokens_per_s: _Optional[float] = ..., band_high_tokens_per_s: _Optional[float] = ..., extrapolates: _Optional[bool] = ..., envelope_goodput_tokens_per_s: _Optional[float] = ..., envelope_num_gpus: _Optional[int] = ..., speedup: _Optional[float] = ..., envelope_speedup: _Optional[float] = ...) -> None: ...

class ClusterCurve(_message.Message):
    __slots__ = ("cluster", "gpu", "gpus_per_node", "min_feasible_gpus", "scale_unit_gpus", "knee_gpus", "largest_useful_gpus", "largest_useful_reason", "peak_goodput_tokens_per_s")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    MIN_FEASIBLE_GPUS_FIELD_NUMBER: _ClassVar[int]
    SCALE_UNIT_GPUS_FIELD_NUMBER: _ClassVar[int]
    KNEE_GPUS_FIELD_NUMBER: _ClassVar[int]
    LARGEST_USEFUL_GPUS_FIELD_NUMBER: _ClassVar[int]
    LARGEST_USEFUL_REASON_FIELD_NUMBER: _ClassVar[int]
    PEAK_GOODPUT_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    gpu: str
    gpus_per_node: int
    min_feasible_gpus: int
    scale_unit_gpus: int
    knee_gpus: int
    largest_useful_gpus: int
    largest_useful_reason: str
    peak_goodput_tokens_per_s: float
    def __init__(self, cluster: _Optional[str] = ..., gpu: _Optional[str] = ..., gpus_per_node: _Optional[int] = ..., min_feasible_gpus: _Optional[int] = ..., scale_unit_gpus: _Optional[int] = ..., knee_gpus: _Optional[int] = ..., largest_useful_gpus: _Optional[int] = ..., largest_useful_reason: _Optional[str] = ..., peak_goodput_tokens_per_s: _Optional[float] = ...) -> None: ...

class ObservationFit(_message.Message):
    __slots__ = ("num_observations", "compute_factor", "communication_factor", "relative_error", "residuals", "note")
    NUM_OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_FACTOR_FIELD_NUMBER: _ClassVar[int]
    COMMUNICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    RELATIVE_ERROR_FIELD_NUMBER: _ClassVar[int]
    RESIDUALS_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    num_observations: int
    compute_factor: float
    communication_factor: float
    relative_error: float
    residuals: _containers.RepeatedScalarFieldContainer[float]
    note: str
    def __init__(self, num_observations: _Optional[int] = ..., compute_factor: _Optional[float] = ..., communication_factor: _Optional[float] = ..., relative_error: _Optional[float] = ..., residuals: _Optional[_Iterable[float]] = ..., note: _Optional[str] = ...) -> None: ...

class ScalingCurveResponse(_message.Message):
    __slots__ = ("cache_key", "cost_model_version", "knee_gain", "cells", "clusters", "fit", "band_source")
    CACHE_KEY_FIELD_NUMBER: _ClassVar[int]
    COST_MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    KNEE_GAIN_FIELD_NUMBER: _ClassVar[int]
    CELLS_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    FIT_FIELD_NUMBER: _ClassVar[int]
    BAND_SOURCE_FIELD_NUMBER: _ClassVar[int]
    cache_key: str
    cost_model_version: str
    knee_gain: float
    cells: _containers.RepeatedCompositeFieldContainer[CurveCell]
    clusters: _containers.RepeatedCompositeFieldContainer[ClusterCurve]
    fit: ObservationFit
    band_source: str
    def __init__(self, cache_key: _Optional[str] = ..., cost_model_version: _Optional[str] = ..., knee_gain: _Optional[float] = ..., cells: _Optional[_Iterable[_Union[CurveCell, _Mapping]]] = ..., clusters: _Optional[_Iterable[_Union[ClusterCurve, _Mapping]]] = ..., fit: _Optional[_Union[ObservationFit, _Mapping]] = ..., band_source: _Optional[str] = ...) -> None: ...

class ReplanEvent(_message.Message):
    __slots__ = ("delta_nodes", "precompute_nodes")
    DELTA_NODES_FIELD_NUMBER: _ClassVar[int]
    PRECOMPUTE_NODES_FIELD_NUMBER: _ClassVar[int]
    delta_nodes: int
    precompute_nodes: int
    def __init__(self, delta_nodes: _Optional[int] = ..., precompute_nodes: _Optional[int] = ...) -> None: ...

class ReplanRequest(_message.Message):
    __slots__ = ("model", "training", "search", "options", "cluster", "config", "event", "compatibility", "batch", "checkpoint_reshard", "allow_idle_gpus")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TRAINING_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    COMPATIBILITY_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_RESHARD_FIELD_NUMBER: _ClassVar[int]
    ALLOW_IDLE_GPUS_FIELD_NUMBER: _ClassVar[int]
    model: _spec_pb2.ModelSpec
    training: _spec_pb2.TrainingSpec
    search: _spec_pb2.SearchSpec
    options: SchedulerOptions
    cluster: _spec_pb2.ClusterSpec
    config: _spec_pb2.ParallelConfig
    event: ReplanEvent
    compatibility: CompatibilityLevel
    batch: BatchPolicy
    checkpoint_reshard: CheckpointReshard
    allow_idle_gpus: bool
    def __init__(self, model: _Optional[_Union[_spec_pb2.ModelSpec, _Mapping]] = ..., training: _Optional[_Union[_spec_pb2.TrainingSpec, _Mapping]] = ..., search: _Optional[_Union[_spec_pb2.SearchSpec, _Mapping]] = ..., options: _Optional[_Union[SchedulerOptions, _Mapping]] = ..., cluster: _Optional[_Union[_spec_pb2.ClusterSpec, _Mapping]] = ..., config: _Optional[_Union[_spec_pb2.ParallelConfig, _Mapping]] = ..., event: _Optional[_Union[ReplanEvent, _Mapping]] = ..., compatibility: _Optional[_Union[CompatibilityLevel, str]] = ..., batch: _Optional[_Union[BatchPolicy, _Mapping]] = ..., checkpoint_reshard: _Optional[_Union[CheckpointReshard, str]] = ..., allow_idle_gpus: _Optional[bool] = ...) -> None: ...

class StateMove(_message.Message):
    __slots__ = ("weights_bytes", "optimizer_bytes", "total_bytes", "state_bytes_per_gpu")
    WEIGHTS_BYTES_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_BYTES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    STATE_BYTES_PER_GPU_FIELD_NUMBER: _ClassVar[int]
    weights_bytes: int
    optimizer_bytes: int
    total_bytes: int
    state_bytes_per_gpu: int
    def __init__(self, weights_bytes: _Optional[int] = ..., optimizer_bytes: _Optional[int] = ..., total_bytes: _Optional[int] = ..., state_bytes_per_gpu: _Optional[int] = ...) -> None: ...

class ReplanRow(_message.Message):
    __slots__ = ("delta_nodes", "num_gpus", "status", "reason", "config", "num_gpus_used", "memory", "global_batch_tokens", "step_time_s", "tokens_per_s", "mfu", "throughput_kept", "free_config", "free_tokens_per_s", "price_of_compatibility", "state_move", "restart_implied", "restart_reason", "least_level", "min_nodes_at_level")
    DELTA_NODES_FIELD_NUMBER: _ClassVar[int]
    NUM_GPUS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    NUM_GPUS_USED_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_BATCH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STEP_TIME_S_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    MFU_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_KEPT_FIELD_NUMBER: _ClassVar[int]
    FREE_CONFIG_FIELD_NUMBER: _ClassVar[int]
    FREE_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    PRICE_OF_COMPATIBILITY_FIELD_NUMBER: _ClassVar[int]
    STATE_MOVE_FIELD_NUMBER: _ClassVar[int]
    RESTART_IMPLIED_FIELD_NUMBER: _ClassVar[int]
    RESTART_REASON_FIELD_NUMBER: _ClassVar[int]
    LEAST_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MIN_NODES_AT_LEVEL_FIELD_NUMBER: _ClassVar[int]
    delta_nodes: int
    num_gpus: int
    status: CellStatus
    reason: str
    config: _spec_pb2.ParallelConfig
    num_gpus_used: int
    memory: _result_pb2.MemoryBill
    global_batch_tokens: int
    step_time_s: float
    tokens_per_s: float
    mfu: float
    throughput_kept: float
    free_config: _spec_pb2.ParallelConfig
    free_tokens_per_s: float
    price_of_compatibility: float
    state_move: StateMove
    restart_implied: bool
    restart_reason: str
    least_level: CompatibilityLevel
    min_nodes_at_level: int
    def __init__(self, delta_nodes: _Optional[int] = ..., num_gpus: _Optional[int] = ..., status: _Optional[_Union[CellStatus, str]] = ..., reason: _Optional[str] = ..., config: _Optional[_Union[_spec_pb2.ParallelConfig, _Mapping]] = ..., num_gpus_used: _Optional[int] = ..., memory: _Optional[_Union[_result_pb2.MemoryBill, _Mapping]] = ..., global_batch_tokens: _Optional[int] = ..., step_time_s: _Optional[float] = ..., tokens_per_s: _Optional[float] = ..., mfu: _Optional[float] = ..., throughput_kept: _Optional[float] = ..., free_config: _Optional[_Union[_spec_pb2.ParallelConfig, _Mapping]] = ..., free_tokens_per_s: _Optional[float] = ..., price_of_compatibility: _Optional[float] = ..., state_move: _Optional[_Union[StateMove, _Mapping]] = ..., restart_implied: _Optional[bool] = ..., restart_reason: _Optional[str] = ..., least_level: _Optional[_Union[CompatibilityLevel, str]] = ..., min_nodes_at_level: _Optional[int] = ...) -> None: ...

class ReplanResponse(_message.Message):
    __slots__ = ("cache_key", "cost_model_version", "compatibility", "before_num_gpus", "before_tokens_per_s", "before_memory", "before_global_batch_tokens", "rows", "notes")
    CACHE_KEY_FIELD_NUMBER: _ClassVar[int]
    COST_MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    COMPATIBILITY_FIELD_NUMBER: _ClassVar[int]
    BEFORE_NUM_GPUS_FIELD_NUMBER: _ClassVar[int]
    BEFORE_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    BEFORE_MEMORY_FIELD_NUMBER: _ClassVar[int]
    BEFORE_GLOBAL_BATCH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    cache_key: str
    cost_model_version: str
    compatibility: CompatibilityLevel
    before_num_gpus: int
    before_tokens_per_s: float
    before_memory: _result_pb2.MemoryBill
    before_global_batch_tokens: int
    rows: _containers.RepeatedCompositeFieldContainer[ReplanRow]
    notes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cache_key: _Optional[str] = ..., cost_model_version: _Optional[str] = ..., compatibility: _Optional[_Union[CompatibilityLevel, str]] = ..., before_num_gpus: _Optional[int] = ..., before_tokens_per_s: _Optional[float] = ..., before_memory: _Optional[_Union[_result_pb2.MemoryBill, _Mapping]] = ..., before_global_batch_tokens: _Optional[int] = ..., rows: _Optional[_Iterable[_Union[ReplanRow, _Mapping]]] = ..., notes: _Optional[_Iterable[str]] = ...) -> None: ...

class Work(_message.Message):
    __slots__ = ("tokens", "steps")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    tokens: int
    steps: int
    def __init__(self, tokens: _Optional[int] = ..., steps: _Optional[int] = ...) -> None: ...

class SmallestAllocationRequest(_message.Message):
    __slots__ = ("model", "training", "search", "options", "clusters", "batch", "work", "deadline_s", "deadline_unix_s", "now_unix_s", "startup_overhead_s", "downtime_fraction", "use_band_upper", "objective", "grid", "observations")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TRAINING_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    WORK_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_S_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    NOW_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    STARTUP_OVERHEAD_S_FIELD_NUMBER: _ClassVar[int]
    DOWNTIME_FRACTION_FIELD_NUMBER: _ClassVar[int]
    USE_BAND_UPPER_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_FIELD_NUMBER: _ClassVar[int]
    GRID_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    model: _spec_pb2.ModelSpec
    training: _spec_pb2.TrainingSpec
    search: _spec_pb2.SearchSpec
    options: SchedulerOptions
    clusters: _containers.RepeatedCompositeFieldContainer[ClusterTemplate]
    batch: BatchPolicy
    work: Work
    deadline_s: float
    deadline_unix_s: float
    now_unix_s: float
    startup_overhead_s: float
    downtime_fraction: float
    use_band_upper: bool
    objective: AdmitObjective
    grid: CountGrid
    observations: _containers.RepeatedCompositeFieldContainer[Observation]
    def __init__(self, model: _Optional[_Union[_spec_pb2.ModelSpec, _Mapping]] = ..., training: _Optional[_Union[_spec_pb2.TrainingSpec, _Mapping]] = ..., search: _Optional[_Union[_spec_pb2.SearchSpec, _Mapping]] = ..., options: _Optional[_Union[SchedulerOptions, _Mapping]] = ..., clusters: _Optional[_Iterable[_Union[ClusterTemplate, _Mapping]]] = ..., batch: _Optional[_Union[BatchPolicy, _Mapping]] = ..., work: _Optional[_Union[Work, _Mapping]] = ..., deadline_s: _Optional[float] = ..., deadline_unix_s: _Optional[float] = ..., now_unix_s: _Optional[float] = ..., startup_overhead_s: _Optional[float] = ..., downtime_fraction: _Optional[float] = ..., use_band_upper: _Optional[bool] = ..., objective: _Optional[_Union[AdmitObjective, str]] = ..., grid: _Optional[_Union[CountGrid, _Mapping]] = ..., observations: _Optional[_Iterable[_Union[Observation, _Mapping]]] = ...) -> None: ...

class Allocation(_message.Message):
    __slots__ = ("cluster", "status", "reason", "num_gpus", "config", "tokens_per_s", "finish_s", "gpu_hours", "cost", "earliest_finish_s", "earliest_finish_gpus")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    NUM_GPUS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    FINISH_S_FIELD_NUMBER: _ClassVar[int]
    GPU_HOURS_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_FINISH_S_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_FINISH_GPUS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    status: AdmitStatus
    reason: str
    num_gpus: int
    config: _spec_pb2.ParallelConfig
    tokens_per_s: float
    finish_s: float
    gpu_hours: float
    cost: float
    earliest_finish_s: float
    earliest_finish_gpus: int
    def __init__(self, cluster: _Optional[str] = ..., status: _Optional[_Union[AdmitStatus, str]] = ..., reason: _Optional[str] = ..., num_gpus: _Optional[int] = ..., config: _Optional[_Union[_spec_pb2.ParallelConfig, _Mapping]] = ..., tokens_per_s: _Optional[float] = ..., finish_s: _Optional[float] = ..., gpu_hours: _Optional[float] = ..., cost: _Optional[float] = ..., earliest_finish_s: _Optional[float] = ..., earliest_finish_gpus: _Optional[int] = ...) -> None: ...

class SmallestAllocationResponse(_message.Message):
    __slots__ = ("cache_key", "cost_model_version", "curve_cache_key", "time_available_s", "objective", "feasible", "pick", "allocations", "reason")
    CACHE_KEY_FIELD_NUMBER: _ClassVar[int]
    COST_MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    CURVE_CACHE_KEY_FIELD_NUMBER: _ClassVar[int]
    TIME_AVAILABLE_S_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_FIELD_NUMBER: _ClassVar[int]
    FEASIBLE_FIELD_NUMBER: _ClassVar[int]
    PICK_FIELD_NUMBER: _ClassVar[int]
    ALLOCATIONS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    cache_key: str
    cost_model_version: str
    curve_cache_key: str
    time_available_s: float
    objective: AdmitObjective
    feasible: bool
    pick: Allocation
    allocations: _containers.RepeatedCompositeFieldContainer[Allocation]
    reason: str
    def __init__(self, cache_key: _Optional[str] = ..., cost_model_version: _Optional[str] = ..., curve_cache_key: _Optional[str] = ..., time_available_s: _Optional[float] = ..., objective: _Optional[_Union[AdmitObjective, str]] = ..., feasible: _Optional[bool] = ..., pick: _Optional[_Union[Allocation, _Mapping]] = ..., allocations: _Optional[_Iterable[_Union[Allocation, _Mapping]]] = ..., reason: _Optional[str] = ...) -> None: ...

class TrainingFrontRequest(_message.Message):
    __slots__ = ("model", "training", "search", "options", "clusters", "grid", "batch", "token_budget", "observations")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TRAINING_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    GRID_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    TOKEN_BUDGET_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    model: _spec_pb2.ModelSpec
    training: _spec_pb2.TrainingSpec
    search: _spec_pb2.SearchSpec
    options: SchedulerOptions
    clusters: _containers.RepeatedCompositeFieldContainer[ClusterTemplate]
    grid: CountGrid
    batch: BatchPolicy
    token_budget: int
    observations: _containers.RepeatedCompositeFieldContainer[Observation]
    def __init__(self, model: _Optional[_Union[_spec_pb2.ModelSpec, _Mapping]] = ..., training: _Optional[_Union[_spec_pb2.TrainingSpec, _Mapping]] = ..., search: _Optional[_Union[_spec_pb2.SearchSpec, _Mapping]] = ..., options: _Optional[_Union[SchedulerOptions, _Mapping]] = ..., clusters: _Optional[_Iterable[_Union[ClusterTemplate, _Mapping]]] = ..., grid: _Optional[_Union[CountGrid, _Mapping]] = ..., batch: _Optional[_Union[BatchPolicy, _Mapping]] = ..., token_budget: _Optional[int] = ..., observations: _Optional[_Iterable[_Union[Observation, _Mapping]]] = ...) -> None: ...

class FrontPoint(_message.Message):
    __slots__ = ("cluster", "num_gpus", "num_gpus_used", "config", "days", "gpu_hours", "cost", "goodput_tokens_per_s", "binding_wall", "on_front_gpu_hours", "on_front_cost", "days_fast", "days_slow")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    NUM_GPUS_FIELD_NUMBER: _ClassVar[int]
    NUM_GPUS_USED_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    DAYS_FIELD_NUMBER: _ClassVar[int]
    GPU_HOURS_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    GOODPUT_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    BINDING_WALL_FIELD_NUMBER: _ClassVar[int]
    ON_FRONT_GPU_HOURS_FIELD_NUMBER: _ClassVar[int]
    ON_FRONT_COST_FIELD_NUMBER: _ClassVar[int]
    DAYS_FAST_FIELD_NUMBER: _ClassVar[int]
    DAYS_SLOW_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    num_gpus: int
    num_gpus_used: int
    config: _spec_pb2.ParallelConfig
    days: float
    gpu_hours: float
    cost: float
    goodput_tokens_per_s: float
    binding_wall: _result_pb2.Wall
    on_front_gpu_hours: bool
    on_front_cost: bool
    days_fast: float
    days_slow: float
    def __init__(self, cluster: _Optional[str] = ..., num_gpus: _Optional[int] = ..., num_gpus_used: _Optional[int] = ..., config: _Optional[_Union[_spec_pb2.ParallelConfig, _Mapping]] = ..., days: _Optional[float] = ..., gpu_hours: _Optional[float] = ..., cost: _Optional[float] = ..., goodput_tokens_per_s: _Optional[float] = ..., binding_wall: _Optional[_Union[_result_pb2.Wall, str]] = ..., on_front_gpu_hours: _Optional[bool] = ..., on_front_cost: _Optional[bool] = ..., days_fast: _Optional[float] = ..., days_slow: _Optional[float] = ...) -> None: ...

class FrontCluster(_message.Message):
    __slots__ = ("cluster", "largest_useful_gpus", "reason", "critical_batch_gpus")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    LARGEST_USEFUL_GPUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CRITICAL_BATCH_GPUS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    largest_useful_gpus: int
    reason: str
    critical_batch_gpus: int
    def __init__(self, cluster: _Optional[str] = ..., largest_useful_gpus: _Optional[int] = ..., reason: _Optional[str] = ..., critical_batch_gpus: _Optional[int] = ...) -> None: ...

class TrainingFrontResponse(_message.Message):
    __slots__ = ("cache_key", "cost_model_version", "curve_cache_key", "token_budget", "priced", "points", "clusters")
    CACHE_KEY_FIELD_NUMBER: _ClassVar[int]
    COST_MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    CURVE_CACHE_KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_BUDGET_FIELD_NUMBER: _ClassVar[int]
    PRICED_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    cache_key: str
    cost_model_version: str
    curve_cache_key: str
    token_budget: int
    priced: bool
    points: _containers.RepeatedCompositeFieldContainer[FrontPoint]
    clusters: _containers.RepeatedCompositeFieldContainer[FrontCluster]
    def __init__(self, cache_key: _Optional[str] = ..., cost_model_version: _Optional[str] = ..., curve_cache_key: _Optional[str] = ..., token_budget: _Optional[int] = ..., priced: _Optional[bool] = ..., points: _Optional[_Iterable[_Union[FrontPoint, _Mapping]]] = ..., clusters: _Optional[_Iterable[_Union[FrontCluster, _Mapping]]] = ...) -> None: ...
