from meshplan.v1 import spec_pb2 as _spec_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PlanStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PLAN_STATUS_UNSPECIFIED: _ClassVar[PlanStatus]
    PLAN_STATUS_OPTIMAL: _ClassVar[PlanStatus]
    PLAN_STATUS_FEASIBLE: _ClassVar[PlanStatus]
    PLAN_STATUS_INFEASIBLE: _ClassVar[PlanStatus]

class Wall(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WALL_UNSPECIFIED: _ClassVar[Wall]
    WALL_NONE: _ClassVar[Wall]
    WALL_MEMORY: _ClassVar[Wall]
    WALL_WEIGHTS: _ClassVar[Wall]
    WALL_BUBBLE: _ClassVar[Wall]
    WALL_COMMUNICATION: _ClassVar[Wall]
    WALL_DP_CAP: _ClassVar[Wall]

class BatchSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BATCH_SOURCE_UNSPECIFIED: _ClassVar[BatchSource]
    BATCH_SOURCE_GLOBAL_BATCH: _ClassVar[BatchSource]
    BATCH_SOURCE_CRITICAL_BATCH: _ClassVar[BatchSource]
    BATCH_SOURCE_SCALING_LAW: _ClassVar[BatchSource]
PLAN_STATUS_UNSPECIFIED: PlanStatus
PLAN_STATUS_OPTIMAL: PlanStatus
PLAN_STATUS_FEASIBLE: PlanStatus
PLAN_STATUS_INFEASIBLE: PlanStatus
WALL_UNSPECIFIED: Wall
WALL_NONE: Wall
WALL_MEMORY: Wall
WALL_WEIGHTS: Wall
WALL_BUBBLE: Wall
WALL_COMMUNICATION: Wall
WALL_DP_CAP: Wall
BATCH_SOURCE_UNSPECIFIED: BatchSource
BATCH_SOURCE_GLOBAL_BATCH: BatchSource
BATCH_SOURCE_CRITICAL_BATCH: BatchSource
BATCH_SOURCE_SCALING_LAW: BatchSource

class BatchChoice(_message.Message):
    __slots__ = ("source", "cap_tokens", "train_tokens", "compute_flops", "reason")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CAP_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TRAIN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_FLOPS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    source: BatchSource
    cap_tokens: int
    train_tokens: int
    compute_flops: float
    reason: str
    def __init__(self, source: _Optional[_Union[BatchSource, str]] = ..., cap_tokens: _Optional[int] = ..., train_tokens: _Optional[int] = ..., compute_flops: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...

class NumParameters(_message.Message):
    __slots__ = ("total", "active")
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    total: int
    active: int
    def __init__(self, total: _Optional[int] = ..., active: _Optional[int] = ...) -> None: ...

class MemoryBill(_message.Message):
    __slots__ = ("weights", "gradients", "optimizer", "activations", "reserve", "total", "hbm", "stage")
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    GRADIENTS_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    ACTIVATIONS_FIELD_NUMBER: _ClassVar[int]
    RESERVE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    HBM_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    weights: int
    gradients: int
    optimizer: int
    activations: int
    reserve: int
    total: int
    hbm: int
    stage: str
    def __init__(self, weights: _Optional[int] = ..., gradients: _Optional[int] = ..., optimizer: _Optional[int] = ..., activations: _Optional[int] = ..., reserve: _Optional[int] = ..., total: _Optional[int] = ..., hbm: _Optional[int] = ..., stage: _Optional[str] = ...) -> None: ...

class TimeBreakdown(_message.Message):
    __slots__ = ("compute_s", "recompute_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s", "dp_comm_s", "bubble_s", "optimizer_s")
    COMPUTE_S_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTE_S_FIELD_NUMBER: _ClassVar[int]
    TP_COMM_S_FIELD_NUMBER: _ClassVar[int]
    CP_COMM_S_FIELD_NUMBER: _ClassVar[int]
    EP_COMM_S_FIELD_NUMBER: _ClassVar[int]
    PP_COMM_S_FIELD_NUMBER: _ClassVar[int]
    DP_COMM_S_FIELD_NUMBER: _ClassVar[int]
    BUBBLE_S_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_S_FIELD_NUMBER: _ClassVar[int]
    compute_s: float
    recompute_s: float
    tp_comm_s: float
    cp_comm_s: float
    ep_comm_s: float
    pp_comm_s: float
    dp_comm_s: float
    bubble_s: float
    optimizer_s: float
    def __init__(self, compute_s: _Optional[float] = ..., recompute_s: _Optional[float] = ..., tp_comm_s: _Optional[float] = ..., cp_comm_s: _Optional[float] = ..., ep_comm_s: _Optional[float] = ..., pp_comm_s: _Optional[float] = ..., dp_comm_s: _Optional[float] = ..., bubble_s: _Optional[float] = ..., optimizer_s: _Optional[float] = ...) -> None: ...

class ErrorBand(_message.Message):
    __slots__ = ("category", "scope", "num_runs", "median_error", "p90_error", "signed_median_error", "low_tokens_per_s", "high_tokens_per_s", "basis")
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    NUM_RUNS_FIELD_NUMBER: _ClassVar[int]
    MEDIAN_ERROR_FIELD_NUMBER: _ClassVar[int]
    P90_ERROR_FIELD_NUMBER: _ClassVar[int]
    SIGNED_MEDIAN_ERROR_FIELD_NUMBER: _ClassVar[int]
    LOW_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    HIGH_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    BASIS_FIELD_NUMBER: _ClassVar[int]
    category: str
    scope: str
    num_runs: int
    median_error: float
    p90_error: float
    signed_median_error: float
    low_tokens_per_s: float
    high_tokens_per_s: float
    basis: str
    def __init__(self, category: _Optional[str] = ..., scope: _Optional[str] = ..., num_runs: _Optional[int] = ..., median_error: _Optional[float] = ..., p90_error: _Optional[float] = ..., signed_median_error: _Optional[float] = ..., low_tokens_per_s: _Optional[float] = ..., high_tokens_per_s: _Optional[float] = ..., basis: _Optional[str] = ...) -> None: ...

class Performance(_message.Message):
    __slots__ = ("step_time_s", "tokens_per_s", "mfu", "hfu", "global_batch_tokens", "num_gpus_used", "model_flops_per_token", "bubble_fraction", "breakdown", "error_band")
    STEP_TIME_S_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    MFU_FIELD_NUMBER: _ClassVar[int]
    HFU_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_BATCH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_GPUS_USED_FIELD_NUMBER: _ClassVar[int]
    MODEL_FLOPS_PER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    BUBBLE_FRACTION_FIELD_NUMBER: _ClassVar[int]
    BREAKDOWN_FIELD_NUMBER: _ClassVar[int]
    ERROR_BAND_FIELD_NUMBER: _ClassVar[int]
    step_time_s: float
    tokens_per_s: float
    mfu: float
    hfu: float
    global_batch_tokens: int
    num_gpus_used: int
    model_flops_per_token: float
    bubble_fraction: float
    breakdown: TimeBreakdown
    error_band: ErrorBand
    def __init__(self, step_time_s: _Optional[float] = ..., tokens_per_s: _Optional[float] = ..., mfu: _Optional[float] = ..., hfu: _Optional[float] = ..., global_batch_tokens: _Optional[int] = ..., num_gpus_used: _Optional[int] = ..., model_flops_per_token: _Optional[float] = ..., bubble_fraction: _Optional[float] = ..., breakdown: _Optional[_Union[TimeBreakdown, _Mapping]] = ..., error_band: _Optional[_Union[ErrorBand, _Mapping]] = ...) -> None: ...

class SolverInfo(_message.Message):
    __slots__ = ("status", "objective", "bound", "gap", "wall_time_s", "solve_time_s", "num_variables", "num_constraints", "num_layouts", "used_fallback", "objective_unit_s")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_FIELD_NUMBER: _ClassVar[int]
    BOUND_FIELD_NUMBER: _ClassVar[int]
    GAP_FIELD_NUMBER: _ClassVar[int]
    WALL_TIME_S_FIELD_NUMBER: _ClassVar[int]
    SOLVE_TIME_S_FIELD_NUMBER: _ClassVar[int]
    NUM_VARIABLES_FIELD_NUMBER: _ClassVar[int]
    NUM_CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    NUM_LAYOUTS_FIELD_NUMBER: _ClassVar[int]
    USED_FALLBACK_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_UNIT_S_FIELD_NUMBER: _ClassVar[int]
    status: str
    objective: float
    bound: float
    gap: float
    wall_time_s: float
    solve_time_s: float
    num_variables: int
    num_constraints: int
    num_layouts: int
    used_fallback: bool
    objective_unit_s: float
    def __init__(self, status: _Optional[str] = ..., objective: _Optional[float] = ..., bound: _Optional[float] = ..., gap: _Optional[float] = ..., wall_time_s: _Optional[float] = ..., solve_time_s: _Optional[float] = ..., num_variables: _Optional[int] = ..., num_constraints: _Optional[int] = ..., num_layouts: _Optional[int] = ..., used_fallback: _Optional[bool] = ..., objective_unit_s: _Optional[float] = ...) -> None: ...

class Explanation(_message.Message):
    __slots__ = ("reason", "min_gpus", "min_memory_bytes")
    REASON_FIELD_NUMBER: _ClassVar[int]
    MIN_GPUS_FIELD_NUMBER: _ClassVar[int]
    MIN_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    reason: str
    min_gpus: int
    min_memory_bytes: int
    def __init__(self, reason: _Optional[str] = ..., min_gpus: _Optional[int] = ..., min_memory_bytes: _Optional[int] = ...) -> None: ...

class Alternative(_message.Message):
    __slots__ = ("config", "memory", "performance", "binding_wall")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    PERFORMANCE_FIELD_NUMBER: _ClassVar[int]
    BINDING_WALL_FIELD_NUMBER: _ClassVar[int]
    config: _spec_pb2.ParallelConfig
    memory: MemoryBill
    performance: Performance
    binding_wall: Wall
    def __init__(self, config: _Optional[_Union[_spec_pb2.ParallelConfig, _Mapping]] = ..., memory: _Optional[_Union[MemoryBill, _Mapping]] = ..., performance: _Optional[_Union[Performance, _Mapping]] = ..., binding_wall: _Optional[_Union[Wall, str]] = ...) -> None: ...
