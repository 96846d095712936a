"""Framework profiles as the search sees them: rules that shape the plans, recipes that set the
memory, today's kernels (fused attention, head_dim, FP8 only on FP8 hardware), MoE folding."""

from __future__ import annotations

import pytest
from conftest import eval_req, plan_req
from test_grpc_support import running_server

from meshplan.client import InvalidRequestError, PlannerClient
from meshplan.solver import evaluate, plan
from meshplan.solver.profiles import PROFILES
from meshplan.solver.results import PlanStatus
from meshplan.solver.schema import FRAGMENTATION, RESERVE_GIB, Framework

GIB = 1 << 30


# --- FP8 needs FP8 units; a framework without an FP8 recipe refuses it --------------------------


def test_fp8_on_a100_is_bad_input_naming_training_precision() -> None:
    req = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"gpu": "a100-sxm-80gb", "num_gpus": 8},
        "training": {"precision": "FP8"},
    }
    with pytest.raises(ValueError, match=r"^training\.precision FP8 needs FP8 tensor cores"):
        plan(plan_req(**req))
    cfg = {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1, "num_microbatches": 1}
    with pytest.raises(ValueError, match=r"^training\.precision"):
        evaluate(eval_req(**req, config=cfg))
    h100 = {**req, "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8}}
    assert plan(plan_req(**h100)).status is PlanStatus.OPTIMAL
    ds = {**h100, "training": {"precision": "FP8", "framework": "DEEPSPEED"}}
    with pytest.raises(ValueError, match=r"^training\.precision FP8 is not available"):
        plan(plan_req(**ds))


def test_fp8_on_a100_is_invalid_argument_over_grpc() -> None:
    req = plan_req(
        model={"preset": "llama3-8b"},
        cluster={"gpu": "a100-sxm-80gb", "num_gpus": 8},
        training={"precision": "FP8"},
    )
    with (
        running_server() as (port, _),
        PlannerClient(f"127.0.0.1:{port}") as client,
        pytest.raises(InvalidRequestError) as e,
    ):
        client.plan(req, timeout=30)
    assert [v.field for v in e.value.violations] == ["training.precision"]


# --- rules that shape plans ----------------------------------------------------------------------


def test_no_zero_over_a_single_data_parallel_rank() -> None:
    r = plan(
        plan_req(
            model={"preset": "llama3-8b"},
            cluster={"num_gpus": 8},
            training={"seq_len": 4096},
            search={"tp": 8},
        )
    )
    assert r.config.dp * r.config.cp == 1 and r.config.zero_stage == 0
    ev = evaluate(
        eval_req(
            model={"preset": "llama3-8b"},
            cluster={"num_gpus": 8},
            config={
                "tp": 8,
                "pp": 1,
                "dp": 1,
                "micro_batch_size": 1,
                "num_microbatches": 1,
                "zero_stage": 1,
            },
        )
    )
    assert any("nothing to shard" in v for v in ev.violations)  # zero_stage defaults to 1


@pytest.mark.parametrize(
    "framework,pp,allowed",
    [
        ("MEGATRON", 1, {0, 1, 2, 3}),
        ("MEGATRON", 4, {0, 1}),  # Megatron-FSDP is not combined with pipelining
        ("TORCHTITAN", 1, {3}),
        ("TORCHTITAN", 4, {1}),  # FSDP2 under pipelining: gathered weights, one sync
        ("DEEPSPEED", 4, {0, 1}),  # the pipeline engine refuses ZeRO-2/3
        ("KEMPNERFORGE", 1, {0, 3}),
    ],
)
def test_zero_stages_by_framework_and_pipelining(framework: str, pp: int, allowed: set) -> None:
    ok = set()
    for z in range(4):
        ev = evaluate(
            eval_req(
                model={"preset": "llama3-70b"},
                cluster={"num_gpus": 256},
                training={"seq_len": 4096, "framework": framework},
                config={
                    "tp": 8,
                    "pp": pp,
                    "dp": 32 // pp,
                    "micro_batch_size": 1,
                    "num_microbatches": 8,
                    "zero_stage": z,
                    "recompute": "FULL",
                },
            )
        )
        if not any("zero_stage" in v for v in ev.violations):
            ok.add(z)
    assert ok == allowed


def test_megatron_interleaving_needs_whole_rounds_of_microbatches() -> None:
    base = {
        "model": {"preset": "llama3-70b"},
        "cluster": {"num_gpus": 256},
        "training": {"seq_len": 4096},
    }
    cfg = {"tp": 8, "pp": 4, "dp": 8, "virtual_stages": 2, "micro_batch_size": 1}
    bad = evaluate(eval_req(**base, config={**cfg, "num_microbatches": 6}))
    good = evaluate(eval_req(**base, config={**cfg, "num_microbatches": 8}))
    assert any("multiple of pp" in v for v in bad.violations)
    assert not any("multiple of pp" in v for v in good.violations)


def test_uneven_pipeline_splits_follow_the_framework() -> None:
    # 126 layers over pp=16 x v=3: Megatron places them with a layout; DeepSpeed has no v.
    cfg = {"tp": 8, "pp": 16, "dp": 16, "virtual_stages": 3, "micro_batch_size": 1}
    for fw, ok in (("MEGATRON", True), ("DEEPSPEED", False), ("KEMPNERFORGE", False)):
        ev = evaluate(
            eval_req(
                model={"preset": "llama3-405b"},
                cluster={"num_gpus": 2048},
                training={"seq_len": 8192, "framework": fw},
                config={**cfg, "num_microbatches": 32, "recompute": "FULL"},
            )
        )
        assert (not any("interleaved" in v for v in ev.violations)) == ok, (fw, ev.violations)


def test_plans_obey_their_framework() -> None:
    for fw in ("TORCHTITAN", "DEEPSPEED", "KEMPNERFORGE"):
        r = plan(
            plan_req(
                model={"preset": "llama3-70b"},
                cluster={"num_gpus": 128},
                training={"seq_len": 8192, "framework": fw},
            )
        )
        c, prof = r.config, PROFILES[Framework(fw)]
        assert c.zero_stage in prof.zero_allowed(c.pp, c.dp * c.cp)
        if not prof.interleaving:
            assert c.virtual_stages == 1
        if not prof.context_parallel:
            assert c.cp == 1


# --- memory recipes --------------------------------------------------------------------------------


def test_megatron_keeps_fp32_main_gradients_unless_told() -> None:
    # Llama-3-70B on 256 H100: gradients are 4 bytes per TP/PP-local parameter under the
    # distributed optimizer (2x the bf16 weights), 2 with --grad-reduce-in-bf16.
    cfg = {
        "tp": 8,
        "pp": 4,
        "dp": 8,
        "micro_batch_size": 1,
        "num_microbatches": 16,
        "zero_stage": 1,
        "recompute": "SELECTIVE",
    }
    base = {"model": {"preset": "llama3-70b"}, "cluster": {"num_gpus": 256}}
    fp32 = evaluate(eval_req(**base, training={"seq_len": 8192}, config=cfg)).memory
    bf16 = evaluate(
        eval_req(**base, training={"seq_len": 8192, "grad_reduce_in_bf16": True}, config=cfg)
    ).memory
    assert fp32.gradients == pytest.approx(2 * fp32.weights, rel=0.01)
    assert bf16.gradients == pytest.approx(bf16.weights, rel=0.01)
    r = plan(plan_req(**base, training={"seq_len": 8192}))
    assert r.status is PlanStatus.OPTIMAL
    m = r.memory
    assert m.total - m.reserve <= (m.hbm - RESERVE_GIB * GIB) / (1 + FRAGMENTATION)
    if r.config.zero_stage <= 1:
        assert m.gradients >= 1.9 * m.weights  # the plan is scored with fp32 gradients


def test_fused_attention_stores_no_scores() -> None:
    cfg = {
        "tp": 1,
        "pp": 1,
        "dp": 8,
        "micro_batch_size": 1,
        "num_microbatches": 4,
        "zero_stage": 3,
    }
    base = {"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": 8}}
    fused = evaluate(eval_req(**base, training={"seq_len": 8192}, config=cfg))
    unfused = evaluate(
        eval_req(**base, training={"seq_len": 8192, "fused_attention": False}, config=cfg)
    )
    assert fused.fits
    # 5 bytes per head per token pair (Korthikanti eq. 2): 5 * 32 heads * 8192^2 * 32 layers
    extra = unfused.memory.activations - fused.memory.activations
    assert extra == pytest.approx(5 * 32 * 8192 * 8192 * 32, rel=0.01)


