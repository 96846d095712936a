"""Stored activations per token per layer on one GPU (bytes), in the form of the request's
framework profile (`Recipe.activations`).

- "flat_12h" (the textbook profile): 12·h elements of 2 bytes per token per layer ("Why one GPU
  is not enough", DeepSeek-V3 book, ch. 11: 12·L·B·S·d·b_a), shared out over tp, sequence
  parallelism and MoE/dense layers in the proportions of Korthikanti et al. 2022 eq. 1.
- "korthikanti": Korthikanti et al. 2022 eq. 1 generalised to GQA and gated MLPs (34·h bytes for
  a GPT layer; kept for the comparison benchmarks/fidelity.py prints).
- "megatron", "torchtitan", "kempnerforge", "nanotron": the tensors a layer keeps for its backward with
  fused attention, no dropout and RMSNorm (FlashAttention keeps q, k, v, its output and per-row
  statistics, Dao et al. 2022): the two norm inputs (2·2h), the two norm outputs feeding the
  column-parallel linears (2·2h), q and the attention output (2·2·a·d), k and v (2·2·kv·d) and
  the MLP's intermediates (4f; gated, 8f in eager PyTorch: gate, up, silu(gate) and the product,
  6f with Megatron's fused SwiGLU). Megatron's sequence
  parallelism keeps only its sequence shard of the norm outputs and gathers it again in backward
  (Korthikanti §4.2.2), so every tensor is split over tp; DTensor TP (torchtitan, KempnerForge)
  saves the all-gathered input of each column-parallel matmul, whole on every tp rank;
  nanotron's reduce_scatter tp mode keeps the shard and gathers it again in backward
  (nanotron @ e24d248 tp_recompute_allgather), with eager PyTorch's 8f gated MLP.

Without fused attention the scores add 5·a·s bytes per token (Korthikanti eq. 2: softmax, its
dropout mask and output). Selective recomputation: Megatron recomputes the core attention, which
keeps nothing else once attention is fused, and the routed experts' activation functions
(--recompute-modules core_attn moe_act; transformer_config.py); torchtitan's op-level policy keeps the block input,
every other matmul output (q, v, w1, w2) and the attention output (torchtitan
distributed/activation_checkpoint.py: _save_list, "every second mm" recomputed); KempnerForge
checkpoints the attention module (kempnerforge/distributed/parallel.py apply_ac). Full
recomputation keeps the layer input (2·h, a sequence shard with sequence parallelism).
"""

from __future__ import annotations

import numpy as np

from meshplan.solver.arch import Arch
from meshplan.solver.costmodel.context import ACT_BYTES, Ctx
from meshplan.solver.costmodel.point import LayoutOrRows, maximum, per_rows, pick
from meshplan.solver.schema import Recompute

# activation elements per token per layer, in units of h: "Why one GPU is not enough" (ch. 11)
FLAT_ELEMENTS = 12  # activation elements per token per layer, in h ("Why one GPU is not enough")
TEXTBOOK = ("flat_12h", "korthikanti")
COMPILABLE = ("torchtitan", "kempnerforge")  # eager PyTorch layers `Recipe.compiled` applies to


def per_token(c: Ctx, lay: LayoutOrRows, r: Recompute, eager: bool = False) -> np.ndarray:
    """Activation bytes per token per layer on one GPU: the mean over layers with pp = 1, the
    heavier of a dense and an MoE layer otherwise (a stage may hold either). Over rows,
    computed once per recomputation. eager: as if the blocks were not compiled."""
    return per_rows(_per_token, c, lay, r, eager)


def _per_token(c: Ctx, lay: LayoutOrRows, r: Recompute, eager: bool = False) -> np.ndarray:
    A = c.A
    if r is Recompute.FULL:
        return 2.0 * A.h / sp_shard(lay)  # the layer input checkpoint only
    dense = _layer(c, lay, r, A.f, 0, eager)
    if not A.is_moe:
        return dense
    moe = _layer(c, lay, r, A.fe * (A.top_k + A.shared), A.top_k, eager)
    mean = (A.n_dense_layers * dense + A.n_moe_layers * moe) / A.L
    return pick(lay.pp == 1, mean, maximum(dense, moe))


