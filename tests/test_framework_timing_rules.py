"""Framework timing rules read from the frameworks' code: nanotron's async tp linears,
KempnerForge's eager (uncompiled) blocks, PyTorch's early-stopping checkpoint."""

from __future__ import annotations

from dataclasses import replace

from meshplan.solver.arch import resolve_model
from meshplan.solver.costmodel import CostModel, Layout, Point
from meshplan.solver.costmodel.context import recipe_of
from meshplan.solver.costmodel.rates import Rates
from meshplan.solver.hardware import resolve_cluster
from meshplan.solver.schema import (
    ClusterSpec,
    Framework,
    ModelSpec,
    ParallelConfig,
    Recompute,
    SearchSpec,
    TrainingSpec,
)
from meshplan.tools.calibration.fsdp import load_fsdp
from meshplan.tools.calibration.loaders import load_kempnerforge

LLAMA8 = ModelSpec(preset="llama3-8b")


def rates(training: TrainingSpec) -> Rates:
    A = resolve_model(LLAMA8)
    H = resolve_cluster(ClusterSpec(gpu="h100-sxm-80gb", num_gpus=64))
    return CostModel(A, H, training, SearchSpec()).rates


def lay(tp: int, sp: bool = True) -> Layout:
    return Layout(tp, 1, 1, 64 // tp, 64, sp)


def test_nanotron_async_tp_hides_only_what_its_own_shard_gemm_covers() -> None:
    """nanotron @ e24d248 functional.py: with tp_linear_async_communication the forward
    reduce-scatter stays exposed and each all-gather hides behind 1/tp of its GEMM."""
    t = TrainingSpec(seq_len=4096, framework=Framework.NANOTRON)
    off = rates(t)
    on = rates(t.model_copy(update={"tp_comm_overlap": True}))
    for tp in (2, 4, 8):
        raw = off.tp(lay(tp))
        assert raw == off.tp_raw(lay(tp))  # the default: nothing overlapped
        exposed = on.tp(lay(tp))
        # at least the forward reduce-scatter of each block (1 of its 4 collectives)
        assert raw / 4 - 1e-15 <= exposed < raw
        # the generic overlap (the fitted share eps_tp of what the GEMMs cannot hide) is not
        # nanotron's: the own-shard rule differs from it
        assert exposed != max(on.c.K.eps_tp * raw, raw - on.gemm(lay(tp)))
    # all_reduce mode (no sequence parallelism) runs no async tp: exposed as it is
    assert on.tp(lay(4, sp=False)) == on.tp_raw(lay(4, sp=False))


def test_nanotron_async_tp_exposes_more_where_the_shard_gemm_is_short() -> None:
    """A wider tp group shortens each rank's own-shard GEMM (1/tp² of the layer's) while
    the collective grows, so the exposed share of the raw time rises with tp."""
    on = rates(TrainingSpec(seq_len=4096, framework=Framework.NANOTRON, tp_comm_overlap=True))
    share = [on.tp(lay(tp)) / on.tp_raw(lay(tp)) for tp in (2, 4, 8)]
    assert share == sorted(share)


def test_kempnerforge_compiles_by_default_and_its_eager_run_pays_the_pointwise_ops() -> None:
    """KempnerForge @ 5666d0d config/training.py compile_model: bool = True; the scaling
    report's run 08 ran with compile_model=false."""
    t = TrainingSpec(seq_len=4096, framework=Framework.KEMPNERFORGE)
    compiled, eager = rates(t), rates(t.model_copy(update={"compiled": False}))
    assert compiled.c.recipe.compiled and not compiled.eager and eager.eager
    assert eager.elementwise(lay(1)) > 2 * compiled.elementwise(lay(1))
    runs = {r.id: r for r in load_kempnerforge()}
    assert [i for i, r in runs.items() if not r.training.compiled] == [
        "kempnerforge_13b_fsdp8_8gpu"
    ]


def _recompute_seconds(framework: Framework, recompute: Recompute, early: bool) -> float:
    """Per-token recompute time of llama3-8b on 64 H100 at tp 2, with the recipe's early stop
    set as asked."""
    t = TrainingSpec(seq_len=4096, global_batch_tokens=64 * 4096, framework=framework)
    A = resolve_model(LLAMA8)
    H = resolve_cluster(ClusterSpec(gpu="h100-sxm-80gb", num_gpus=64))
    rec = replace(recipe_of(t), recompute_stops_early=early)
    cm = CostModel(A, H, t, SearchSpec(), recipe=rec)
    cfg = ParallelConfig(
        tp=2,
        pp=1,
        dp=32,
        micro_batch_size=1,
        num_microbatches=2,
        zero_stage=3,
        recompute=recompute,
        sequence_parallel=True,
    )
    return cm.time_per_token(Point.from_config(cfg)).get("recompute", 0.0)


def test_an_early_stopping_checkpoint_skips_the_down_projection() -> None:
    """torch 2.1 torch/utils/checkpoint.py: non-reentrant checkpoint stops at the last saved
    tensor, the down projection's input; the projection and its reduction are not replayed."""
    fw = Framework.TORCHTITAN
    assert recipe_of(TrainingSpec(seq_len=4096, framework=fw)).recompute_stops_early
    whole = _recompute_seconds(fw, Recompute.FULL, False)
    early = _recompute_seconds(fw, Recompute.FULL, True)
    # llama3-8b: w2 is 27% of a layer's GEMM FLOPs, diluted by attention and pointwise passes
    assert 0.12 < (whole - early) / whole < 0.27
    # selective recomputation replays only attention: nothing to stop early
    assert _recompute_seconds(fw, Recompute.SELECTIVE, False) == _recompute_seconds(
        fw, Recompute.SELECTIVE, True
    )


def test_llm_foundry_a100_40gb_table_replays_whole_blocks() -> None:
    """Its sweep ran torch 1.13.1 (no early stop); the A100-80GB table torch 2.1.0."""
    runs = [r for r in load_fsdp() if r.source == "llmfoundry"]
    by_gpu = {(r.cluster.gpu, r.recompute_stops_early) for r in runs}
    assert by_gpu == {("a100-sxm-40gb", False), ("a100-sxm-80gb", None)}