def _titan(framework: str, **cfg: object) -> object:
    base = {"model": {"preset": "llama3-70b"}, "cluster": {"num_gpus": 256}}
    training = {"seq_len": 8192, "framework": framework}
    return evaluate(eval_req(**base, training=training, config=cfg)).memory


def test_fsdp2_transients_of_one_unit() -> None:
    # FSDP2 (torchtitan) holds a unit's bf16 gradients beyond the gathered copies and its fp32
    # reduce-scatter input at ZeRO-3 (2 B per parameter of one layer), and under pipelining its
    # one reduction's bf16 gradients and fp32 reduce-scatter input (6 B); GENERIC has neither.
    layer = 856_000_000 / 8  # llama3-70b: parameters of one layer over tp 8 (about)
    z3 = {"tp": 8, "pp": 1, "dp": 32, "micro_batch_size": 1, "num_microbatches": 4}
    z3 |= {"zero_stage": 3, "recompute": "FULL"}
    titan = _titan("TORCHTITAN", **z3)
    generic = _titan("GENERIC", **z3)
    fsdp_grad = 4 / 32 * 70.6e9 / 8  # fp32 gradients sharded over dp (GENERIC: 2 B)
    extra = titan.gradients - generic.gradients - (fsdp_grad / 2)
    assert extra == pytest.approx(2 * layer, rel=0.15)
    pp = {"tp": 8, "pp": 4, "dp": 8, "micro_batch_size": 1, "num_microbatches": 8}
    pp |= {"zero_stage": 1, "recompute": "FULL"}
    more = _titan("TORCHTITAN", **(pp | {"num_microbatches": 16}))
    titan_pp = _titan("TORCHTITAN", **pp)
    # gradients: fp32, unsharded, a stage's 20 layers, plus 6 B of one layer
    assert titan_pp.gradients == pytest.approx((4 * 20 + 6) * layer, rel=0.08)
    # pipelining receives each micro-batch's boundary into a buffer of its own: s·h/tp bf16
    boundary = 8192 * 8192 * 2 / 8
    assert more.activations - titan_pp.activations == pytest.approx(8 * boundary, rel=0.01)