def block(c: Ctx, lay: LayoutOrRows) -> np.ndarray:
    """What the one block being recomputed under full recomputation holds, per token: all its
    activations (the textbook forms: their selective-recompute total, as calibrated), as eager
    PyTorch holds them, compiled or not: the compiled backward's recompute buffers are
    Inductor's, not read here, and with the smaller compiled set torchtitan's compiled 405B
    1F1B run (full recomputation) comes out 3.7% under its print."""
    textbook = c.recipe.activations in TEXTBOOK
    return per_token(c, lay, Recompute.SELECTIVE if textbook else Recompute.NONE, True)


def _layer(
    c: Ctx, lay: LayoutOrRows, r: Recompute, width: int, routed: int, eager: bool = False
) -> np.ndarray:
    """One layer whose MLP has `width` intermediate channels per token (all experts a token
    visits) and dispatches `routed` copies of each token (MoE); eager: not compiled."""
    form = c.recipe.activations
    if form in TEXTBOOK:
        return _textbook(c, lay, r, width, routed)
    A, T = c.A, lay.tp
    h, aw = A.h, A.attn_width
    attn, sac_attn, out_w, latent = _attention(A)
    # gated MLP: Megatron's fused fc1 [gate | up] and SwiGLU keep fc1's output and fc2's input
    # (6f; megatron/core/fusions/fused_bias_swiglu.py), eager PyTorch also silu(gate) (8f)
    gate = (6 if form == "megatron" else 8) if A.gated else 4  # nanotron: GLUActivation eager
    compiled = c.recipe.compiled and form in COMPILABLE and not eager
    if compiled:
        # torch.compile: AOTAutograd's min-cut partitioner saves what the backward reads and
        # recomputes pointwise ops (pytorch torch/_functorch/partitioners.py
        # min_cut_rematerialization_partition): the MLP keeps its matmuls' outputs (gate and
        # up, or fc1) and recomputes silu(gate)·up (or gelu) for the down projection
        gate = 4 if A.gated else 2
    mlp = gate * width + ACT_BYTES * routed * h
    scores = 5.0 * A.a * c.s if (r is Recompute.NONE and not c.fused_attention) else 0.0
    if r is Recompute.SELECTIVE and form == "torchtitan":
        # op-level SAC: block input and w2 output (sequence shards), q, v, attention output, w1.
        # Compiled, the w2 output is not kept: eager SAC caches every MUST_SAVE output in the
        # forward (pytorch torch/utils/checkpoint.py _CachingTorchDispatchMode), the compiled
        # graph saves only what its backward reads, and no backward reads the block's last mm
        # output (torchtitan @ 9dec370 parallelize_llama.py _save_list: every other mm)
        kept = 2.0 if compiled else 4.0
        return (kept * h + latent) / sp_shard(lay) + (sac_attn + 2.0 * width) / T
    if r is Recompute.SELECTIVE and form == "kempnerforge":
        # the attention module is checkpointed: its input, the MLP's gathered input and its own
        return (4.0 * h + 2.0 * h) / sp_shard(lay) + 2.0 * h + mlp / T
    split = attn + mlp + scores
    norm_out = 4.0 * h  # the two norm outputs, the column-parallel linears' inputs
    if c.recipe.fp8_activations:
        # Transformer Engine saves each linear's input as FP8, 1 byte an element (NVIDIA/
        # TransformerEngine @ d0067d0 module/layernorm_linear.py ln_out, module/linear.py
        # saved_inputmat): the norm outputs and fc2's input halve, the experts' dispatched
        # tokens too; the attention output is saved again as proj's FP8 input
        norm_out /= 2
        split += out_w - width - routed * h
    if form == "megatron":
        if r is Recompute.SELECTIVE and routed:
            split -= 2.0 * A.fe * routed  # moe_act: the routed experts' activation outputs
        return (4.0 * h + norm_out + latent) / sp_shard(lay) + split / T
    if form == "nanotron":
        if A.kv == A.a and latent == 0.0:
            # multi-head attention: q, k, v are views of one contiguous [3, b, s, heads, d] copy
            # of the qkv projection, kept whole while flash attention holds q, beside the K,V it
            # concatenates anew (nanotron @ e24d248 models/llama.py CausalSelfAttention.forward)
            split += 4.0 * aw
        return (4.0 * h + norm_out + latent) / sp_shard(lay) + split / T  # re-gathered shards
    if compiled:
        # the norms' outputs are recomputed from their inputs, unless tp > 1 all-gathers them
        # (DTensor's collective, which the partitioner does not recompute)
        norm_out = pick(lay.tp > 1, norm_out, 0.0)
    return (4.0 * h + latent) / sp_shard(lay) + norm_out + split / T  # gathered inputs: whole


