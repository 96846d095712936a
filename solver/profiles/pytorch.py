"""The PyTorch-native frameworks: torchtitan (FSDP2), KempnerForge, llm-foundry (Composer's FSDP1)
and nanotron."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from meshplan.solver.profiles.base import ALL_STAGES, FrameworkTiming, Profile, Recipe
from meshplan.solver.recipes import LOSS_BYTES
from meshplan.solver.schema import Framework, LossKernel

# torchtitan keeps FSDP2's sharded fp32 parameters and Adam moments, reduces gradients in fp32
# (MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)) and gathers bf16 weights per unit:
# 4 + 12 sharded (the sharded fp32 parameter is the master copy). Under pipelining it sets reshard_after_forward=False
# (llama3/infra/parallelize.py) and torch.distributed.pipelining skips the gradient sync until
# the last micro-batch, so weights and fp32 gradients stay unsharded through the step: the
# memory (and traffic) of ZeRO-1. The loss is F.cross_entropy(pred.float()) (components/loss.py):
# bf16 logits, their fp32 copy and log-softmax, then fp32 gradients: 12 bytes an element, split
# over tp by loss parallelism. Float8 (torchao) converts the matmuls only.
# FSDP2's transients (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py post_backward and
# _fsdp_collectives.py foreach_reduce @ pytorch 62a45b6): a unit's bf16 gradients live until they
# are copied into the fp32 reduce-scatter input, 2 bytes beyond the gathered copies (the unit's
# and the prefetched one's all-gather output) and the fp32 input at ZeRO-3; under pipelining the
# last micro-batch's reduction holds the bf16 gradients and the fp32 input, 2 + 4.
# torch.distributed.pipelining allocates a receive buffer per micro-batch and stage
# (torch/distributed/pipelining/stage.py _prepare_backward_infra @ pytorch 88fa1e7).
# The final norm is eager RMSNorm outside any checkpointed block (torchtitan @ 9dec370
# models/norms.py RMSNorm: self._norm(x.float()).type_as(x) * self.weight keeps the fp32 input
# and the bf16 normalized output, 4 + 2 bytes per h), and the output layer keeps its input.
# torchao's Float8Linear (tensorwise scaling: torchtitan's default and the export's recipe) casts
# its weight to FP8 on every forward and saves that cast for backward, 1 byte a weight element
# (pytorch/ao @ 0afa4c1 torchao/float8/float8_linear.py: Float8Linear.forward
# _cast_weight_to_float8_t, matmul_with_hp_or_float8_args.forward save_for_backward(input_hp,
# weight_hp_t); force_recompute_fp8_weight_in_bwd is deprecated there and changes nothing).
# Compiled blocks are billed the same: before pytorch/ao 03c850a torchao/float8/config.py said
# torch.compile may save the unsharded fp8 weight for backward under FSDP; from it, that PyTorch
# core recomputes it, from a PyTorch version that commit does not name (an over-bill there)
FLOAT8_SAVED_WEIGHT = 1

_TORCHTITAN = Recipe(
    2,
    4,
    12,
    activations="torchtitan",
    sharded_master_only=True,
    gather_transient=2,
    pipelined_reduce=6,
    pipeline_buffers=True,
    fsdp="FSDP2",
    loss_parallel_held=True,
    final_norm=6,
    # parallelize_llama.py: ptd_checkpoint_wrapper, non-reentrant (CheckpointWrapper's default)
    recompute_stops_early=True,
)

TORCHTITAN = Profile(
    framework=Framework.TORCHTITAN,
    title="torchtitan: FSDP2, TP, PP, CP, EP on PyTorch DTensor",
    zero_stages=frozenset({3}),  # data_parallel_shard_degree: FSDP2
    zero_stages_pipelined=frozenset({1}),  # FSDP2 under PP: no reshard, one sync per step
    zero_names=MappingProxyType(
        {0: "no data parallelism", 1: "FSDP2 under pipelining", 3: "FSDP2"}
    ),
    interleaving=True,  # Interleaved1F1B; module_fqns_per_model_part places any split
    context_parallel=True,
    sequence_parallel_required=True,  # TP plans always shard the sequence (SequenceParallel)
    moe_tp_needs_sp=True,
    expert_tp_one=True,  # parallel_dims.py: ETP = TP or ETP = 1, efsdp = dp·cp·tp/(etp·ep)
    expert_parallel=True,
    fp8=True,
    fp8_with_tp=True,
    moe_with_pp=True,
    tied_with_pp=True,
    bf16=_TORCHTITAN,
    fp8_recipe=replace(_TORCHTITAN, fp8_saved_weights=FLOAT8_SAVED_WEIGHT, torchao_float8=True),
    export="torchtitan",
    interleave_torch_rounds=True,  # Interleaved1F1B is PyTorch's schedule
    # torchtitan 0.3.0 (distributed/parallel_dims.py): "EP borrows ranks from FSDP and TP:
    # efsdp = dp_shard * cp * tp / ep"; no expert tensor parallelism, so etp = 1
    expert_tp_split=False,
    timing=FrameworkTiming(
        kernels="TORCH",
        dp_stages=ALL_STAGES,
        cp=True,
        source=(
            "pytorch/torchtitan @ b5bcd76: CompileConfig.enable_async_tensor_parallel = False "
            "(config/configs.py); FSDP2 fully_shard prefetches the next all-gather "
            "(distributed/fsdp.py); context parallelism all-gathers the K,V shards after the "
            "first sub-SDPA (@ 9dec370 config_manager.py: context_parallel_rotate_method "
            "'allgather', PyTorch's default)"
        ),
        cp_ring=False,
    ),
)

# KempnerForge (its scaling guide; solver/catalog/NOTES.md §4):
# - parameters and AdamW moments in BF16 (param_dtype is "the master weight dtype"): 2 + 4 B,
#   sharded by FSDP2;
# - gradient accumulation runs under set_requires_gradient_sync(False), so FSDP2 keeps every
#   parameter's unsharded gradient upcast to reduce_dtype=fp32 (4 B per TP-local parameter)
#   until the last micro-batch reduce-scatters it; the sharded BF16 gradient only exists after
#   that, past the backward peak, so it is not counted. The buffer is counted for one
#   micro-batch too (an over-estimate there): memory must fall with a smaller micro-batch at a
#   fixed batch, which an M-dependent buffer would break;
# - the token embedding is replicated across tp and the output head is gathered to Replicate,
#   so every tp rank holds the embedding and the full [b, s, V] logits; 8 B per logit element
#   (bf16 logits + fp32 log-probabilities + bf16 gradient) is what the guide's three memory
#   figures leave once the state, the checkpoints and one block's recompute are taken out (a
#   residual fitted with the flat_12h activation form, which it therefore keeps, and which holds
#   the gathered embedding and output unit too);
# - TP is DTensor with sequence parallelism and no async TP: "TP fires all-gather/reduce-scatter
#   on every matmul" (the scaling guide), so its collectives are counted fully exposed;
# - the model runs under torch.compile unless train.compile_model=false (KempnerInstitute/
#   KempnerForge @ 5666d0d config/training.py compile_model: bool = True; distributed/
#   parallel.py torch.compile(model)), and its GQA repeats K,V to the query heads
#   (model/attention.py repeat_interleave): both read by the eager pointwise timing.
_KEMPNERFORGE = Recipe(
    weights=2,
    gradients=0,
    optimizer=4,
    accumulation=4,
    logits=8,
    vocab_parallel=False,
    reduce_bytes=4,
    activations="flat_12h",
    tp_exposed=True,
    root_gather=False,
    master=0,
    fsdp="FSDP2",
    compiled=True,
    kv_repeated=True,
    # distributed/parallel.py apply_ac: checkpoint_wrapper(CheckpointImpl.NO_REENTRANT)
    recompute_stops_early=True,
)

KEMPNERFORGE = Profile(
    framework=Framework.KEMPNERFORGE,
    title="KempnerForge: FSDP2 and DTensor TP on PyTorch",
    zero_stages=frozenset({0, 3}),  # dp_replicate (DDP) or dp_shard (FSDP2)
    zero_stages_pipelined=frozenset({1}),  # FSDP2 under torch.distributed.pipelining
    zero_names=MappingProxyType(
        {0: "dp_replicate", 1: "dp_shard under pipelining", 3: "dp_shard (FSDP2)"}
    ),
    interleaving=False,  # build_stage_module: one stage per pp rank
    context_parallel=False,  # distributed.cp exists but nothing applies it (a stub)
    sequence_parallel_required=True,
    moe_tp_needs_sp=True,
    # world = dp_replicate·dp_shard·tp·pp·cp·ep and the data-parallel rank leaves ep out
    # (distributed/utils.py get_dp_info): its ep ranks share a batch, a layout outside tp·pp·cp·dp
    fp8=True,
    fp8_with_tp=False,  # config/job.py: "FP8 + Tensor Parallelism is not yet supported"
    moe_with_pp=False,  # config/job.py: "MoE + Pipeline Parallelism is not supported"
    tied_with_pp=False,  # config/job.py: tied embeddings are not supported with pp
    bf16=_KEMPNERFORGE,
    # Float8Linear converts the matmuls only, and saves the FP8 weight it casts
    fp8_recipe=replace(_KEMPNERFORGE, fp8_saved_weights=FLOAT8_SAVED_WEIGHT, torchao_float8=True),
    export="kempnerforge",
    timing=FrameworkTiming(
        kernels="TORCH",
        dp_stages=ALL_STAGES,
        source=(
            "KempnerInstitute/KempnerForge @ 5666d0d: DTensor SequenceParallel tp without async "
            "TP (distributed/tensor_parallel.py; its scaling guide: 'TP fires "
            "all-gather/reduce-scatter on every matmul'); FSDP2 fully_shard "
            "(distributed/parallel.py)"
        ),
    ),
)

# llm-foundry trains with Composer's PyTorch FSDP1 (fsdp_config in its YAML): mixed_precision PURE
# casts parameters, gradient reduction and buffers to bf16 while the sharded FlatParameter stays
# fp32 (the master: no sharded bf16 copy), and the reduced gradient shard is cast back to the
# fp32 parameter's dtype (torch/distributed/fsdp/_runtime_utils.py _cast_grad_to_param_dtype):
# 4 + 12 sharded at FULL_SHARD, as torchtitan's. A unit's unsharded flat gradient is in the
# parameter dtype and is reduce-scattered where it lies (bf16, no fp32 copy): 2 bytes of the
# unit beside its gathered weights (`unit_grad`). Its default loss is flash-attn's fused
# cross-entropy on bf16 logits (LOSS_BYTES FUSED_BF16); layers are eager PyTorch with flash
# attention, LayerNorm and a GELU MLP (modeling_mpt.py, the torchtitan form at tp = 1).
# Composer's amp_fp8 runs the linears as Transformer Engine's (MPT fc_type te), which save
# their inputs in FP8.
_LLM_FOUNDRY = Recipe(
    2,
    4,
    12,
    logits=LOSS_BYTES[LossKernel.FUSED_BF16],
    activations="torchtitan",
    sharded_master_only=True,
    unit_grad=2,
    fsdp="FSDP1",
    # Composer applies checkpoint_wrapper(CheckpointImpl.NO_REENTRANT) to every MPTBlock where
    # the YAML sets activation_checkpointing_reentrant: false, as every pretrain YAML does
    # (mosaicml/composer v0.16.4 composer/trainer/dist_strategy.py prepare_fsdp_module;
    # llm-foundry @ b2a43a1 scripts/train/yamls/pretrain, MPTForCausalLM.activation_
    # checkpointing_fn): early stopping from torch 2.1 on
    recompute_stops_early=True,
)

LLM_FOUNDRY = Profile(
    framework=Framework.LLM_FOUNDRY,
    title="llm-foundry: Composer with PyTorch FSDP1",
    # fsdp_config.sharding_strategy: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD; HYBRID_SHARD and
    # _HYBRID_SHARD_ZERO2 (sharded inside a node, replicated across nodes) with
    # training.hybrid_shard
    zero_stages=frozenset({0, 2, 3}),
    zero_stages_pipelined=frozenset(),
    zero_names=MappingProxyType({0: "NO_SHARD", 2: "SHARD_GRAD_OP", 3: "FULL_SHARD"}),
    fp8=True,
    bf16=_LLM_FOUNDRY,
    fp8_recipe=replace(_LLM_FOUNDRY, fp8_activations=True),
    export="llm_foundry",
    timing=FrameworkTiming(
        kernels="TORCH",
        dp_stages=ALL_STAGES,
        source=(
            "mosaicml/llm-foundry @ 8c8dd48: FSDP1 with limit_all_gathers and Composer's "
            "backward prefetch (BACKWARD_PRE) hides the gathers and reduce-scatters behind the "
            "layers (the torchtitan FSDP timing constants)"
        ),
    ),
    # llm-foundry trains data-parallel only: its experimental tp_config has no pipeline and
    # MPT's benchmarks run FSDP alone (scripts/train/benchmarking/README.md)
    tensor_parallel=False,
    pipeline_parallel=False,
    selective_recompute=False,  # fsdp_config.activation_checkpointing wraps whole blocks
)

# nanotron (config YAML: parallelism dp, tp, pp, tp_mode; optimizer zero_stage 0/1,
# accumulate_grad_in_fp32): bf16 parameters; FP32GradientAccumulator keeps an fp32 gradient
# buffer for every parameter, unsharded under ZeRO-1 ("we need to accumulate gradients for all
# parameters"), and an fp32 copy of the parameters it updates (sharded by ZeRO-1): 2 + 4 +
# (4 + 8) (optim/gradient_accumulator.py, helpers.py init_optimizer_and_grad_accumulator). With
# dp > 1 and ZeRO-0 the model is wrapped in torch DDP, whose bf16 buckets stay allocated: 2 more
# (`ddp_grads`); with ZeRO-1 and the fp32 accumulator it is not (nanotron @ e24d248, the sweep's
# version, trainer.py: make_ddp = dp > 1 and not (accumulate_grad_in_fp32 and zero_stage > 0);
# since 7bc9923 the wrap is made but get_fp32_accum_hook raises NotImplementedError for ZeRO's
# reduce-scatter, so ZeRO-1 with the fp32 accumulator runs only unwrapped:
# `ddp_zero_below`). The parameters' bf16 .grad are added to the fp32 buffer and freed only
# once a micro-batch's backward has run whole (FP32GradientAccumulator.backward), so all of the
# stage's are alive together beside the fp32 buffer, in place of that micro-batch's activations:
# 2 more at that peak where it is the larger (`backward_grads`). Pipeline stages are split by layer cost (models/base.py;
# `cost_balanced_stages`). With tp > 1 in reduce_scatter mode the column-parallel inputs are
# gathered into, and the row-parallel output gradients gathered in backward into, two
# persistent [tokens, h] buffers (parallel/utils.py MemoryBuffer "allgather", "allgather2";
# parallel/tensor_parallel/functional.py: `tp_gather_buffers`). The logits are cast to fp32 (models/llama.py cast_to_fp32) and the
# sharded cross-entropy subtracts the row max into a second fp32 tensor, which it keeps as the
# softmax (LOSS_BYTES COPY_FP32: two fp32 copies at the forward's peak). Layers are eager PyTorch with flash attention and a gated MLP (8f); its
# reduce_scatter tp mode keeps the sequence shard of the column-parallel inputs and all-gathers
# them again in backward (tp_recompute_allgather).
_NANOTRON = Recipe(
    2,
    4,
    12,
    logits=LOSS_BYTES[LossKernel.COPY_FP32],
    activations="nanotron",
    ddp_grads=2,
    ddp_zero_below=1,
    tp_gather_buffers=2,
    backward_grads=2,
    cost_balanced_stages=True,  # models/base.py: blocks placed by cumulative compute cost
)

NANOTRON = Profile(
    framework=Framework.NANOTRON,
    title="nanotron: data, tensor and pipeline parallelism with ZeRO-1",
    zero_stages=frozenset({0, 1}),  # optimizer.zero_stage 0 or 1 (optim/zero.py)
    zero_stages_pipelined=frozenset({0, 1}),
    zero_names=MappingProxyType({0: "zero_stage 0", 1: "zero_stage 1"}),
    interleaving=False,  # pp_engine: 1f1b or afab, no interleaved schedule
    context_parallel=False,  # context_parallel_size is not wired into the Llama model
    sequence_parallel_required=False,  # tp_mode ALL_REDUCE or REDUCE_SCATTER
    moe_with_pp=True,
    tied_with_pp=True,
    bf16=_NANOTRON,
    fp8_recipe=_NANOTRON,
    export="nanotron",
    timing=FrameworkTiming(
        kernels="TORCH",
        tp=False,  # tp_linear_async_communication defaults to False
        # ... and when on (tp_mode REDUCE_SCATTER), each all-gather hides behind its own shard's
        # GEMM (huggingface/nanotron @ e24d248 parallel/tensor_parallel/functional.py
        # _ColumnLinearAsyncCommunication, _RowLinearAsyncCommunication)
        tp_own_shard=True,
        # ZeRO-0: the fp32 accumulator's DDP hook reduces each bucket during the last
        # micro-batch's backward. ZeRO-1 with the fp32 accumulator is not DDP-wrapped (@ e24d248
        # trainer.py make_ddp): train_step all-reduces the fp32 gradient buffers after the whole
        # pipeline step (sync_gradients_across_dp, reduce_scatter=False) and the ZeRO optimizer
        # all-gathers the updated fp32 parameters after its step (optim/zero.py
        # _all_gather_params): nothing overlaps them (costmodel/dp_timing.py _dp_volume).
        dp_stages=frozenset({0}),
        source=(
            "huggingface/nanotron @ 2411b02: config/parallelism_config.py "
            "(tp_linear_async_communication False by default); the fp32 accumulator's DDP "
            "hook reduces each bucket during the last micro-batch's backward (helpers.py); "
            "@ e24d248 trainer.py train_step: ZeRO-1 all-reduces the fp32 gradients after the "
            "pipeline step, optim/zero.py all-gathers the fp32 parameters after the update"
        ),
    ),
    selective_recompute=False,  # parallelism.recompute_layer: whole layers only
)