def test_fp8_megatron_keeps_fp8_parameters_and_their_transpose() -> None:
    cfg = {"tp": 8, "pp": 1, "dp": 32, "micro_batch_size": 1, "num_microbatches": 8}
    cfg |= {"zero_stage": 1, "recompute": "FULL"}
    base = {"model": {"preset": "llama3-70b"}, "cluster": {"num_gpus": 256}}
    bf16 = evaluate(eval_req(**base, training={"seq_len": 8192}, config=cfg)).memory
    fp8 = evaluate(eval_req(**base, training={"seq_len": 8192, "precision": "FP8"}, config=cfg))
    assert fp8.fits
    # linear weights 1 + 1 (FP8 and its cached transpose) against bf16's 2; embeddings stay bf16
    assert fp8.memory.weights == pytest.approx(bf16.weights, rel=0.01)
    no_opt = cfg | {"zero_stage": 0}
    ev0 = evaluate(eval_req(**base, training={"seq_len": 8192, "precision": "FP8"}, config=no_opt))
    assert any("FP8 parameters need the distributed optimizer" in v for v in ev0.violations)


# --- today's kernels and shapes --------------------------------------------------------------------


def test_head_dim_sets_attention_width() -> None:
    shape = {
        "num_layers": 4,
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "num_kv_heads": 4,
        "ffn_hidden_size": 6144,
        "vocab_size": 32000,
    }
    cfg = {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1, "num_microbatches": 1}
    plain = evaluate(eval_req(model=shape, cluster={"num_gpus": 8}, config=cfg))
    wide = evaluate(eval_req(model=shape | {"head_dim": 128}, cluster={"num_gpus": 8}, config=cfg))
    # q and o grow from 2048 x 2048 to 2048 x 4096, k and v from 2048 x 256 to 2048 x 512
    per_layer = 2 * 2048 * (4096 - 2048) + 2 * 2048 * (512 - 256)
    assert wide.num_parameters.total - plain.num_parameters.total == 4 * per_layer
    assert wide.performance.model_flops_per_token > plain.performance.model_flops_per_token


