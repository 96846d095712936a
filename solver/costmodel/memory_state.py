"""The per-parameter state a GPU holds (memory.py's building blocks, also read by the dp timing):
one layer's parameters on the heaviest stage, the stage's extras (embedding, output layer), their
bytes at a tenant's dtype, ZeRO's sharding group (with hybrid sharding) and the experts' shard.
All over layout rows, each computed once (`per_rows`)."""

from __future__ import annotations

import numpy as np

from meshplan.solver.costmodel.context import Ctx
from meshplan.solver.costmodel.point import LayoutOrRows, dp_cp, per_rows, pick, tp_dp_cp


def _layer_params(c: Ctx, lay: LayoutOrRows) -> tuple[np.ndarray, np.ndarray]:
    """(tp-sharded, expert) parameters of one layer on the heaviest stage: mean if pp=1 (over
    rows, computed once: a dozen terms read it)."""
    return per_rows(_layer_params_of, c, lay)


def _layer_params_of(c: Ctx, lay: LayoutOrRows) -> tuple[np.ndarray, np.ndarray]:
    A = c.A
    dense = A.n_dense_layers * A.dense_layer_params + A.n_moe_layers * A.moe_layer_dense_params
    mean = (dense / A.L, A.n_moe_layers * A.moe_layer_expert_params / A.L)
    if not A.is_moe:
        heaviest = (float(A.dense_layer_params), 0.0)
    else:
        heaviest = (
            float(max(A.dense_layer_params, A.moe_layer_dense_params)),
            float(A.moe_layer_expert_params),
        )
    one = lay.pp == 1
    return pick(one, mean[0], heaviest[0]), pick(one, mean[1], heaviest[1])


def _extras(c: Ctx, lay: LayoutOrRows, stage: str) -> np.ndarray:
    """Embedding (first stage) and output layer + final norm (last stage), parameters per GPU
    (over rows, computed once per stage).

    The output layer is column-parallel over tp; the embedding is vocab-parallel unless the
    recipe replicates it (KempnerForge)."""
    return per_rows(_extras_of, c, lay, stage)


def _extras_of(c: Ctx, lay: LayoutOrRows, stage: str) -> np.ndarray:
    A = c.A
    # DualPipeV folds the pipeline into a V: rank 0 holds the first stage and the last, the
    # embedding and the output layer (deepseek-ai/DualPipe @ 3da1bbe dualpipe/dualpipev.py)
    one = (lay.pp == 1) | _dualpipe(c)
    embed = A.embed_params / (lay.tp if c.recipe.vocab_parallel else 1)
    head = pick(A.tied & one, A.h, A.V * A.h + A.h) / lay.tp
    return pick(one, embed + head, embed if stage == "first" else head)


def _dualpipe(c: Ctx) -> bool:
    """The request runs DualPipeV (training.pipeline_schedule)."""
    return c.overlaps is not None and c.overlaps.dualpipe


def _dense_tp(c: Ctx, lay: LayoutOrRows) -> np.ndarray:
    """Dense parameters of one layer of the heaviest stage on one GPU."""
    return _layer_params(c, lay)[0] / lay.tp


def _bytes(c: Ctx, lay: LayoutOrRows, part: str, nb: float) -> np.ndarray:
    """nb bytes per parameter of one GPU's share of `part`: "dense", one layer's tp-sharded
    parameters; "expert", all of one layer's experts; "first" or "last", that stage's extras
    (over rows computed once: tenants and terms of equal bytes, and both stages, share it)."""
    return per_rows(_bytes_of, c, lay, part, nb)


def _bytes_of(c: Ctx, lay: LayoutOrRows, part: str, nb: float) -> np.ndarray:
    if part == "dense":
        x = per_rows(_dense_tp, c, lay)
    elif part == "expert":
        x = _layer_params(c, lay)[1]
    else:
        x = _extras(c, lay, part)
    return x * nb


def _state(c: Ctx, lay: LayoutOrRows, part: str, nb: float, keep: float, sh: bool) -> np.ndarray:
    """`_bytes` of a tenant's state, ZeRO-sharded to keep/(dp·cp) of it when sh (unsharded: the
    bytes as they are, x·1 being x). Over rows computed once, for both stages."""
    return per_rows(_state_of, c, lay, part, nb, keep, sh)


def _state_of(c: Ctx, lay: LayoutOrRows, part: str, nb: float, keep: float, sh: bool) -> np.ndarray:
    x = _bytes(c, lay, part, nb)
    return x * (keep / shard_group(c, lay)) if sh else x


def shard_group(c: Ctx, lay: LayoutOrRows) -> np.ndarray:
    """The ranks ZeRO shards a state over: dp·cp, or with hybrid sharding (`Recipe.hybrid_shard`)
    those of them inside one node, gcd(dp·cp, GPUs per node / tp), the rest holding replicas
    (tp innermost, then cp and dp: pytorch torch/distributed/fsdp/_init_utils.py
    _init_intra_and_inter_node_groups for FSDP1 HYBRID_SHARD; torchtitan @ e347b1e
    distributed/parallel_dims.py, dp_replicate outside dp_shard·cp·tp). Over rows, computed once."""
    return per_rows(_shard_group, c, lay)


def _shard_group(c: Ctx, lay: LayoutOrRows) -> np.ndarray:
    g = dp_cp(lay)
    if not c.recipe.hybrid_shard:
        return g
    return np.gcd(g, np.maximum(1, c.H.gpn // lay.tp))


def expert_shard(c: Ctx, lay: LayoutOrRows) -> np.ndarray:
    """One layer's expert parameters over tp·dp·cp: a GPU's sharded expert state (Megatron-Core
    MoE parallel folding; over rows computed once: memory and the optimizer step read it)."""
    return per_rows(_expert_shard, c, lay)


def _expert_shard(c: Ctx, lay: LayoutOrRows) -> np.ndarray:
    if c.recipe.hybrid_shard:  # the expert group's shards stay inside the node too
        return _layer_params(c, lay)[1] / (lay.tp * shard_group(c, lay))
    return _layer_params(c, lay)[1] / tp_dp_cp(lay)


def _exp_sharded(c: Ctx, lay: LayoutOrRows, nb: float, keep: float) -> np.ndarray:
    return expert_shard(c, lay) * nb * keep


def _held_if(c: Ctx, lay: LayoutOrRows, part: str, nb: float, pp_only: bool) -> np.ndarray:
    """`_bytes`, only where pp > 1 if pp_only (over rows computed once, for both stages)."""
    held = _bytes(c, lay, part, nb)
    return pick(lay.pp > 1, held, 0.0) if pp_only else held
