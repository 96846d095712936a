from meshplan.v1 import spec_pb2 as _spec_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GpuInfo(_message.Message):
    __slots__ = ("name", "family", "hbm_gib", "peak_bf16_tflops", "peak_fp8_tflops", "hbm_tbps", "intra_node_gbps", "inter_node_gbps", "gpus_per_node", "source", "fp8_tensor_cores")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    HBM_GIB_FIELD_NUMBER: _ClassVar[int]
    PEAK_BF16_TFLOPS_FIELD_NUMBER: _ClassVar[int]
    PEAK_FP8_TFLOPS_FIELD_NUMBER: _ClassVar[int]
    HBM_TBPS_FIELD_NUMBER: _ClassVar[int]
    INTRA_NODE_GBPS_FIELD_NUMBER: _ClassVar[int]
    INTER_NODE_GBPS_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    FP8_TENSOR_CORES_FIELD_NUMBER: _ClassVar[int]
    name: str
    family: str
    hbm_gib: float
    peak_bf16_tflops: float
    peak_fp8_tflops: float
    hbm_tbps: float
    intra_node_gbps: float
    inter_node_gbps: float
    gpus_per_node: int
    source: str
    fp8_tensor_cores: bool
    def __init__(self, name: _Optional[str] = ..., family: _Optional[str] = ..., hbm_gib: _Optional[float] = ..., peak_bf16_tflops: _Optional[float] = ..., peak_fp8_tflops: _Optional[float] = ..., hbm_tbps: _Optional[float] = ..., intra_node_gbps: _Optional[float] = ..., inter_node_gbps: _Optional[float] = ..., gpus_per_node: _Optional[int] = ..., source: _Optional[str] = ..., fp8_tensor_cores: _Optional[bool] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "ffn_hidden_size", "vocab_size", "gated_mlp", "tie_embeddings", "moe", "published_params_b", "published_active_params_b", "source", "notes", "head_dim", "rope_theta", "learned_positions", "qk_norm", "latent_attention")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NUM_LAYERS_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_ATTENTION_HEADS_FIELD_NUMBER: _ClassVar[int]
    NUM_KV_HEADS_FIELD_NUMBER: _ClassVar[int]
    FFN_HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    GATED_MLP_FIELD_NUMBER: _ClassVar[int]
    TIE_EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    MOE_FIELD_NUMBER: _ClassVar[int]
    PUBLISHED_PARAMS_B_FIELD_NUMBER: _ClassVar[int]
    PUBLISHED_ACTIVE_PARAMS_B_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    HEAD_DIM_FIELD_NUMBER: _ClassVar[int]
    ROPE_THETA_FIELD_NUMBER: _ClassVar[int]
    LEARNED_POSITIONS_FIELD_NUMBER: _ClassVar[int]
    QK_NORM_FIELD_NUMBER: _ClassVar[int]
    LATENT_ATTENTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    ffn_hidden_size: int
    vocab_size: int
    gated_mlp: bool
    tie_embeddings: bool
    moe: _spec_pb2.MoESpec
    published_params_b: float
    published_active_params_b: float
    source: str
    notes: str
    head_dim: int
    rope_theta: float
    learned_positions: bool
    qk_norm: bool
    latent_attention: _spec_pb2.LatentAttentionSpec
    def __init__(self, name: _Optional[str] = ..., num_layers: _Optional[int] = ..., hidden_size: _Optional[int] = ..., num_attention_heads: _Optional[int] = ..., num_kv_heads: _Optional[int] = ..., ffn_hidden_size: _Optional[int] = ..., vocab_size: _Optional[int] = ..., gated_mlp: _Optional[bool] = ..., tie_embeddings: _Optional[bool] = ..., moe: _Optional[_Union[_spec_pb2.MoESpec, _Mapping]] = ..., published_params_b: _Optional[float] = ..., published_active_params_b: _Optional[float] = ..., source: _Optional[str] = ..., notes: _Optional[str] = ..., head_dim: _Optional[int] = ..., rope_theta: _Optional[float] = ..., learned_positions: _Optional[bool] = ..., qk_norm: _Optional[bool] = ..., latent_attention: _Optional[_Union[_spec_pb2.LatentAttentionSpec, _Mapping]] = ...) -> None: ...