def test_moe_parallel_folding_lets_ep_span_tp() -> None:
    # Mixtral 8x7B on 16 GPUs, tp=8, dp=2: ep=8 with etp=8 does not fold into tp*cp*dp = 16,
    # with etp=1 it does (experts split 8 ways across the tp ranks).
    base = {
        "model": {"preset": "mixtral-8x7b"},
        "cluster": {"num_gpus": 16},
        "training": {"seq_len": 4096},
    }
    cfg = {"tp": 8, "pp": 1, "dp": 2, "ep": 8, "micro_batch_size": 1, "num_microbatches": 4}
    cfg |= {"recompute": "FULL"}
    folded = evaluate(eval_req(**base, config=cfg | {"etp": 1}))
    unfolded = evaluate(eval_req(**base, config=cfg))  # etp defaults to tp
    assert folded.fits, folded.violations
    assert any("must divide tp*cp*dp" in v for v in unfolded.violations)
    generic = evaluate(
        eval_req(**base | {"training": {"seq_len": 4096, "framework": "GENERIC"}}, config=cfg)
    )
    assert any(
        "etp" in v
        for v in evaluate(
            eval_req(
                **base | {"training": {"seq_len": 4096, "framework": "GENERIC"}},
                config=cfg | {"etp": 1},
            )
        ).violations
    )
    assert not generic.fits


def test_published_large_layouts() -> None:
    # DeepSeek-V3 (report §3.2): 2,048 H800, pp 16, ep 64 over the 128 data-parallel ranks,
    # no tp, ZeRO-1; it fits under Megatron with full recomputation (the report's own
    # recomputation of norms and MLA up-projections and its FP8 activation caching are not
    # modelled, so less recomputation does not fit here).
    ds = evaluate(
        eval_req(
            model={"preset": "deepseek-v3"},
            cluster={"gpu": "h800-sxm-80gb", "num_gpus": 2048},
            training={"seq_len": 4096, "global_batch_tokens": 15360 * 4096, "precision": "FP8"},
            config={
                "tp": 1,
                "pp": 16,
                "dp": 128,
                "ep": 64,
                "etp": 1,
                "micro_batch_size": 1,
                "num_microbatches": 120,
                "zero_stage": 1,
                "recompute": "FULL",
            },
        )
    )
    assert ds.fits, ds.violations


def test_ladder_under_the_default_profile() -> None:
    # The rungs of "The scaling ladder" under Megatron's recipe: 70B does not fit one node, its
    # minimum is three (fp32 main gradients and no ZeRO-3 with pipelining), and there it splits
    # the model.
    base = {"training": {"seq_len": 2048, "global_batch_tokens": 131072}}
    r8 = plan(plan_req(model={"preset": "llama2-70b"}, cluster={"num_gpus": 8}, **base))
    assert r8.status is PlanStatus.INFEASIBLE and r8.explanation.min_gpus == 24
    r24 = plan(plan_req(model={"preset": "llama2-70b"}, cluster={"num_gpus": 24}, **base))
    assert r24.status is PlanStatus.OPTIMAL and r24.config.tp * r24.config.pp > 1
    r7 = plan(plan_req(model={"preset": "llama2-7b"}, cluster={"num_gpus": 8}, **base))
    assert (r7.config.tp, r7.config.pp) == (1, 1)
