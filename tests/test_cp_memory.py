"""Context parallelism's K,V buffers in memory (solver/costmodel/memory_parts.py kv_gathered): a
framework that all-gathers the K,V shards (torchtitan, PyTorch's _AllGatherRotater) holds the
whole sequence's K,V while a layer's attention runs; a ring (Megatron's p2p) holds hops only."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from meshplan.solver.arch import resolve_model
from meshplan.solver.costmodel import CostModel, Point
from meshplan.solver.costmodel.context import recipe_for
from meshplan.solver.costmodel.memory_parts import kv_gathered
from meshplan.solver.hardware import resolve_cluster
from meshplan.solver.schema import (
    ClusterSpec,
    Framework,
    ModelSpec,
    ParallelConfig,
    SearchSpec,
    TrainingSpec,
)

SEQ = 8 * 32768
A = resolve_model(ModelSpec(preset="llama3-70b"))
H = resolve_cluster(ClusterSpec(gpu="h100-sxm-80gb", num_gpus=64))


def _activations(framework: Framework, cp: int, repeated: bool = False) -> float:
    t = TrainingSpec(seq_len=SEQ, framework=framework)
    rec = replace(recipe_for(framework, t.precision), kv_repeated=repeated)
    cm = CostModel(A, H, t, SearchSpec(), recipe=rec)
    cfg = ParallelConfig(tp=8, pp=1, dp=8 // cp, cp=cp, micro_batch_size=1, num_microbatches=1)
    cfg = cfg.model_copy(update={"zero_stage": 3, "recompute": "FULL", "sequence_parallel": True})
    return cm.memory_bill(Point.from_config(cfg)).activations


@pytest.mark.parametrize("repeated", [False, True])
def test_all_gather_holds_the_whole_sequences_kv(repeated: bool) -> None:
    heads = A.a if repeated else A.kv
    whole = SEQ * 2 * (heads * A.head_dim / 8) * 2  # K and V, bf16, a tp rank's heads
    # cp 8 holds an eighth of cp 1's activations (cp 1 gathers nothing), and the whole K,V
    one, eight = (_activations(Framework.TORCHTITAN, c, repeated) for c in (1, 8))
    assert eight == pytest.approx(one / 8 + whole)


def test_a_ring_holds_no_gathered_kv() -> None:
    one, eight = (_activations(Framework.MEGATRON, c) for c in (1, 8))
    assert eight == pytest.approx(one / 8)


def test_latent_attention_gathers_its_up_projected_widths() -> None:
    """MLA up-projects K to qk_nope + qk_rope and V to v_head_dim on every query head (torchtitan
    @ b5bcd76 models/deepseek_v3/model.py): the gathered buffer is those widths, not 2·h/a."""
    mla = resolve_model(ModelSpec(preset="deepseek-v3"))
    assert mla.mla is not None and mla.qk_dim + mla.v_dim != 2 * mla.head_dim
    t = TrainingSpec(seq_len=32768, framework=Framework.TORCHTITAN)
    cm = CostModel(mla, H, t, SearchSpec())
    tp = 8
    want = t.seq_len * (mla.a / tp) * (mla.qk_dim + mla.v_dim) * 2  # K and V, bf16
    assert kv_gathered(cm.ctx, SimpleNamespace(cp=8, tp=tp)) == pytest.approx(want)
    assert kv_gathered(cm.ctx, SimpleNamespace(cp=1, tp=tp)) == 0.0
