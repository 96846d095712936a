"""DualPipeV as a pipeline schedule (training.pipeline_schedule): its rules, a bubble of 2/3 of
the interleaved 1F1B's on two stages per rank, and the expert all-to-all and stage sends hidden
behind the overlapped forward and backward chunks (DeepSeek-V3 report §3.2.1; deepseek-ai/
DualPipe @ 3da1bbe)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from meshplan.solver import EvaluateRequest, PlanRequest, evaluate, plan
from meshplan.solver.results import PlanStatus
from meshplan.solver.schema import TrainingSpec

DENSE = {
    "num_layers": 16,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_kv_heads": 8,
    "ffn_hidden_size": 14336,
    "vocab_size": 32000,
}
MOE = DENSE | {
    "ffn_hidden_size": 1536,
    "moe": {"num_experts": 64, "top_k": 8, "expert_ffn_hidden_size": 1536},
}


def _eval(schedule: str | None, model: dict = DENSE, **config: object) -> EvaluateRequest:
    training: dict = {"seq_len": 4096, "framework": "TORCHTITAN"}
    if schedule:
        training["pipeline_schedule"] = schedule
    layout = {"tp": 1, "pp": 4, "dp": 4, "virtual_stages": 2, "micro_batch_size": 1}
    layout |= {"num_microbatches": 8, "zero_stage": 1, "recompute": "NONE"}
    return EvaluateRequest.model_validate(
        {
            "model": model,
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 16},
            "training": training,
            "config": layout | config,
        }
    )


def test_dualpipe_needs_a_profile_that_runs_it() -> None:
    with pytest.raises(ValidationError, match="pipeline_schedule DUALPIPE_V"):
        TrainingSpec(pipeline_schedule="DUALPIPE_V", framework="MEGATRON")
    TrainingSpec(pipeline_schedule="DUALPIPE_V", framework="TORCHTITAN")


def test_dualpipe_runs_two_stages_per_rank_and_at_least_two_micro_batches_per_rank() -> None:
    assert not evaluate(_eval("DUALPIPE_V")).violations
    one = evaluate(_eval("DUALPIPE_V", virtual_stages=1)).violations
    assert any("virtual_stages 2" in v for v in one)
    few = evaluate(_eval("DUALPIPE_V", num_microbatches=4, dp=8, micro_batch_size=1))
    assert any(">= 2*pp = 8" in v for v in few.violations)


def test_the_bubble_is_two_thirds_of_interleaved_1f1b_on_two_stages_per_rank() -> None:
    base, dual = evaluate(_eval(None)).performance, evaluate(_eval("DUALPIPE_V")).performance
    assert base is not None and dual is not None
    # (pp − 1)(F&B + B − 3W) = 2F against (pp − 1)(F + B) = 3F (DualPipe README's table); the
    # stage sends' volume in the bubble hides too, their latencies stay
    ratio = dual.breakdown.bubble_s / base.breakdown.bubble_s
    assert 0.6 < ratio < 2 / 3
    assert dual.breakdown.compute_s == pytest.approx(base.breakdown.compute_s, rel=1e-6)
    assert dual.step_time_s < base.step_time_s


def test_the_expert_all_to_all_hides_behind_the_overlapped_chunks() -> None:
    moe = dict(ep=4)
    base = evaluate(_eval(None, MOE, **moe)).performance
    dual = evaluate(_eval("DUALPIPE_V", MOE, **moe)).performance
    flat = evaluate(_eval("DUALPIPE_V", MOE, **(moe | {"pp": 1, "dp": 16, "virtual_stages": 1})))
    assert base is not None and dual is not None and flat.performance is not None
    assert base.breakdown.ep_comm_s > 0
    assert dual.breakdown.ep_comm_s < 0.6 * base.breakdown.ep_comm_s
    # without a pipeline there is nothing to overlap with: torchtitan's exposed all-to-all
    plain = evaluate(_eval(None, MOE, **(moe | {"pp": 1, "dp": 16, "virtual_stages": 1})))
    assert flat.performance.breakdown.ep_comm_s == pytest.approx(
        plain.performance.breakdown.ep_comm_s
    )


def test_the_planner_picks_v2_with_enough_micro_batches_under_dualpipe() -> None:
    req = PlanRequest.model_validate(
        {
            "model": DENSE,
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 16, "hbm_gib": 16},
            "training": {
                "seq_len": 4096,
                "global_batch_tokens": 4096 * 64,
                "framework": "TORCHTITAN",
                "pipeline_schedule": "DUALPIPE_V",
            },
            "search": {"pp": 4},
            "options": {"explain": False, "time_limit_s": 60},
        }
    )
    res = plan(req)
    assert res.status is PlanStatus.OPTIMAL, res
    c = res.config
    assert c is not None and c.pp == 4 and c.virtual_stages == 2
    assert c.num_microbatches >= 8


def test_the_torchtitan_export_names_the_dualpipev_schedule() -> None:
    from meshplan.tools.export.emit import emit

    llama = {"preset": "llama3-8b"}  # a shape torchtitan's model registry builds
    req = _eval("DUALPIPE_V", llama)
    for kind in ("torchtitan", "torchtitan-toml"):
        text = emit(kind, req.config, req.model, req.training, 4096 * 4 * 8)
        assert "DualPipeV" in text and "Interleaved1F1B" not in text
    plain = _eval(None, llama)
    text = emit("torchtitan", plain.config, plain.model, plain.training, 4096 * 4 * 8)
    assert "Interleaved1F1B" in text and "DualPipeV" not in text


def test_rank_0_holds_two_pp_plus_one_chunks_and_the_loss() -> None:
    # DeepSeek-V3 report table 2 (DualPipe README): PP + 1 stages' activations per device, PP
    # the stages (2·pp in the V): on the rank holding the loss, interleaved 1F1B's last stage
    # keeps (v − 1)·pp + 1 = pp + 1 chunks, DualPipeV 2·pp + 1, the embedding beside the head
    from meshplan.solver.arch import resolve_model
    from meshplan.solver.costmodel import CostModel, Point
    from meshplan.solver.costmodel.activations import per_token
    from meshplan.solver.costmodel.model import MEMORY_UNIT
    from meshplan.solver.hardware import resolve_cluster
    from meshplan.solver.schema import ParallelConfig, Recompute, SearchSpec

    def model(schedule: str | None) -> tuple[CostModel, Point]:
        req = _eval(schedule)
        A, H = resolve_model(req.model), resolve_cluster(req.cluster)
        t = req.training.model_copy(update={"global_batch_tokens": 4 * 8 * 4096})
        cfg = ParallelConfig.model_validate(req.config.model_dump())
        return CostModel(A, H, t, SearchSpec()), Point.from_config(cfg)

    dual, p = model("DUALPIPE_V")
    inter, _ = model(None)
    grown = {
        k: (dual.tenants_int(p, "last")[k] - inter.tenants_int(p, "last")[k]) * MEMORY_UNIT
        for k in ("activations", "weights")
    }
    layer_mb = float(per_token(dual.ctx, p.lay, Recompute.NONE)) * 4096  # a layer, micro-batch
    pp, chunk = 4, 16 // 8  # 16 layers in 2·pp chunks
    assert grown["activations"] == pytest.approx(pp * chunk * layer_mb, rel=1e-3)
    assert grown["weights"] > 0  # the embedding beside the output layer
    first = dual.tenants_int(p, "first")["activations"] * MEMORY_UNIT
    assert first == pytest.approx(dual.tenants_int(p, "last")["activations"] * MEMORY_UNIT)
