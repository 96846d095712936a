"""The Megatron family: Megatron-Core (and NeMo on it) and Megatron-DeepSpeed under DeepSpeed ZeRO."""

from __future__ import annotations

from types import MappingProxyType

from meshplan.solver.profiles.base import ALL_STAGES, FrameworkTiming, Profile, Recipe
from meshplan.solver.schema import Framework

# Megatron-Core memory by data type (docs/user-guide/features/dist_optimizer.md): bf16
# parameters, fp32 main gradients (unsharded: the distributed optimizer reduce-scatters inside the
# full-size buffer unless --grad-reduce-in-bf16), fp32 master weights and Adam moments: 18 bytes,
# "6 + 12/d" with --use-distributed-optimizer. Its vocab-parallel cross-entropy upcasts the logits
# to fp32 and keeps the fp32 softmax for backward, next to the bf16 logits: 6 bytes an element
# (megatron/core/tensor_parallel/cross_entropy.py). Its FP8 recipe is Transformer Engine's with
# FP8 parameters (--fp8-param-gather, as NeMo's bf16_with_fp8_mixed sets fp8_params): each linear
# weight is stored as FP8 (1 byte) and TE caches its columnwise copy for the step (1 byte; module/
# linear.py, cached across micro-batches when Megatron passes is_first_microbatch); embedding and
# output stay bf16. --fp8-param-gather needs the distributed optimizer or FSDP (arguments.py);
# Megatron-FSDP drops the cached copy (megatron_fsdp.md).
_MEGATRON = Recipe(2, 4, 12, logits=6, activations="megatron")

MEGATRON = Profile(
    framework=Framework.MEGATRON,
    title="Megatron-Core with Transformer Engine (pretrain_gpt.py)",
    # --use-distributed-optimizer is ZeRO-1 with any pipeline; ZeRO-2/3 are Megatron-FSDP
    # (--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads[_params]), documented
    # with TP and EP and refused with PP by its v2 adapter (mcore_fsdp_adapter.py).
    zero_stages=frozenset({0, 1, 2, 3}),
    zero_stages_pipelined=frozenset({0, 1}),
    zero_names=MappingProxyType(
        {
            0: "DDP",
            1: "distributed optimizer",
            2: "Megatron-FSDP optim_grads",
            3: "Megatron-FSDP optim_grads_params",
        }
    ),
    # Any pp·v <= layers: --pipeline-model-parallel-layout places layers unevenly (since core
    # v0.13); the interleaved schedule groups pp micro-batches per chunk by default
    # (microbatch_group_size_per_vp_stage = pp) and refuses a remainder below pp (schedules.py).
    interleaving=True,
    # --pipeline-model-parallel-layout may give the embedding and the loss chunks of their own
    extra_chunks=2,
    interleave_whole_rounds=True,
    context_parallel=True,
    moe_tp_needs_sp=True,  # moe_layer.py: MoE with tp > 1 raises without sequence parallelism
    # --expert-tensor-parallel-size (default tp); experts fold over tp·cp·dp (parallel_state)
    expert_tp_one=True,
    expert_parallel=True,
    fp8=True,
    fp8_with_tp=True,
    fp8_zero_min=1,
    moe_with_pp=True,
    tied_with_pp=True,
    bf16=_MEGATRON,
    fp8_recipe=Recipe(
        1,
        4,
        12,
        fp8_weight_cache=1,
        extra_weights=2,
        logits=6,
        activations="megatron",
        fp8_activations=True,  # Transformer Engine saves its linears' inputs in FP8
    ),
    export="megatron",
    timing=FrameworkTiming(
        kernels="TE",
        tp=True,
        dp_stages=ALL_STAGES,
        cp=True,
        pp=True,
        source=(
            "NVIDIA/Megatron-LM @ d98e8a6: --tp-comm-overlap (ModelParallelConfig.tp_comm_overlap, "
            "code default False), --overlap-grad-reduce / --overlap-param-gather (arguments.py, "
            "default False) are on in Megatron-Core's own scaling runs (README @ 937571c) and "
            "NeMo's performance recipes (llm/recipes/llama3_70b.py @ 8e3d65d); "
            "--no-overlap-p2p-communication is store_false (p2p overlap on); --cp-comm-type "
            "p2p (ring, Transformer Engine overlaps each hop with a block); "
            "overlap_moe_expert_parallel_comm default False; TransformerConfig.__post_init__ "
            "(transformer_config.py) asserts it has virtual stages when pp > 1 and no full "
            "recomputation"
        ),
        ep_overlap_needs_chunks=True,
        # schedules.py @ 4dabc62 forward_backward_pipelining_with_interleaving: grad_sync_func
        # per model chunk at its last micro-batch's backward, param_sync_func at its first
        dp_per_chunk=True,
    ),
)


# Megatron-DeepSpeed under DeepSpeed ZeRO: bf16 weights and gradients, fp32 master and moments
# (the ZeRO paper's 2 + 2 + 12 is DeepSpeed's own); the pipeline engine asserts "ZeRO-2 and
# ZeRO-3 are incompatible with pipeline parallelism" (runtime/pipe/engine.py). Megatron-DeepSpeed
# builds Megatron's layers and vocab-parallel loss; its sequence parallelism across ranks is
# Ulysses (--ds-sequence-parallel-size, all-to-all over heads), not the ring context parallelism
# the cost model times, so cp stays 1; its FP8 path needs Transformer Engine layers that its
# DeepSpeed pipeline model (GPTModelPipe) does not build, so there is no FP8 recipe.
_DEEPSPEED = Recipe(2, 2, 12, logits=6, activations="megatron")

DEEPSPEED = Profile(
    framework=Framework.DEEPSPEED,
    title="DeepSpeed ZeRO with Megatron-DeepSpeed tensor and pipeline parallelism",
    zero_stages=frozenset({0, 1, 2, 3}),
    zero_stages_pipelined=frozenset({0, 1}),
    zero_names=MappingProxyType({0: "ZeRO-0", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}),
    interleaving=False,  # PipelineModule: one stage per rank
    expert_tp_one=False,  # --enable-expert-tensor-parallelism splits experts like dense layers
    expert_parallel=True,  # --moe-expert-parallel-size groups carved out of data parallelism
    moe_with_pp=True,
    tied_with_pp=True,
    bf16=_DEEPSPEED,
    fp8_recipe=_DEEPSPEED,
    export="deepspeed",
    timing=FrameworkTiming(
        kernels="TORCH",
        dp_stages=frozenset({3}),
        source=(
            "microsoft/DeepSpeed @ 38327e0: zero/config.py overlap_comm defaults to "
            "stage == 3; Megatron-DeepSpeed tp has no comm overlap"
        ),
    ),
)
