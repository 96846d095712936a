from meshplan.v1 import catalog_pb2 as _catalog_pb2
from meshplan.v1 import result_pb2 as _result_pb2
from meshplan.v1 import scheduler_pb2 as _scheduler_pb2
from meshplan.v1 import spec_pb2 as _spec_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PlanRequest(_message.Message):
    __slots__ = ("model", "cluster", "training", "search", "options")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    TRAINING_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    model: _spec_pb2.ModelSpec
    cluster: _spec_pb2.ClusterSpec
    training: _spec_pb2.TrainingSpec
    search: _spec_pb2.SearchSpec
    options: _spec_pb2.Options
    def __init__(self, model: _Optional[_Union[_spec_pb2.ModelSpec, _Mapping]] = ..., cluster: _Optional[_Union[_spec_pb2.ClusterSpec, _Mapping]] = ..., training: _Optional[_Union[_spec_pb2.TrainingSpec, _Mapping]] = ..., search: _Optional[_Union[_spec_pb2.SearchSpec, _Mapping]] = ..., options: _Optional[_Union[_spec_pb2.Options, _Mapping]] = ...) -> None: ...

class PlanResponse(_message.Message):
    __slots__ = ("status", "config", "num_parameters", "memory", "performance", "binding_wall", "warnings", "alternatives", "explanation", "solver", "batch")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    NUM_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    PERFORMANCE_FIELD_NUMBER: _ClassVar[int]
    BINDING_WALL_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    ALTERNATIVES_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    SOLVER_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    status: _result_pb2.PlanStatus
    config: _spec_pb2.ParallelConfig
    num_parameters: _result_pb2.NumParameters
    memory: _result_pb2.MemoryBill
    performance: _result_pb2.Performance
    binding_wall: _result_pb2.Wall
    warnings: _containers.RepeatedScalarFieldContainer[str]
    alternatives: _containers.RepeatedCompositeFieldContainer[_result_pb2.Alternative]
    explanation: _result_pb2.Explanation
    solver: _result_pb2.SolverInfo
    batch: _result_pb2.BatchChoice
    def __init__(self, status: _Optional[_Union[_result_pb2.PlanStatus, str]] = ..., config: _Optional[_Union[_spec_pb2.ParallelConfig, _Mapping]] = ..., num_parameters: _Optional[_Union[_result_pb2.NumParameters, _Mapping]] = ..., memory: _Optional[_Union[_result_pb2.MemoryBill, _Mapping]] = ..., performance: _Optional[_Union[_result_pb2.Performance, _Mapping]] = ..., binding_wall: _Optional[_Union[_result_pb2.Wall, str]] = ..., warnings: _Optional[_Iterable[str]] = ..., alternatives: _Optional[_Iterable[_Union[_result_pb2.Alternative, _Mapping]]] = ..., explanation: _Optional[_Union[_result_pb2.Explanation, _Mapping]] = ..., solver: _Optional[_Union[_result_pb2.SolverInfo, _Mapping]] = ..., batch: _Optional[_Union[_result_pb2.BatchChoice, _Mapping]] = ...) -> None: ...

class EvaluateRequest(_message.Message):
    __slots__ = ("model", "cluster", "training", "config", "search")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    TRAINING_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    model: _spec_pb2.ModelSpec
    cluster: _spec_pb2.ClusterSpec
    training: _spec_pb2.TrainingSpec
    config: _spec_pb2.ParallelConfig
    search: _spec_pb2.SearchSpec
    def __init__(self, model: _Optional[_Union[_spec_pb2.ModelSpec, _Mapping]] = ..., cluster: _Optional[_Union[_spec_pb2.ClusterSpec, _Mapping]] = ..., training: _Optional[_Union[_spec_pb2.TrainingSpec, _Mapping]] = ..., config: _Optional[_Union[_spec_pb2.ParallelConfig, _Mapping]] = ..., search: _Optional[_Union[_spec_pb2.SearchSpec, _Mapping]] = ...) -> None: ...

class EvaluateResponse(_message.Message):
    __slots__ = ("fits", "violations", "config", "num_parameters", "memory", "performance", "binding_wall", "warnings", "notes")
    FITS_FIELD_NUMBER: _ClassVar[int]
    VIOLATIONS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    NUM_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    PERFORMANCE_FIELD_NUMBER: _ClassVar[int]
    BINDING_WALL_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    fits: bool
    violations: _containers.RepeatedScalarFieldContainer[str]
    config: _spec_pb2.ParallelConfig
    num_parameters: _result_pb2.NumParameters
    memory: _result_pb2.MemoryBill
    performance: _result_pb2.Performance
    binding_wall: _result_pb2.Wall
    warnings: _containers.RepeatedScalarFieldContainer[str]
    notes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, fits: _Optional[bool] = ..., violations: _Optional[_Iterable[str]] = ..., config: _Optional[_Union[_spec_pb2.ParallelConfig, _Mapping]] = ..., num_parameters: _Optional[_Union[_result_pb2.NumParameters, _Mapping]] = ..., memory: _Optional[_Union[_result_pb2.MemoryBill, _Mapping]] = ..., performance: _Optional[_Union[_result_pb2.Performance, _Mapping]] = ..., binding_wall: _Optional[_Union[_result_pb2.Wall, str]] = ..., warnings: _Optional[_Iterable[str]] = ..., notes: _Optional[_Iterable[str]] = ...) -> None: ...

class PlanBatchRequest(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[PlanRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[PlanRequest, _Mapping]]] = ...) -> None: ...

class PlanBatchResponse(_message.Message):
    __slots__ = ("index", "result", "error")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    index: int
    result: PlanResponse
    error: ItemError
    def __init__(self, index: _Optional[int] = ..., result: _Optional[_Union[PlanResponse, _Mapping]] = ..., error: _Optional[_Union[ItemError, _Mapping]] = ...) -> None: ...

class ItemError(_message.Message):
    __slots__ = ("code", "message", "field_violations")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FIELD_VIOLATIONS_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    field_violations: _containers.RepeatedCompositeFieldContainer[FieldViolation]
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., field_violations: _Optional[_Iterable[_Union[FieldViolation, _Mapping]]] = ...) -> None: ...

class FieldViolation(_message.Message):
    __slots__ = ("field", "description")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    field: str
    description: str
    def __init__(self, field: _Optional[str] = ..., description: _Optional[str] = ...) -> None: ...

class ListCatalogRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListCatalogResponse(_message.Message):
    __slots__ = ("gpus", "models")
    GPUS_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    gpus: _containers.RepeatedCompositeFieldContainer[_catalog_pb2.GpuInfo]
    models: _containers.RepeatedCompositeFieldContainer[_catalog_pb2.ModelInfo]
    def __init__(self, gpus: _Optional[_Iterable[_Union[_catalog_pb2.GpuInfo, _Mapping]]] = ..., models: _Optional[_Iterable[_Union[_catalog_pb2.ModelInfo, _Mapping]]] = ...) -> None: ...
