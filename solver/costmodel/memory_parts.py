"""Parts of the per-GPU memory bill beside the state and the layers' activations (memory.py):
a micro-batch's sequence shard, the logits the loss holds, the stage boundary's receive
buffers, tp's gather buffers, context parallelism's gathered K,V, and how nanotron places its
pipeline stages by cost."""

from __future__ import annotations

import functools
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from meshplan.solver.arch import Arch
from meshplan.solver.costmodel import activations
from meshplan.solver.costmodel.context import ACT_BYTES, Ctx, n_stage
from meshplan.solver.costmodel.point import LayoutOrRows, maximum, per_rows, pick

DTENSOR_HEAD = ("torchtitan", "kempnerforge")  # loss parallelism all-gathers the head's input


def seq_shard(c: Ctx, lay: LayoutOrRows) -> np.ndarray:
    """Tokens of a micro-batch's sequence on one GPU, s/cp (over rows computed once)."""
    return per_rows(seq_shard_of, c, lay)


def seq_shard_of(c: Ctx, lay: LayoutOrRows) -> np.ndarray:
    return c.s / lay.cp


def logits_held(c: Ctx, lay: LayoutOrRows) -> np.ndarray:
    A, rc = c.A, c.recipe
    vocab = A.V / (lay.tp if rc.vocab_parallel else 1)
    out = vocab * rc.logits
    if rc.loss_chunked:
        # Liger-Kernel @ ead96b6 ops/fused_linear_cross_entropy.py: chunks of next_power_of_2(
        # BT / ceil(V/h)) tokens hold their bf16 logits (gradient in place), under 2·h of them
        # a token, and grad_input = zeros_like(input) keeps h bf16 elements a token
        out = ACT_BYTES * (2.0 * vocab / -(-A.V // A.h) + A.h)
    if rc.final_norm:
        # what the final norm keeps (on the sequence shard) and the output layer's input, whole
        # on every tp rank (DTensor gathers it)
        out = out + rc.final_norm * A.h / activations.sp_shard(lay) + ACT_BYTES * A.h
    elif rc.activations in DTENSOR_HEAD:
        # the output layer's input, gathered whole on every tp rank
        out = pick(lay.tp > 1, out + ACT_BYTES * A.h, out)
    return seq_shard(c, lay) * out


@functools.lru_cache(maxsize=1024)
def cost_balanced_split(L: int, layer: int, head: int, pp: int) -> tuple[int, ...]:
    """Decoder layers per pipeline rank when blocks are placed by cumulative cost (nanotron @
    e24d248 models/base.py build_model, costs of models/llama.py get_block_compute_costs: a layer
    4·a·d·h + 3·f·h, the output layer V·h, the embedding 0): a block goes to the current rank,
    which is closed once the running cost passes its share (rank + 1)/pp of the total."""
    total = L * layer + head
    out, rank, cum = [0] * pp, 0, 0
    for i in range(L + 1):  # the layers, then the output layer
        cum += layer if i < L else head
        if i < L:
            out[rank] += 1
        if cum > total * (rank + 1) / pp and rank < pp - 1:
            rank += 1
    return tuple(out)


def stage_boundary(c: Ctx, lay: LayoutOrRows) -> np.ndarray:
    # the stage boundary, split over tp by sequence parallelism and over cp
    return pick(lay.pp > 1, seq_shard(c, lay) * ACT_BYTES * c.A.h / lay.tp, 0.0)


def gather_buffers(c: Ctx, lay: LayoutOrRows) -> np.ndarray:
    """The tp layers' persistent gather buffers (`Recipe.tp_gather_buffers`), each a micro-batch
    sequence's [tokens, h] in bf16, with tp > 1 and sequence parallelism (nanotron @ e24d248
    parallel/utils.py MemoryBuffer: kept at the largest size asked)."""
    on = (lay.tp > 1) & lay.sp
    return pick(on, c.recipe.tp_gather_buffers * seq_shard(c, lay) * ACT_BYTES * c.A.h, 0.0)


def kv_gathered(c: Ctx, lay: LayoutOrRows) -> np.ndarray:
    """Context parallelism by all-gather: the attention of a layer (forward, and again in its
    backward) holds the K,V of the whole sequence, the cp shards gathered into one buffer
    (pytorch @ 0123248 torch/distributed/tensor/experimental/_attention.py _AllGatherRotater;
    torchtitan @ 9dec370 config_manager.py context_parallel_rotate_method 'allgather')."""
    A = c.A
    # multi-head latent attention up-projects K and V to every query head, K at qk_nope +
    # qk_rope a head and V at v_head_dim (torchtitan @ b5bcd76 models/deepseek_v3/model.py
    # Attention.forward: k = cat(k_nope, k_pe.expand), v split off wkv_b's output)
    heads = A.a if (c.recipe.kv_repeated or A.mla) else A.kv
    width = A.qk_dim + A.v_dim  # K and V of one head: 2·head_dim without MLA
    per_rank = maximum(heads * width / lay.tp, width)  # kv heads < tp: replicated
    return pick(lay.cp > 1, c.s * per_rank * ACT_BYTES, 0.0)


def stage_layers(c: Ctx, stage: str) -> Callable[[tuple[int, int]], Fraction]:
    """Layers on the stage per (pp, v): the heaviest stage's, or where the recipe balances the
    stages by cost (`Recipe.cost_balanced_stages`), the first or last stage's own."""
    A = c.A
    if not c.recipe.cost_balanced_stages:
        return lambda pv: n_stage(A.L, pv[0], pv[1])
    end = 0 if stage == "first" else -1
    return lambda pv: Fraction(cost_balanced_layers(A, pv[0])[end])


def cost_balanced_layers(A: Arch, pp: int) -> tuple[int, ...]:
    """Decoder layers per pipeline rank of this model, placed by cost (`cost_balanced_split`
    with nanotron's block costs: a layer 4·a·d·h + 3·f·h, the output layer V·h)."""
    return cost_balanced_split(A.L, 4 * A.a * A.head_dim * A.h + 3 * A.f * A.h, A.V * A.h, pp)


def rows_layers(c: Ctx, lay: LayoutOrRows, stage: str) -> np.ndarray | float:
    """The stage's layers (`stage_layers`) at each row's pp, without interleaving (v = 1)."""
    f = stage_layers(c, stage)
    if not isinstance(lay.pp, np.ndarray):
        return float(f((int(lay.pp), 1)))
    pps, at = np.unique(lay.pp, return_inverse=True)
    return np.array([float(f((int(p), 1))) for p in pps])[at]
