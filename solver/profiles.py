"""Framework profiles: the layouts each training framework can run, what it keeps in memory, and
how a plan is exported for it. One frozen object per framework (`PROFILES`); every rule and
number names the code it was read from (`SOURCES`, at the commit given there).

The search treats a profile's rules as constraints (`space.violations` is the specification, the
generators produce exactly the points that obey it), so a plan is always one the framework can
express; `tools/export/emit.py` then writes it in the framework's own format.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from meshplan.solver.recipes import LOSS_BYTES, with_knobs
from meshplan.solver.schema import Framework, LossKernel, Precision, TrainingSpec

ACT_BYTES = 2  # bf16 activations and collectives
ALL_STAGES = frozenset({0, 1, 2, 3})  # ZeRO stages
LOGIT_BYTES = 12  # non-fused cross-entropy on .float() logits (see TORCHTITAN below)

# The code read for each profile (repository @ commit: files).
SOURCES: Mapping[Framework, str] = MappingProxyType(
    {
        Framework.GENERIC: (
            "the textbook recipe: Rajbhandari et al. 2020 (ZeRO §3: 2 + 2 + 12 bytes per "
            "parameter in mixed precision) and DeepSeek-V3's FP8 recipe as 1 + 2 + 6"
        ),
        Framework.MEGATRON: (
            "NVIDIA/Megatron-LM @ d98e8a64ddf34856e74b24714e3bedb2f5a39553: "
            "megatron/training/arguments.py (validate_args), "
            "megatron/core/transformer/transformer_config.py, "
            "megatron/core/transformer/pipeline_parallel_layer_layout.py, "
            "megatron/core/pipeline_parallel/schedules.py, megatron/core/model_parallel_config.py, "
            "megatron/core/transformer/moe/moe_layer.py, "
            "megatron/core/tensor_parallel/cross_entropy.py, "
            "megatron/core/extensions/transformer_engine.py, "
            "docs/user-guide/features/{dist_optimizer,megatron_fsdp}.md; "
            "NVIDIA/TransformerEngine @ d0067d0da6cb01811b8072a7d304f0e00344ce2b: "
            "transformer_engine/pytorch/module/linear.py"
        ),
        Framework.TORCHTITAN: (
            "pytorch/torchtitan @ e347b1e5e6b6941d789d16d340145294d82dc71e (the last TOML job "
            "config): torchtitan/config/job_config.py, torchtitan/distributed/parallel_dims.py, "
            "torchtitan/distributed/pipeline_parallel.py, torchtitan/components/loss.py, "
            "torchtitan/models/llama3/infra/parallelize.py, torchtitan/train.py"
        ),
        Framework.DEEPSPEED: (
            "microsoft/DeepSpeed @ 38327e07f6cd39b63418f60cedd1651b0be3e7c3: "
            "deepspeed/runtime/pipe/engine.py, deepspeed/runtime/engine.py; "
            "microsoft/Megatron-DeepSpeed @ f4157bea69f3df8c6cb66f2ebcda66ba03d1288e: "
            "megatron/arguments.py, megatron/model/gpt_model.py"
        ),
        Framework.LLM_FOUNDRY: (
            "mosaicml/llm-foundry @ 8c8dd48f72168c5d51e2f7b151595892a8fba43d: "
            "scripts/train/yamls/pretrain/mpt-*.yaml, scripts/train/benchmarking/"
            "submit_benchmarks.py, llmfoundry/models/mpt/modeling_mpt.py, "
            "llmfoundry/utils/config_utils.py; Composer's FSDP1 mixed precision PURE "
            "(param, reduce and buffer dtype bf16; sharded fp32 flat parameters)"
        ),
        Framework.NANOTRON: (
            "huggingface/nanotron @ 2411b022a75fb7f7561a1bb4166706da5e1b76de: "
            "src/nanotron/config/{config,parallelism_config}.py, src/nanotron/helpers.py, "
            "src/nanotron/optim/{gradient_accumulator,zero}.py, "
            "src/nanotron/parallel/tensor_parallel/functional.py, src/nanotron/models/llama.py, "
            "src/nanotron/parallel/pipeline_parallel/engine.py"
        ),
        Framework.KEMPNERFORGE: (
            "KempnerInstitute/KempnerForge @ 5666d0d161539998210f99f16f986b1ab76cbffe: "
            "kempnerforge/config/{job,distributed,training}.py, "
            "kempnerforge/distributed/{parallel,pipeline_parallel,utils}.py, scripts/train.py; "
            "the memory recipe fitted to its published benchmarks (solver/catalog/NOTES.md §4)"
        ),
    }
)


@dataclass(frozen=True)
class Recipe:
    """What a framework keeps in memory, per parameter and per logit element (bytes).

    ZeRO stage z shards the optimizer (z >= 1), the gradients (z >= 2) and the weights (z >= 3)
    over the data-parallel group (Rajbhandari et al. 2020)."""

    weights: int  # compute copy of each parameter
    gradients: int  # main gradients
    optimizer: int  # master copy and Adam moments
    accumulation: int = 0  # per TP-local parameter, never sharded: grads kept across micro-batches
    fp8_weight_cache: int = 0  # per layer parameter, unsharded: cached FP8 weight copies
    logits: int = LOGIT_BYTES  # per logit element at the loss
    vocab_parallel: bool = True  # input embedding and logits split over tp (else replicated)
    reduce_bytes: int = 0  # FSDP2 no-sync: bytes per parameter reduce-scattered once per step
    sharded_master_only: bool = False  # ZeRO-3 keeps no sharded compute copy (FSDP2 fp32 params)
    root_gather: bool = True  # ZeRO-3 counts the gathered output layer / embedding unit
    extra_weights: int = 0  # bytes of the embedding and output weights when not `weights`
    activations: str = "flat_12h"  # stored-activation form (costmodel/activations.py)
    tp_exposed: bool = False  # tp collectives never overlap compute (else the fitted eps_tp)
    gather_transient: int = 0  # ZeRO-3: per parameter of one unit beyond its gathered copies
    pipelined_reduce: int = 0  # pp > 1: per parameter of one unit at the step's one reduction
    pipeline_buffers: bool = False  # pp > 1: a receive buffer per micro-batch and chunk
    # K,V repeated to the query heads before attention (torchtitan @ 9dec370 models/llama/
    # model.py repeat_kv; since then SDPA's enable_gqa): the width cp all-gathers (memory.py)
    kv_repeated: bool = False
    master: int = 4  # bytes of `optimizer` that are the master weights (the rest: moments)
    ddp_grads: int = 0  # with dp > 1: torch DDP's bf16 buckets beside the main gradients
    unit_grad: int = 0  # ZeRO-3: a gathered unit's gradient per parameter (0: `gradients`)
    loss_chunked: bool = False  # the loss never holds the whole logits (memory.py)
    fp8_activations: bool = False  # FP8 linear inputs stored in FP8 (activations.py)
    fsdp: str = ""  # "FSDP1" or "FSDP2": the PyTorch FSDP the recipe's ZeRO-3 is
    loss_parallel_held: bool = False  # tp > 1: DTensor loss_parallel, held with the recompute
    cost_balanced_stages: bool = False  # pipeline stages split by layer cost (nanotron)


@dataclass(frozen=True)
class FrameworkTiming:
    """What a framework overlaps by default and whose kernels it runs (the time model reads it;
    a request's `training.*_comm_overlap` switch overrides an entry). Defaults are what the
    framework's own published performance recipes run, with the code default noted where it
    differs."""

    kernels: str  # kernel family: "TE" (fused, Transformer Engine) or "TORCH" (PyTorch-native)
    tp: bool  # tp collectives overlapped with the GEMMs
    dp_stages: frozenset[int]  # ZeRO stages whose dp/FSDP traffic is overlapped with compute
    cp: bool  # ring K/V exchange overlapped with the attention blocks
    ep: bool  # expert all-to-all overlapped with another micro-batch's compute
    pp: bool  # pipeline sends overlapped with compute (only their latency is exposed)
    source: str
    ep_dedup: bool = False  # tokens dispatched once per remote node (DeepEP), not per expert
    cp_ring: bool = True  # cp exchanges K,V hop by hop (each hop hides behind a block), else
    # all-gathers them after the first block (only that block hides the exchange)
    ep_overlap_needs_chunks: bool = False  # the ep overlap needs v > 1 when pp > 1 and refuses
    # full recomputation (else it is timed exposed there)


ALL_STAGES = frozenset({0, 1, 2, 3})


@dataclass(frozen=True)
class Profile:
    """One framework: the layouts it can express, its memory recipe, its export."""

    framework: Framework
    title: str  # what the profile stands for, in words
    zero_stages: frozenset[int]  # ZeRO stages it runs with pp = 1 and a data-parallel group
    zero_stages_pipelined: frozenset[int]  # ... with pp > 1
    zero_names: Mapping[int, str]  # what each stage is called in the framework
    interleaving: bool  # virtual pipeline stages (v > 1)
    extra_chunks: int  # pipeline chunks beyond the layers (embedding, loss as chunks of their own)
    interleave_whole_rounds: bool  # v > 1 needs num_microbatches to be a multiple of pp
    context_parallel: bool  # cp > 1
    sequence_parallel_required: bool  # tp > 1 always shards the sequence
    moe_tp_needs_sp: bool  # MoE with tp > 1 needs sequence parallelism
    expert_tp_one: bool  # experts may be unsplit (etp = 1) while tp > 1: ep spans the tp ranks
    expert_parallel: bool  # ep > 1 expressible in the planner's layout (ep inside tp·cp·dp)
    fp8: bool  # has an FP8 training recipe
    fp8_with_tp: bool  # FP8 composes with tp > 1
    fp8_zero_min: int  # least ZeRO stage its FP8 recipe needs over a data-parallel group
    moe_with_pp: bool  # MoE layers in a pipeline
    tied_with_pp: bool  # tied embeddings in a pipeline
    bf16: Recipe
    fp8_recipe: Recipe
    export: str  # tools.export kind
    timing: FrameworkTiming  # what it overlaps and whose kernels it runs (the time model)
    # v > 1 needs num_microbatches to be a multiple of its rounds, max(1, M // pp): PyTorch's
    # ScheduleInterleaved1F1B (torch/distributed/pipelining/schedules.py, torch 2.13.0)
    interleave_torch_rounds: bool = False
    expert_tp_split: bool = True  # experts may be split over tp (etp = tp) when tp > 1
    tensor_parallel: bool = True  # tp > 1
    pipeline_parallel: bool = True  # pp > 1
    selective_recompute: bool = True  # a recomputation between none and whole layers

    @property
    def source(self) -> str:
        return SOURCES[self.framework]

    def recipe(self, precision: Precision, grad_reduce_in_bf16: bool = False) -> Recipe:
        r = self.fp8_recipe if precision is Precision.FP8 else self.bf16
        if grad_reduce_in_bf16 and self.framework is Framework.MEGATRON:
            return replace(r, gradients=2)  # --grad-reduce-in-bf16: bf16 main gradients
        return r

    def recipe_for(self, training: TrainingSpec) -> Recipe:
        """The profile's recipe with the request's memory knobs applied (`with_knobs`)."""
        t = training
        return with_knobs(self.recipe(t.precision, t.grad_reduce_in_bf16), t)

    def zero_allowed(self, pp: int, dp_cp: int, fp8: bool = False) -> frozenset[int]:
        """ZeRO stages for a layout: none to shard over a single data-parallel rank."""
        if dp_cp == 1:
            return frozenset({0})
        zs = self.zero_stages if pp == 1 else self.zero_stages_pipelined
        return frozenset(z for z in zs if z >= self.fp8_zero_min) if fp8 else zs

    def etp_values(self, tp: int, moe: bool) -> list[int]:
        """Expert tensor-parallel degrees this framework can pair with tp."""
        if moe and tp > 1 and not self.expert_tp_split:
            return [1]
        if moe and self.expert_tp_one and tp > 1:
            return [1, tp]
        return [tp]


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
    sequence_parallel_required=False,
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
        ep=False,
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
    ),
)

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
    extra_chunks=0,
    interleave_whole_rounds=False,
    context_parallel=True,
    sequence_parallel_required=True,  # TP plans always shard the sequence (SequenceParallel)
    moe_tp_needs_sp=True,
    expert_tp_one=True,  # parallel_dims.py: ETP = TP or ETP = 1, efsdp = dp·cp·tp/(etp·ep)
    expert_parallel=True,
    fp8=True,
    fp8_with_tp=True,
    fp8_zero_min=0,
    moe_with_pp=True,
    tied_with_pp=True,
    bf16=_TORCHTITAN,
    fp8_recipe=_TORCHTITAN,
    export="torchtitan",
    interleave_torch_rounds=True,  # Interleaved1F1B is PyTorch's schedule
    # torchtitan 0.3.0 (distributed/parallel_dims.py): "EP borrows ranks from FSDP and TP:
    # efsdp = dp_shard * cp * tp / ep"; no expert tensor parallelism, so etp = 1
    expert_tp_split=False,
    timing=FrameworkTiming(
        kernels="TORCH",
        tp=False,
        dp_stages=ALL_STAGES,
        cp=True,
        ep=False,
        pp=False,
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
    extra_chunks=0,
    interleave_whole_rounds=False,
    context_parallel=False,
    sequence_parallel_required=False,
    moe_tp_needs_sp=False,
    expert_tp_one=False,  # --enable-expert-tensor-parallelism splits experts like dense layers
    expert_parallel=True,  # --moe-expert-parallel-size groups carved out of data parallelism
    fp8=False,
    fp8_with_tp=False,
    fp8_zero_min=0,
    moe_with_pp=True,
    tied_with_pp=True,
    bf16=_DEEPSPEED,
    fp8_recipe=_DEEPSPEED,
    export="deepspeed",
    timing=FrameworkTiming(
        kernels="TORCH",
        tp=False,
        dp_stages=frozenset({3}),
        cp=False,
        ep=False,
        pp=False,
        source=(
            "microsoft/DeepSpeed @ 38327e0: zero/config.py overlap_comm defaults to "
            "stage == 3; Megatron-DeepSpeed tp has no comm overlap"
        ),
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
#   on every matmul" (the scaling guide), so its collectives are counted fully exposed.
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
    extra_chunks=0,
    interleave_whole_rounds=False,
    context_parallel=False,  # distributed.cp exists but nothing applies it (a stub)
    sequence_parallel_required=True,
    moe_tp_needs_sp=True,
    expert_tp_one=False,
    # world = dp_replicate·dp_shard·tp·pp·cp·ep and the data-parallel rank leaves ep out
    # (distributed/utils.py get_dp_info): its ep ranks share a batch, a layout outside tp·pp·cp·dp
    expert_parallel=False,
    fp8=True,
    fp8_with_tp=False,  # config/job.py: "FP8 + Tensor Parallelism is not yet supported"
    fp8_zero_min=0,
    moe_with_pp=False,  # config/job.py: "MoE + Pipeline Parallelism is not supported"
    tied_with_pp=False,  # config/job.py: tied embeddings are not supported with pp
    bf16=_KEMPNERFORGE,
    fp8_recipe=_KEMPNERFORGE,  # Float8Linear converts the matmuls only
    export="kempnerforge",
    timing=FrameworkTiming(
        kernels="TORCH",
        tp=False,
        dp_stages=ALL_STAGES,
        cp=False,
        ep=False,
        pp=False,
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
)

LLM_FOUNDRY = Profile(
    framework=Framework.LLM_FOUNDRY,
    title="llm-foundry: Composer with PyTorch FSDP1",
    # fsdp_config.sharding_strategy: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD (HYBRID_SHARD shards
    # inside a node only: a data-parallel split the planner's layouts do not name)
    zero_stages=frozenset({0, 2, 3}),
    zero_stages_pipelined=frozenset(),
    zero_names=MappingProxyType({0: "NO_SHARD", 2: "SHARD_GRAD_OP", 3: "FULL_SHARD"}),
    interleaving=False,
    extra_chunks=0,
    interleave_whole_rounds=False,
    context_parallel=False,
    sequence_parallel_required=False,
    moe_tp_needs_sp=False,
    expert_tp_one=False,
    expert_parallel=False,
    fp8=True,
    fp8_with_tp=False,
    fp8_zero_min=0,
    moe_with_pp=False,
    tied_with_pp=False,
    bf16=_LLM_FOUNDRY,
    fp8_recipe=replace(_LLM_FOUNDRY, fp8_activations=True),
    export="llm_foundry",
    timing=FrameworkTiming(
        kernels="TORCH",
        tp=False,
        dp_stages=ALL_STAGES,
        cp=False,
        ep=False,
        pp=False,
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
# dp > 1 the model is wrapped in torch DDP (trainer.py), whose bf16 buckets stay allocated: 2
# more (`ddp_grads`); the parameters' bf16 .grad are added to the fp32 buffer and freed after
# each micro-batch's backward (FP32GradientAccumulator.backward), growing as its activations
# are freed, so they are not counted. Pipeline stages are split by layer cost (models/base.py;
# `cost_balanced_stages`). The logits are cast to fp32 (models/llama.py cast_to_fp32) and the
# sharded cross-entropy keeps that fp32 softmax, its gradient in place (LOSS_BYTES
# INPLACE_FP32). Layers are eager PyTorch with flash attention and a gated MLP (8f); its
# reduce_scatter tp mode keeps the sequence shard of the column-parallel inputs and all-gathers
# them again in backward (tp_recompute_allgather).
_NANOTRON = Recipe(
    2,
    4,
    12,
    logits=LOSS_BYTES[LossKernel.INPLACE_FP32],
    activations="nanotron",
    ddp_grads=2,
    cost_balanced_stages=True,  # models/base.py: blocks placed by cumulative compute cost
)

NANOTRON = Profile(
    framework=Framework.NANOTRON,
    title="nanotron: data, tensor and pipeline parallelism with ZeRO-1",
    zero_stages=frozenset({0, 1}),  # optimizer.zero_stage 0 or 1 (optim/zero.py)
    zero_stages_pipelined=frozenset({0, 1}),
    zero_names=MappingProxyType({0: "zero_stage 0", 1: "zero_stage 1"}),
    interleaving=False,  # pp_engine: 1f1b or afab, no interleaved schedule
    extra_chunks=0,
    interleave_whole_rounds=False,
    context_parallel=False,  # context_parallel_size is not wired into the Llama model
    sequence_parallel_required=False,  # tp_mode ALL_REDUCE or REDUCE_SCATTER
    moe_tp_needs_sp=False,
    expert_tp_one=False,
    expert_parallel=False,
    fp8=False,
    fp8_with_tp=False,
    fp8_zero_min=0,
    moe_with_pp=True,
    tied_with_pp=True,
    bf16=_NANOTRON,
    fp8_recipe=_NANOTRON,
    export="nanotron",
    timing=FrameworkTiming(
        kernels="TORCH",
        tp=False,  # tp_linear_async_communication defaults to False
        dp_stages=ALL_STAGES,
        cp=False,
        ep=False,
        pp=False,
        source=(
            "huggingface/nanotron @ 2411b02: config/parallelism_config.py "
            "(tp_linear_async_communication False by default); the fp32 accumulator's DDP "
            "hook reduces each bucket during the last micro-batch's backward (helpers.py)"
        ),
    ),
    selective_recompute=False,  # parallelism.recompute_layer: whole layers only
)

# The textbook profile: every layout the planner's axes can describe, the recipes of "Why one GPU is
# not enough" (DeepSeek-V3 book, ch. 11).
GENERIC = Profile(
    framework=Framework.GENERIC,
    title="no framework: the textbook recipe",
    zero_stages=frozenset({0, 1, 2, 3}),
    zero_stages_pipelined=frozenset({0, 1, 2, 3}),
    zero_names=MappingProxyType({z: f"ZeRO-{z}" for z in range(4)}),
    interleaving=True,
    extra_chunks=0,
    interleave_whole_rounds=False,
    context_parallel=True,
    sequence_parallel_required=False,
    moe_tp_needs_sp=False,
    expert_tp_one=False,
    expert_parallel=True,
    fp8=True,
    fp8_with_tp=True,
    fp8_zero_min=0,
    moe_with_pp=True,
    tied_with_pp=True,
    bf16=Recipe(2, 2, 12),
    fp8_recipe=Recipe(1, 2, 6),
    export="megatron",
    timing=FrameworkTiming(
        kernels="TE",
        tp=False,
        dp_stages=ALL_STAGES,
        cp=True,
        ep=False,
        pp=False,
        source=(
            'textbook ("Designing a pretraining system", "The scaling ceiling"): fused kernels, '
            "tp traffic exposed, dp overlapped"
        ),
    ),
)

PROFILES: Mapping[Framework, Profile] = MappingProxyType(
    {
        p.framework: p
        for p in (GENERIC, MEGATRON, TORCHTITAN, DEEPSPEED, KEMPNERFORGE, LLM_FOUNDRY, NANOTRON)
    }
)


def profile_of(framework: Framework) -> Profile:
    return PROFILES[framework]


def check_request(framework: Framework, precision: Precision, gpu: str, gpu_fp8: bool) -> None:
    """Precision a GPU or a framework cannot train in is bad input (ValueError naming the field)."""
    if precision is not Precision.FP8:
        return
    if not gpu_fp8:
        raise ValueError(
            f"training.precision FP8 needs FP8 tensor cores, which {gpu} does not have "
            "(Hopper and later: h100, h200, b200; or mi300x)"
        )
    prof = PROFILES[framework]
    if not prof.fp8:
        raise ValueError(
            f"training.precision FP8 is not available with training.framework "
            f"{framework.value}: {prof.title} has no FP8 training recipe"
        )
