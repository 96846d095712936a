from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Precision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRECISION_UNSPECIFIED: _ClassVar[Precision]
    PRECISION_BF16: _ClassVar[Precision]
    PRECISION_FP8: _ClassVar[Precision]

class Recompute(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RECOMPUTE_UNSPECIFIED: _ClassVar[Recompute]
    RECOMPUTE_NONE: _ClassVar[Recompute]
    RECOMPUTE_SELECTIVE: _ClassVar[Recompute]
    RECOMPUTE_FULL: _ClassVar[Recompute]

class Framework(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FRAMEWORK_UNSPECIFIED: _ClassVar[Framework]
    FRAMEWORK_GENERIC: _ClassVar[Framework]
    FRAMEWORK_KEMPNERFORGE: _ClassVar[Framework]
    FRAMEWORK_MEGATRON: _ClassVar[Framework]
    FRAMEWORK_TORCHTITAN: _ClassVar[Framework]
    FRAMEWORK_DEEPSPEED: _ClassVar[Framework]
    FRAMEWORK_LLM_FOUNDRY: _ClassVar[Framework]
    FRAMEWORK_NANOTRON: _ClassVar[Framework]

class LossKernel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOSS_KERNEL_UNSPECIFIED: _ClassVar[LossKernel]
    LOSS_KERNEL_EAGER_FP32: _ClassVar[LossKernel]
    LOSS_KERNEL_INPLACE_FP32: _ClassVar[LossKernel]
    LOSS_KERNEL_FUSED_BF16: _ClassVar[LossKernel]
    LOSS_KERNEL_CHUNKED: _ClassVar[LossKernel]
    LOSS_KERNEL_COMPILED: _ClassVar[LossKernel]
    LOSS_KERNEL_COPY_FP32: _ClassVar[LossKernel]

class StateDtype(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATE_DTYPE_UNSPECIFIED: _ClassVar[StateDtype]
    STATE_DTYPE_FP32: _ClassVar[StateDtype]
    STATE_DTYPE_BF16: _ClassVar[StateDtype]

class FsdpVersion(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FSDP_VERSION_UNSPECIFIED: _ClassVar[FsdpVersion]
    FSDP_VERSION_FSDP1: _ClassVar[FsdpVersion]
    FSDP_VERSION_FSDP2: _ClassVar[FsdpVersion]

class ActivationForm(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTIVATION_FORM_UNSPECIFIED: _ClassVar[ActivationForm]
    ACTIVATION_FORM_FLAT_12H: _ClassVar[ActivationForm]
    ACTIVATION_FORM_KORTHIKANTI: _ClassVar[ActivationForm]
    ACTIVATION_FORM_MEGATRON: _ClassVar[ActivationForm]
    ACTIVATION_FORM_TORCHTITAN: _ClassVar[ActivationForm]
    ACTIVATION_FORM_KEMPNERFORGE: _ClassVar[ActivationForm]
    ACTIVATION_FORM_NANOTRON: _ClassVar[ActivationForm]

class PipelineSchedule(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PIPELINE_SCHEDULE_UNSPECIFIED: _ClassVar[PipelineSchedule]
    PIPELINE_SCHEDULE_ONE_F_ONE_B: _ClassVar[PipelineSchedule]
    PIPELINE_SCHEDULE_DUALPIPE_V: _ClassVar[PipelineSchedule]
PRECISION_UNSPECIFIED: Precision
PRECISION_BF16: Precision
PRECISION_FP8: Precision
RECOMPUTE_UNSPECIFIED: Recompute
RECOMPUTE_NONE: Recompute
RECOMPUTE_SELECTIVE: Recompute
RECOMPUTE_FULL: Recompute
FRAMEWORK_UNSPECIFIED: Framework
FRAMEWORK_GENERIC: Framework
FRAMEWORK_KEMPNERFORGE: Framework
FRAMEWORK_MEGATRON: Framework
FRAMEWORK_TORCHTITAN: Framework
FRAMEWORK_DEEPSPEED: Framework
FRAMEWORK_LLM_FOUNDRY: Framework
FRAMEWORK_NANOTRON: Framework
LOSS_KERNEL_UNSPECIFIED: LossKernel
LOSS_KERNEL_EAGER_FP32: LossKernel
LOSS_KERNEL_INPLACE_FP32: LossKernel
LOSS_KERNEL_FUSED_BF16: LossKernel
LOSS_KERNEL_CHUNKED: LossKernel
LOSS_KERNEL_COMPILED: LossKernel
LOSS_KERNEL_COPY_FP32: LossKernel
STATE_DTYPE_UNSPECIFIED: StateDtype
STATE_DTYPE_FP32: StateDtype
STATE_DTYPE_BF16: StateDtype
FSDP_VERSION_UNSPECIFIED: FsdpVersion
FSDP_VERSION_FSDP1: FsdpVersion
FSDP_VERSION_FSDP2: FsdpVersion
ACTIVATION_FORM_UNSPECIFIED: ActivationForm
ACTIVATION_FORM_FLAT_12H: ActivationForm
ACTIVATION_FORM_KORTHIKANTI: ActivationForm
ACTIVATION_FORM_MEGATRON: ActivationForm
ACTIVATION_FORM_TORCHTITAN: ActivationForm
ACTIVATION_FORM_KEMPNERFORGE: ActivationForm
ACTIVATION_FORM_NANOTRON: ActivationForm
PIPELINE_SCHEDULE_UNSPECIFIED: PipelineSchedule
PIPELINE_SCHEDULE_ONE_F_ONE_B: PipelineSchedule
PIPELINE_SCHEDULE_DUALPIPE_V: PipelineSchedule

class MoESpec(_message.Message):
    __slots__ = ("num_experts", "top_k", "expert_ffn_hidden_size", "num_shared_experts", "num_dense_layers")
    NUM_EXPERTS_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    EXPERT_FFN_HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_SHARED_EXPERTS_FIELD_NUMBER: _ClassVar[int]
    NUM_DENSE_LAYERS_FIELD_NUMBER: _ClassVar[int]
    num_experts: int
    top_k: int
    expert_ffn_hidden_size: int
    num_shared_experts: int
    num_dense_layers: int
    def __init__(self, num_experts: _Optional[int] = ..., top_k: _Optional[int] = ..., expert_ffn_hidden_size: _Optional[int] = ..., num_shared_experts: _Optional[int] = ..., num_dense_layers: _Optional[int] = ...) -> None: ...

class LatentAttentionSpec(_message.Message):
    __slots__ = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    Q_LORA_RANK_FIELD_NUMBER: _ClassVar[int]
    KV_LORA_RANK_FIELD_NUMBER: _ClassVar[int]
    QK_NOPE_HEAD_DIM_FIELD_NUMBER: _ClassVar[int]
    QK_ROPE_HEAD_DIM_FIELD_NUMBER: _ClassVar[int]
    V_HEAD_DIM_FIELD_NUMBER: _ClassVar[int]
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    def __init__(self, q_lora_rank: _Optional[int] = ..., kv_lora_rank: _Optional[int] = ..., qk_nope_head_dim: _Optional[int] = ..., qk_rope_head_dim: _Optional[int] = ..., v_head_dim: _Optional[int] = ...) -> None: ...

class ModelSpec(_message.Message):
    __slots__ = ("preset", "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "ffn_hidden_size", "vocab_size", "gated_mlp", "tie_embeddings", "moe", "head_dim", "rope_theta", "learned_positions", "qk_norm", "latent_attention")
    PRESET_FIELD_NUMBER: _ClassVar[int]
    NUM_LAYERS_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_ATTENTION_HEADS_FIELD_NUMBER: _ClassVar[int]
    NUM_KV_HEADS_FIELD_NUMBER: _ClassVar[int]
    FFN_HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    GATED_MLP_FIELD_NUMBER: _ClassVar[int]
    TIE_EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    MOE_FIELD_NUMBER: _ClassVar[int]
    HEAD_DIM_FIELD_NUMBER: _ClassVar[int]
    ROPE_THETA_FIELD_NUMBER: _ClassVar[int]
    LEARNED_POSITIONS_FIELD_NUMBER: _ClassVar[int]
    QK_NORM_FIELD_NUMBER: _ClassVar[int]
    LATENT_ATTENTION_FIELD_NUMBER: _ClassVar[int]
    preset: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    ffn_hidden_size: int
    vocab_size: int
    gated_mlp: bool
    tie_embeddings: bool
    moe: MoESpec
    head_dim: int
    rope_theta: float
    learned_positions: bool
    qk_norm: bool
    latent_attention: LatentAttentionSpec
    def __init__(self, preset: _Optional[str] = ..., num_layers: _Optional[int] = ..., hidden_size: _Optional[int] = ..., num_attention_heads: _Optional[int] = ..., num_kv_heads: _Optional[int] = ..., ffn_hidden_size: _Optional[int] = ..., vocab_size: _Optional[int] = ..., gated_mlp: _Optional[bool] = ..., tie_embeddings: _Optional[bool] = ..., moe: _Optional[_Union[MoESpec, _Mapping]] = ..., head_dim: _Optional[int] = ..., rope_theta: _Optional[float] = ..., learned_positions: _Optional[bool] = ..., qk_norm: _Optional[bool] = ..., latent_attention: _Optional[_Union[LatentAttentionSpec, _Mapping]] = ...) -> None: ...

class ClusterSpec(_message.Message):
    __slots__ = ("gpu", "num_gpus", "gpus_per_node", "hbm_gib", "peak_bf16_tflops", "intra_node_gbps", "inter_node_gbps")
    GPU_FIELD_NUMBER: _ClassVar[int]
    NUM_GPUS_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    HBM_GIB_FIELD_NUMBER: _ClassVar[int]
    PEAK_BF16_TFLOPS_FIELD_NUMBER: _ClassVar[int]
    INTRA_NODE_GBPS_FIELD_NUMBER: _ClassVar[int]
    INTER_NODE_GBPS_FIELD_NUMBER: _ClassVar[int]
    gpu: str
    num_gpus: int
    gpus_per_node: int
    hbm_gib: float
    peak_bf16_tflops: float
    intra_node_gbps: float
    inter_node_gbps: float
    def __init__(self, gpu: _Optional[str] = ..., num_gpus: _Optional[int] = ..., gpus_per_node: _Optional[int] = ..., hbm_gib: _Optional[float] = ..., peak_bf16_tflops: _Optional[float] = ..., intra_node_gbps: _Optional[float] = ..., inter_node_gbps: _Optional[float] = ...) -> None: ...

class TrainingSpec(_message.Message):
    __slots__ = ("seq_len", "global_batch_tokens", "critical_batch_tokens", "precision", "framework", "train_tokens", "fused_attention", "grad_reduce_in_bf16", "tp_comm_overlap", "dp_comm_overlap", "cp_comm_overlap", "ep_comm_overlap", "ep_dispatch_dedup", "moe_router_force_balance", "pipeline_schedule", "loss_kernel", "grad_dtype", "master_dtype", "fsdp_version", "activation_form", "fp8_activations", "hybrid_shard", "compiled", "fp8_all_gather")
    SEQ_LEN_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_BATCH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CRITICAL_BATCH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    TRAIN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FUSED_ATTENTION_FIELD_NUMBER: _ClassVar[int]
    GRAD_REDUCE_IN_BF16_FIELD_NUMBER: _ClassVar[int]
    TP_COMM_OVERLAP_FIELD_NUMBER: _ClassVar[int]
    DP_COMM_OVERLAP_FIELD_NUMBER: _ClassVar[int]
    CP_COMM_OVERLAP_FIELD_NUMBER: _ClassVar[int]
    EP_COMM_OVERLAP_FIELD_NUMBER: _ClassVar[int]
    EP_DISPATCH_DEDUP_FIELD_NUMBER: _ClassVar[int]
    MOE_ROUTER_FORCE_BALANCE_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    LOSS_KERNEL_FIELD_NUMBER: _ClassVar[int]
    GRAD_DTYPE_FIELD_NUMBER: _ClassVar[int]
    MASTER_DTYPE_FIELD_NUMBER: _ClassVar[int]
    FSDP_VERSION_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_FORM_FIELD_NUMBER: _ClassVar[int]
    FP8_ACTIVATIONS_FIELD_NUMBER: _ClassVar[int]
    HYBRID_SHARD_FIELD_NUMBER: _ClassVar[int]
    COMPILED_FIELD_NUMBER: _ClassVar[int]
    FP8_ALL_GATHER_FIELD_NUMBER: _ClassVar[int]
    seq_len: int
    global_batch_tokens: int
    critical_batch_tokens: int
    precision: Precision
    framework: Framework
    train_tokens: int
    fused_attention: bool
    grad_reduce_in_bf16: bool
    tp_comm_overlap: bool
    dp_comm_overlap: bool
    cp_comm_overlap: bool
    ep_comm_overlap: bool
    ep_dispatch_dedup: bool
    moe_router_force_balance: bool
    pipeline_schedule: PipelineSchedule
    loss_kernel: LossKernel
    grad_dtype: StateDtype
    master_dtype: StateDtype
    fsdp_version: FsdpVersion
    activation_form: ActivationForm
    fp8_activations: bool
    hybrid_shard: bool
    compiled: bool
    fp8_all_gather: bool
    def __init__(self, seq_len: _Optional[int] = ..., global_batch_tokens: _Optional[int] = ..., critical_batch_tokens: _Optional[int] = ..., precision: _Optional[_Union[Precision, str]] = ..., framework: _Optional[_Union[Framework, str]] = ..., train_tokens: _Optional[int] = ..., fused_attention: _Optional[bool] = ..., grad_reduce_in_bf16: _Optional[bool] = ..., tp_comm_overlap: _Optional[bool] = ..., dp_comm_overlap: _Optional[bool] = ..., cp_comm_overlap: _Optional[bool] = ..., ep_comm_overlap: _Optional[bool] = ..., ep_dispatch_dedup: _Optional[bool] = ..., moe_router_force_balance: _Optional[bool] = ..., pipeline_schedule: _Optional[_Union[PipelineSchedule, str]] = ..., loss_kernel: _Optional[_Union[LossKernel, str]] = ..., grad_dtype: _Optional[_Union[StateDtype, str]] = ..., master_dtype: _Optional[_Union[StateDtype, str]] = ..., fsdp_version: _Optional[_Union[FsdpVersion, str]] = ..., activation_form: _Optional[_Union[ActivationForm, str]] = ..., fp8_activations: _Optional[bool] = ..., hybrid_shard: _Optional[bool] = ..., compiled: _Optional[bool] = ..., fp8_all_gather: _Optional[bool] = ...) -> None: ...

class ParallelConfig(_message.Message):
    __slots__ = ("tp", "pp", "dp", "cp", "ep", "virtual_stages", "micro_batch_size", "num_microbatches", "zero_stage", "recompute", "sequence_parallel", "etp")
    TP_FIELD_NUMBER: _ClassVar[int]
    PP_FIELD_NUMBER: _ClassVar[int]
    DP_FIELD_NUMBER: _ClassVar[int]
    CP_FIELD_NUMBER: _ClassVar[int]
    EP_FIELD_NUMBER: _ClassVar[int]
    VIRTUAL_STAGES_FIELD_NUMBER: _ClassVar[int]
    MICRO_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_MICROBATCHES_FIELD_NUMBER: _ClassVar[int]
    ZERO_STAGE_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_PARALLEL_FIELD_NUMBER: _ClassVar[int]
    ETP_FIELD_NUMBER: _ClassVar[int]
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    virtual_stages: int
    micro_batch_size: int
    num_microbatches: int
    zero_stage: int
    recompute: Recompute
    sequence_parallel: bool
    etp: int
    def __init__(self, tp: _Optional[int] = ..., pp: _Optional[int] = ..., dp: _Optional[int] = ..., cp: _Optional[int] = ..., ep: _Optional[int] = ..., virtual_stages: _Optional[int] = ..., micro_batch_size: _Optional[int] = ..., num_microbatches: _Optional[int] = ..., zero_stage: _Optional[int] = ..., recompute: _Optional[_Union[Recompute, str]] = ..., sequence_parallel: _Optional[bool] = ..., etp: _Optional[int] = ...) -> None: ...

class SearchSpec(_message.Message):
    __slots__ = ("tp", "pp", "dp", "cp", "ep", "virtual_stages", "micro_batch_size", "num_microbatches", "zero_stage", "recompute", "sequence_parallel", "allow_fewer_gpus", "memory_reserve_gib", "memory_fragmentation", "max_micro_batch_size", "max_virtual_stages", "etp")
    TP_FIELD_NUMBER: _ClassVar[int]
    PP_FIELD_NUMBER: _ClassVar[int]
    DP_FIELD_NUMBER: _ClassVar[int]
    CP_FIELD_NUMBER: _ClassVar[int]
    EP_FIELD_NUMBER: _ClassVar[int]
    VIRTUAL_STAGES_FIELD_NUMBER: _ClassVar[int]
    MICRO_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_MICROBATCHES_FIELD_NUMBER: _ClassVar[int]
    ZERO_STAGE_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_PARALLEL_FIELD_NUMBER: _ClassVar[int]
    ALLOW_FEWER_GPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_RESERVE_GIB_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FRAGMENTATION_FIELD_NUMBER: _ClassVar[int]
    MAX_MICRO_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_VIRTUAL_STAGES_FIELD_NUMBER: _ClassVar[int]
    ETP_FIELD_NUMBER: _ClassVar[int]
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    virtual_stages: int
    micro_batch_size: int
    num_microbatches: int
    zero_stage: int
    recompute: Recompute
    sequence_parallel: bool
    allow_fewer_gpus: bool
    memory_reserve_gib: float
    memory_fragmentation: float
    max_micro_batch_size: int
    max_virtual_stages: int
    etp: int
    def __init__(self, tp: _Optional[int] = ..., pp: _Optional[int] = ..., dp: _Optional[int] = ..., cp: _Optional[int] = ..., ep: _Optional[int] = ..., virtual_stages: _Optional[int] = ..., micro_batch_size: _Optional[int] = ..., num_microbatches: _Optional[int] = ..., zero_stage: _Optional[int] = ..., recompute: _Optional[_Union[Recompute, str]] = ..., sequence_parallel: _Optional[bool] = ..., allow_fewer_gpus: _Optional[bool] = ..., memory_reserve_gib: _Optional[float] = ..., memory_fragmentation: _Optional[float] = ..., max_micro_batch_size: _Optional[int] = ..., max_virtual_stages: _Optional[int] = ..., etp: _Optional[int] = ...) -> None: ...

class Options(_message.Message):
    __slots__ = ("top_k", "time_limit_s", "num_workers", "relative_gap", "explain")
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT_S_FIELD_NUMBER: _ClassVar[int]
    NUM_WORKERS_FIELD_NUMBER: _ClassVar[int]
    RELATIVE_GAP_FIELD_NUMBER: _ClassVar[int]
    EXPLAIN_FIELD_NUMBER: _ClassVar[int]
    top_k: int
    time_limit_s: float
    num_workers: int
    relative_gap: float
    explain: bool
    def __init__(self, top_k: _Optional[int] = ..., time_limit_s: _Optional[float] = ..., num_workers: _Optional[int] = ..., relative_gap: _Optional[float] = ..., explain: _Optional[bool] = ...) -> None: ...
