"""The shapes of a framework profile: its memory recipe (`Recipe`), what it overlaps and whose
kernels it runs (`FrameworkTiming`), the layouts it can express (`Profile`), and the code each
profile was read from (`SOURCES`, repository @ commit: files)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType

from meshplan.solver.recipes import with_knobs
from meshplan.solver.record import record
from meshplan.solver.schema import Framework, Precision, TrainingSpec

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
            "huggingface/nanotron @ e24d2483a4e508e1298ed91b5f5abffa473dc647 (the scaling "
            "sweep's version, the one its memory recipe is checked against): "
            "src/nanotron/trainer.py (make_ddp), src/nanotron/helpers.py, "
            "src/nanotron/optim/{gradient_accumulator,zero}.py, "
            "src/nanotron/parallel/tensor_parallel/functional.py, src/nanotron/models/"
            "{base,llama}.py, src/nanotron/parallel/pipeline_parallel/engine.py, "
            "src/nanotron/parallel/utils.py; the same rules @ "
            "2411b022a75fb7f7561a1bb4166706da5e1b76de (the config files the export writes: "
            "src/nanotron/config/{config,parallelism_config}.py), where make_ddp wraps every "
            "dp > 1 model and ZeRO-1 with the fp32 accumulator raises in its DDP hook"
        ),
        Framework.KEMPNERFORGE: (
            "KempnerInstitute/KempnerForge @ 5666d0d161539998210f99f16f986b1ab76cbffe: "
            "kempnerforge/config/{job,distributed,training}.py, "
            "kempnerforge/distributed/{parallel,pipeline_parallel,utils}.py, scripts/train.py; "
            "the memory recipe fitted to its published benchmarks (solver/catalog/NOTES.md §4)"
        ),
    }
)


@record(frozen=True)
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
    ddp_zero_below: int = 4  # ... at ZeRO stages below this one (where the model is DDP-wrapped)
    # tp > 1 with sequence parallelism: persistent bf16 buffers of one micro-batch's [tokens, h]
    # the tp layers gather into and keep across layers and steps (nanotron's MemoryBuffer)
    tp_gather_buffers: int = 0
    # bytes per stage-local parameter (tp/pp-sharded, never dp-sharded) of the compute-dtype .grad
    # alive at the end of each micro-batch's backward, beside the main gradients (nanotron): a
    # peak of its own, billed where it exceeds the forward side's (memory.py _backward_excess)
    backward_grads: int = 0
    unit_grad: int = 0  # ZeRO-3: a gathered unit's gradient per parameter (0: `gradients`)
    loss_chunked: bool = False  # the loss never holds the whole logits (memory.py)
    fp8_activations: bool = False  # FP8 linear inputs stored in FP8 (activations.py)
    fsdp: str = ""  # "FSDP1" or "FSDP2": the PyTorch FSDP the recipe's ZeRO-3 is
    loss_parallel_held: bool = False  # tp > 1: DTensor loss_parallel, held with the recompute
    cost_balanced_stages: bool = False  # pipeline stages split by layer cost (nanotron)
    # ZeRO shards over the data-parallel ranks inside a node, replicated across nodes (HSDP)
    hybrid_shard: bool = False
    compiled: bool = False  # the blocks run under torch.compile (activations.py)
    # full recomputation stops once the block's last saved tensor is rebuilt, so the dense MLP's
    # down projection (whose output no backward reads) is not replayed: PyTorch's non-reentrant
    # checkpoint since torch 2.1 (torch/utils/checkpoint.py _StopRecomputationError,
    # set_checkpoint_early_stop; timing.py)
    recompute_stops_early: bool = False
    gathered_weights: int = 0  # ZeRO-3: bytes per layer parameter gathered (0: `weights`)
    # last stage: bytes per token per h the final norm keeps for backward (on the sequence
    # shard), beside the output layer's whole input (memory.py); 0: not counted
    final_norm: int = 0
    # bytes per layer parameter (tp-local, never dp-sharded) of the FP8 weight each eager
    # torchao Float8Linear casts and saves for backward, once per micro-batch in flight (memory.py)
    fp8_saved_weights: int = 0
    # FP8 training converts the linears to torchao's Float8Linear, whose tensor parallelism
    # all-gathers in FP8 (costmodel/pointwise.py FLOAT8_TP_BYTES; rates.py tp_bytes)
    torchao_float8: bool = False


@record(frozen=True, kw_only=True)
class FrameworkTiming:
    """What a framework overlaps by default and whose kernels it runs (the time model reads it;
    a request's `training.*_comm_overlap` switch overrides an entry). Defaults are what the
    framework's own published performance recipes run, with the code default noted where it
    differs."""

    kernels: str  # kernel family: "TE" (fused, Transformer Engine) or "TORCH" (PyTorch-native)
    tp: bool = False  # tp collectives overlapped with the GEMMs
    # the tp overlap (when on, with sequence parallelism) is nanotron's: each all-gather hides
    # behind the GEMM of the rank's own shard, the forward reduce-scatter behind nothing
    # (costmodel/rates.py tp_shard_exposed), not the fitted share eps_tp of the whole
    tp_own_shard: bool = False
    dp_stages: frozenset[int]  # ZeRO stages whose dp/FSDP traffic is overlapped with compute
    cp: bool = False  # ring K/V exchange overlapped with the attention blocks
    ep: bool = False  # expert all-to-all overlapped with another micro-batch's compute
    pp: bool = False  # pipeline sends overlapped with compute (only their latency is exposed)
    source: str
    ep_dedup: bool = False  # tokens dispatched once per remote node (DeepEP), not per expert
    cp_ring: bool = True  # cp exchanges K,V hop by hop (each hop hides behind a block), else
    # all-gathers them after the first block (only that block hides the exchange)
    ep_overlap_needs_chunks: bool = False  # the ep overlap needs v > 1 when pp > 1 and refuses
    # full recomputation (else it is timed exposed there)
    dp_per_chunk: bool = False  # with virtual stages, each model chunk's dp traffic (ZeRO 0/1)
    # starts at its own last backward (and gathers before its first forward), behind the other
    # chunks' compute, instead of all of it at the step's end


@record(frozen=True, kw_only=True)
class Profile:
    """One framework: the layouts it can express, its memory recipe, its export. A capability
    the profile does not name is absent (False, 0): each profile states what its code can do."""

    framework: Framework
    title: str  # what the profile stands for, in words
    zero_stages: frozenset[int]  # ZeRO stages it runs with pp = 1 and a data-parallel group
    zero_stages_pipelined: frozenset[int]  # ... with pp > 1
    zero_names: Mapping[int, str]  # what each stage is called in the framework
    interleaving: bool = False  # virtual pipeline stages (v > 1)
    extra_chunks: int = (
        0  # pipeline chunks beyond the layers (embedding, loss as chunks of their own)
    )
    interleave_whole_rounds: bool = False  # v > 1 needs num_microbatches to be a multiple of pp
    context_parallel: bool = False  # cp > 1
    sequence_parallel_required: bool = False  # tp > 1 always shards the sequence
    moe_tp_needs_sp: bool = False  # MoE with tp > 1 needs sequence parallelism
    expert_tp_one: bool = (
        False  # experts may be unsplit (etp = 1) while tp > 1: ep spans the tp ranks
    )
    expert_parallel: bool = False  # ep > 1 expressible in the planner's layout (ep inside tp·cp·dp)
    fp8: bool = False  # has an FP8 training recipe
    fp8_with_tp: bool = False  # FP8 composes with tp > 1
    fp8_zero_min: int = 0  # least ZeRO stage its FP8 recipe needs over a data-parallel group
    moe_with_pp: bool = False  # MoE layers in a pipeline
    tied_with_pp: bool = False  # tied embeddings in a pipeline
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