def _attention(A: Arch) -> tuple[float, float, float, float]:
    """Bytes per token the attention keeps: (query, key, value and output, split over tp; the
    query, value and output op-level SAC keeps; the output's width in elements; the latents,
    on the sequence shard). Multi-head latent attention (`Arch.mla`) keeps its compressed
    query and key/value latents, each normalised (the norm's input and output: q_compressed,
    kv_combined with the decoupled rotary key, kv_compressed), and for the core attention the
    up-projected query and key (qk_nope + qk_rope per head, the rotary key expanded to every
    head) and value (NVIDIA/Megatron-LM @ d98e8a6 megatron/core/transformer/
    multi_latent_attention.py get_query_key_value_tensors, qkv_up_proj_and_rope_apply)."""
    mla = A.mla
    if mla is None:
        aw, kvw = A.attn_width, A.kv * A.head_dim
        return 4.0 * aw + 4.0 * kvw, 4.0 * aw + 2.0 * kvw, float(aw), 0.0
    qk = A.a * mla.qk
    vw = A.a * mla.v
    latent = ACT_BYTES * (2 * mla.q_rank + (mla.kv_rank + mla.rope) + mla.kv_rank)
    return 4.0 * qk + 4.0 * vw, 2.0 * qk + 4.0 * vw, float(vw), float(latent)


def sp_shard(lay: LayoutOrRows) -> np.ndarray:
    """Divisor of the tensors sequence parallelism shards."""
    return pick(lay.sp, lay.tp, 1)


def _textbook(c: Ctx, lay: LayoutOrRows, r: Recompute, width: int, routed: int) -> np.ndarray:
    """The flat 12·h total (or Korthikanti's) with Korthikanti's split over tp."""
    A, T = c.A, lay.tp
    unfused = r is Recompute.NONE and not c.fused_attention
    score = 5.0 * A.a * c.s if unfused else 0.0  # Korthikanti eq. 2
    nonpar = 10.0 * A.h  # layer-norm inputs, dropout masks: replicated across tp without sp
    gate = 8 if A.gated else 4

    def korthikanti(mlp: float) -> float:  # eq. 1 generalised to GQA and gated MLPs
        return nonpar + (4.0 + 4.0 * A.kv / A.a) * A.h + mlp

    scale = 1.0
    if c.recipe.activations == "flat_12h":
        # "Why one GPU is not enough" (DeepSeek-V3 book, ch. 11): 12·h elements of 2 bytes per
        # token for the model's dense block; Korthikanti's terms only share it out (tp split,
        # MoE/dense ratio)
        scale = FLAT_ELEMENTS * ACT_BYTES * A.h / korthikanti(gate * A.f)
    mlp = gate * width + (2.0 * routed * A.h if routed else 0.0)
    par = scale * (korthikanti(mlp) - nonpar) + score
    return pick(lay.sp, (scale * nonpar + par) / T, scale * nonpar + par / T)
