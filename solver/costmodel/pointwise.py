"""The memory-bound pointwise kernels of a layer, in bytes per token: the fused passes every
profile is charged, the unfused ones of eager PyTorch blocks (torchtitan), unfused attention's
passes over the scores; and what torchao's Float8 tensor parallelism moves. `Rates` (rates.py)
reads them."""

from __future__ import annotations

import numpy as np

from meshplan.solver.costmodel.context import Ctx
from meshplan.solver.costmodel.point import LayoutOrRows, pick
from meshplan.solver.schema import Framework

# Elementwise kernels of a layer, unfused, elements read + written per token: the two norms,
# the bias-dropout-residual adds and the MLP activation forward (~10·h + the activation's input
# and output), about twice that backward: 30·h + 3·(activation input + output).
ELEM_H = 30
ELEM_ACT = 3
# torchtitan's Llama blocks run eager unless compiled (training.compile, default off), and its
# pointwise code is unfused (pytorch/torchtitan @ 9dec370 models/norms.py RMSNorm:
# self._norm(x.float()).type_as(x) * self.weight; models/llama/model.py apply_rotary_emb: q and
# k .float() -> view_as_complex * freqs_cis -> view_as_real -> type_as, repeat_kv's expanded
# copies, output.transpose(1, 2).contiguous(), FeedForward F.silu(w1(x)) * w3(x), the two
# residual adds). Bytes read + written per token forward: each RMSNorm 36 per h (cast 2+4, pow
# 4+4, mean 4, scale 4+4, cast back 4+2, weight 2+2), each add 6 per h; RoPE 20 per q and k
# element (cast 2+4, complex product 4+4, cast back 4+2); SDPA's output copy 4 per q; SwiGLU 10
# per f (silu 2+2, product 4+2); repeated K,V (kv_repeated) 4 per q element and 4 per kv
# element. Backward autograd replays each op's reads and writes about twice: 3x the forward.
# torch.compile fuses them into the passes ELEM_H counts (Inductor pointwise fusion).
# KempnerForge's blocks are the same eager ops (KempnerInstitute/KempnerForge @ 01b461a, the
# scaling report's commit: model/norm.py RMSNorm in fp32, attention.py repeat_interleave and
# .transpose(1, 2).contiguous(), mlp.py SwiGLU) but for RoPE, real-valued in bf16
# (position.py apply_rope: four half-width products, a sub and an add, a cat: 18 bytes an
# element); it compiles the whole model unless train.compile_model=false (config/training.py).
EAGER_QK = {Framework.TORCHTITAN: 3 * 20, Framework.KEMPNERFORGE: 3 * 18}  # RoPE, per element
EAGER_FRAMEWORKS = frozenset(EAGER_QK)  # the frameworks whose eager blocks these bytes time
EAGER_H = 3 * (2 * 36 + 2 * 6)  # norms and residual adds, per h
EAGER_OUT = 3 * 4  # SDPA output made contiguous, per element of q
EAGER_REPEAT = 3 * 4  # repeat_kv's copies, per element of q and of k
EAGER_F = 3 * 10  # SwiGLU, per element of the dense MLP's width f
EAGER_F_UNGATED = 3 * 4  # one activation kernel (read 2, write 2), per element of f
# Unfused attention's passes over the a·s scores of a token: scale-mask-softmax and dropout
# forward (write the scores, read them, write the probabilities, the mask and the dropped),
# about as many backward.
UNFUSED_SCORE_PASSES = 10
# torchao's Float8 tensor parallelism (torchtitan @ 9dec370 parallelisms/parallelize_llama.py
# with Float8 linears: PrepareFloat8ModuleInput, Float8ColwiseParallel, Float8RowwiseParallel)
# casts a block's sequence-sharded input to FP8 before its all-gather, and the row-parallel
# output's gradient to FP8 before the backward all-gather (pytorch/ao @ 36027d8 torchao/float8/
# float8_tensor_parallel.py: hp_tensor_to_float8_dynamic before redistribute;
# NoopFwToFloat8BwDynamic); both reduce-scatters stay BF16: bytes per element, the mean of the
# four collectives of a block.
FLOAT8_TP_BYTES = (1 + 1 + 2 + 2) / 4


def eager_elementwise(
    c: Ctx, dense: float, lay: LayoutOrRows, moe_bytes: float
) -> np.ndarray | float:
    """Per token: the unfused pointwise ops of eager Llama blocks (EAGER_*: torchtitan's and
    KempnerForge's), with `dense` the share of dense MLP layers, and the experts' and router's
    (`moe_bytes`, as fused)."""
    A = c.A
    q, k = A.a * A.head_dim, A.kv * A.head_dim
    per_f = EAGER_F if A.gated else EAGER_F_UNGATED
    split = EAGER_QK[c.framework] * (q + k) + EAGER_OUT * q + per_f * dense * A.f
    if c.recipe.kv_repeated:
        split += EAGER_REPEAT * (q + k)
    split += moe_bytes
    return (EAGER_H * A.h / pick(lay.sp, lay.tp, 1) + split / lay.tp) / c.H.hbm_bw
