"""Replan: every answer re-scores as fitting under its framework profile and honours its
compatibility level; fewer replicas grow the optimizer shards; what moves; bad input."""

from __future__ import annotations

import pytest

from meshplan.solver import EvaluateRequest, evaluate
from meshplan.solver.scheduler import CellStatus, ReplanRequest, SchedulerInputError, replan
from meshplan.solver.scheduler.replan import honours
from meshplan.solver.scheduler.requests import CompatibilityLevel
from meshplan.solver.scheduler.state import _worst_receive

RUNNING = {"tp": 8, "pp": 1, "dp": 8, "micro_batch_size": 1, "num_microbatches": 8,
           "zero_stage": 1, "recompute": "FULL"}  # fmt: skip


def request(**kw: object) -> ReplanRequest:
    base = {"model": {"preset": "llama3-70b"},
            "training": {"seq_len": 4096, "framework": "GENERIC"},
            "cluster": {"num_gpus": 64}, "config": RUNNING, "event": {"delta_nodes": -1},
            "compatibility": "SAME_MODEL_PARALLEL", "batch": {"kind": "FIXED_GLOBAL"}}  # fmt: skip
    return ReplanRequest.model_validate({**base, **kw})


def _rescore(req: ReplanRequest, row) -> None:  # noqa: ANN001
    """The row's layout, scored afresh on the GPUs it uses, fits under the request's profile."""
    ev = evaluate(
        EvaluateRequest(
            model=req.model,
            cluster=req.cluster.model_copy(update={"num_gpus": row.num_gpus_used}),
            training=req.training.model_copy(
                update={"global_batch_tokens": row.global_batch_tokens}
            ),
            config=row.config,
            search=req.search,
        )
    )
    assert ev.fits, ev.violations
    assert ev.performance.tokens_per_s == pytest.approx(row.tokens_per_s)
    assert ev.memory == row.memory


@pytest.mark.parametrize("level", list(CompatibilityLevel))
@pytest.mark.parametrize(
    ("model", "framework", "config", "cluster"),
    [
        ({"preset": "llama3-70b"}, "GENERIC", RUNNING, {"num_gpus": 64}),
        ({"preset": "kempnerforge-13b"}, "KEMPNERFORGE",
         {"tp": 4, "pp": 1, "dp": 4, "micro_batch_size": 1, "num_microbatches": 8,
          "zero_stage": 3},
         {"gpu": "h200-141gb", "gpus_per_node": 4, "num_gpus": 16}),
    ],
)  # fmt: skip
def test_every_answer_fits_and_honours_its_level(
    level: CompatibilityLevel, model: dict, framework: str, config: dict, cluster: dict
) -> None:
    req = request(model=model, training={"seq_len": 4096, "framework": framework},
                  cluster=cluster, config=config, compatibility=level.value,
                  event={"precompute_nodes": 2})  # fmt: skip
    gpus, gpn = cluster["num_gpus"], cluster.get("gpus_per_node", 8)
    res = replan(req)
    assert [r.delta_nodes for r in res.rows] == [-1, -2]
    before = req.config
    for row in res.rows:
        assert row.status is CellStatus.PLANNED, row.reason
        assert row.num_gpus_used <= row.num_gpus == gpus + row.delta_nodes * gpn
        assert honours(level, before, row.config)
        assert row.global_batch_tokens == res.before_global_batch_tokens  # FIXED_GLOBAL kept
        _rescore(req, row)
        assert row.throughput_kept == pytest.approx(row.tokens_per_s / res.before_tokens_per_s)
        assert 0 <= row.price_of_compatibility < 1
        assert row.tokens_per_s <= row.free_tokens_per_s * (1 + 1e-9)
        if level is CompatibilityLevel.FREE:
            assert row.price_of_compatibility == 0


