"""The memory recipe's knobs (solver/schema.py TrainingSpec): the bytes each setting keeps, and a
profile's recipe with a request's knobs applied (`with_knobs`; solver/profiles/ holds each
profile's defaults)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any, TypeVar

from meshplan.solver.schema import (
    ActivationForm,
    FsdpVersion,
    LossKernel,
    Precision,
    StateDtype,
    TrainingSpec,
)

R = TypeVar("R", bound=Any)  # solver/profiles/ Recipe (imported there: no import cycle)

# Bytes per logit element each loss kernel holds at its peak:
# - EAGER_FP32: F.cross_entropy(pred.float()) keeps the bf16 logits, their fp32 copy and
#   log-softmax, then fp32 gradients (torchtitan @ e347b1e components/loss.py);
# - INPLACE_FP32: the vocab-parallel loss upcasts to an fp32 softmax it keeps for backward and
#   turns into the gradient in place, beside the bf16 logits (Megatron-LM @ d98e8a6
#   core/tensor_parallel/cross_entropy.py: the max subtracted in place);
# - FUSED_BF16: flash-attn's Triton cross-entropy saves the bf16 logits and writes a bf16
#   gradient (Dao-AILab/flash-attention @ 0251105 flash_attn/ops/triton/cross_entropy.py:
#   save_for_backward(logits, lse, labels), dlogits = empty_like(logits)), llm-foundry's default
#   loss_fn fused_crossentropy (llm-foundry @ 8c8dd48 llmfoundry/models/mpt/modeling_mpt.py);
# - CHUNKED: no whole logits (memory.py: Liger-Kernel's chunks);
# - COMPILED: torchtitan compiles its F.cross_entropy(pred.float()) with the model (torchtitan @
#   e7c0cae components/loss.py build_cross_entropy_loss: torch.compile(loss_fn) under
#   training.compile): Inductor fuses the fp32 cast into the log-softmax reductions and the
#   min-cut partitioner saves the bf16 input, not an fp32 [tokens, V] intermediate (pytorch
#   torch/_functorch/partitioners.py min_cut_rematerialization_partition), so the logits and
#   their bf16 gradient remain, as a fused kernel's;
# - COPY_FP32: nanotron subtracts the row max out of place (sharded_logits - logits_max) while
#   the fp32 logits from cast_to_fp32 are alive, then exponentiates that copy in place and keeps
#   it as the softmax: two fp32 copies at the forward's peak, the bf16 logits freed once
#   cast_to_fp32 returns (nanotron @ e24d248 parallel/tensor_parallel/functional.py
#   _ShardedCrossEntropy.forward, models/llama.py forward_with_hidden_states).
LOSS_BYTES: Mapping[LossKernel, int] = MappingProxyType(
    {
        LossKernel.EAGER_FP32: 12,
        LossKernel.COPY_FP32: 8,
        LossKernel.INPLACE_FP32: 6,
        LossKernel.FUSED_BF16: 4,
        LossKernel.COMPILED: 4,
        LossKernel.CHUNKED: 4,  # each chunk's bf16 logits, its gradient in place
    }
)

FORMS: Mapping[ActivationForm, str] = MappingProxyType({f: f.value.lower() for f in ActivationForm})
FSDP1_UNIT_TRANSIENT = 0  # FSDP1 reduce-scatters a unit's flat gradient where it lies
FSDP2_UNIT_TRANSIENT = 2  # FSDP2's bf16 gradients beside the fp32 reduce input (TORCHTITAN)


def with_knobs(r: R, t: TrainingSpec) -> R:
    """A recipe with the request's memory knobs in place of the profile's defaults (each knob's
    bytes: LOSS_BYTES, the dtypes' sizes, the FSDP unit transients). A knob the recipe has no
    part for (fsdp_version without FSDP, as the explanation's textbook comparison asks) is
    ignored."""
    up: dict[str, object] = {}
    if t.loss_kernel is not None:
        up["logits"] = LOSS_BYTES[t.loss_kernel]
        up["loss_chunked"] = t.loss_kernel is LossKernel.CHUNKED
    if t.grad_dtype is not None:
        size = 4 if t.grad_dtype is StateDtype.FP32 else 2
        if r.accumulation:  # gradients kept unsharded across micro-batches (KempnerForge)
            up["accumulation"] = size
        else:
            up["gradients"] = size
        if r.ddp_grads and size == 2:
            # no fp32 accumulator: DDP wraps the model at every ZeRO stage (nanotron @ e24d248
            # trainer.py make_ddp)
            up["ddp_zero_below"] = 4

    if t.master_dtype is not None:
        # a bf16 master is the bf16 parameter updated in place; with FSDP's sharded master the
        # sharded parameter itself is bf16
        bf16 = 2 if r.sharded_master_only else 0
        size = 4 if t.master_dtype is StateDtype.FP32 else bf16
        up["optimizer"] = r.optimizer - r.master + size
        up["master"] = size
    if t.fsdp_version is not None and r.fsdp:  # TrainingSpec refuses it for other profiles
        one = t.fsdp_version is FsdpVersion.FSDP1
        up["fsdp"] = t.fsdp_version.value
        up["unit_grad"] = r.weights if one else 0
        up["gather_transient"] = FSDP1_UNIT_TRANSIENT if one else FSDP2_UNIT_TRANSIENT
    if t.hybrid_shard:  # TrainingSpec refuses it for profiles that cannot shard in a node
        up["hybrid_shard"] = True
    if t.activation_form is not None:
        up["activations"] = FORMS[t.activation_form]
    if t.compiled is not None:
        up["compiled"] = t.compiled
    if t.fp8_all_gather and up.get("fsdp", r.fsdp) == "FSDP2" and t.precision is Precision.FP8:
        # torchao's enable_fsdp_float8_all_gather: fsdp_pre_all_gather casts each Float8Linear
        # weight's shard to float8, so the unit FSDP2 gathers (and the one it prefetches) holds
        # 1 byte a layer parameter (pytorch/ao torchao/float8/fsdp_utils.py
        # WeightWithDynamicFloat8CastTensor; torchtitan docs/float8.md)
        up["gathered_weights"] = 1
    if t.fp8_activations is not None:
        up["fp8_activations"] = t.fp8_activations and t.precision is Precision.FP8
    return replace(r, **up) if up else r