def test_fewer_replicas_grow_the_optimizer_shards_and_move_them() -> None:
    res = replan(request(event={"precompute_nodes": 4}, batch={"kind": "FIXED_PER_REPLICA"},
                         search={"zero_stage": 1}))  # fmt: skip
    shards = [res.before_memory.optimizer]
    for row in res.rows:
        assert row.status is CellStatus.PLANNED
        assert row.config.dp * 8 == row.num_gpus_used  # tp 8 kept, dp absorbs the loss
        assert row.global_batch_tokens == row.config.dp * 8 * 4096  # per replica kept
        shards.append(row.memory.optimizer)
        assert row.state_move.weights_bytes == 0  # ZeRO-1: weights are replicated, not moved
        assert 0 < row.state_move.optimizer_bytes <= row.memory.optimizer
        assert not row.restart_implied
    assert shards == sorted(shards) and shards[-1] > shards[0]


def test_when_the_level_cannot_fit_it_says_the_least_level_and_the_nodes_that_would() -> None:
    # 24 GPUs: tp 8 with ZeRO-1 leaves no layout of the running shape (nor of the same tp:
    # ZeRO-1 needs two data-parallel ranks), but a free layout fits.
    res = replan(request(event={"delta_nodes": -5}, search={"zero_stage": 1}))
    (row,) = res.rows
    assert row.status is CellStatus.DOES_NOT_FIT and "GiB" in row.reason
    assert row.least_level is CompatibilityLevel.FREE and row.free_config is not None
    # 16 GPUs: nothing fits at any level; the answer names the node count that would.
    (row,) = replan(request(event={"delta_nodes": -6}, search={"zero_stage": 1})).rows
    assert row.status is CellStatus.DOES_NOT_FIT and row.least_level is None
    assert row.min_nodes_at_level > 2 and row.free_config is None


def test_worst_receive_of_contiguous_shards() -> None:
    # 4 shards -> 2: rank 1 needs [1/2, 1) and held [1/4, 1/2): it receives all of its new shard
    assert _worst_receive(50, 4, 2, 4) == 50
    assert _worst_receive(100, 1, 1, 4) == 0  # replicated before and after
    assert _worst_receive(25, 2, 4, 2) == 25  # growth: ranks 2 and 3 are new GPUs
    assert _worst_receive(40, 8, 8, 8) == 0  # nothing changes


def test_a_changed_shape_moves_everything_and_implies_a_restart() -> None:
    res = replan(request(compatibility="FREE", event={"delta_nodes": -3}))
    (row,) = res.rows
    if (row.config.tp, row.config.pp) != (8, 1):
        assert row.restart_implied and "re-sharded" in row.restart_reason
        assert row.state_move.total_bytes == row.state_move.state_bytes_per_gpu


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"config": {**RUNNING, "tp": 3}}, "config.tp"),
        ({"config": {**RUNNING, "dp": 16}}, "config.dp"),
        ({"config": {**RUNNING, "pp": 2, "dp": 4, "virtual_stages": 100}}, "config.pp"),
        ({"event": {"delta_nodes": -8}}, "event.delta_nodes"),
        ({"event": {}}, "event"),
        ({"event": {"delta_nodes": -1, "precompute_nodes": 2}}, "event"),
        ({"event": {"precompute_nodes": 8}}, "event.precompute_nodes"),
        ({"config": {**RUNNING, "pp": 2, "dp": 4}, "event": {"delta_nodes": -7}}, "compatibility"),
        ({"compatibility": "FREE", "checkpoint_reshard": "DP_ONLY"}, "compatibility"),
        ({"cluster": {"gpu": "no-such-gpu", "num_gpus": 64}}, "cluster.gpu"),
        ({"batch": {"kind": "FREE", "per_replica_batch_tokens": 4096}}, "batch.per_replica_batch_tokens"),
    ],
)  # fmt: skip
def test_bad_input_names_its_field(change: dict, field: str) -> None:
    with pytest.raises(SchedulerInputError) as err:
        replan(request(**change))
    assert err.value.field == field, str(err.value)
