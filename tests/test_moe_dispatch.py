"""Expert dispatch and combine placed by where the expert group lies, the busiest rank's load
under unforced routing, fine-grained experts' GEMM rate and the router's passes."""

from __future__ import annotations

import math

import pytest

from meshplan.solver import EvaluateRequest, evaluate
from meshplan.solver.arch import resolve_model
from meshplan.solver.costmodel import CostModel
from meshplan.solver.costmodel.point import Layout
from meshplan.solver.costmodel.rates import (
    ACT_BYTES,
    FP8_DISPATCH_BYTES,
    ROUTER_BYTES,
    ROUTER_PASSES,
    Rates,
)
from meshplan.solver.hardware import resolve_cluster
from meshplan.solver.schema import ClusterSpec, ModelSpec, Precision, SearchSpec, TrainingSpec

FINE = ModelSpec(  # 128 experts, top-8, expert width 1,536 (Qwen3-235B-A22B's shape, 8 layers)
    num_layers=8,
    hidden_size=4096,
    num_attention_heads=64,
    num_kv_heads=4,
    ffn_hidden_size=12288,
    vocab_size=151936,
    moe={"num_experts": 128, "top_k": 8, "expert_ffn_hidden_size": 1536},
)


def rates(model: ModelSpec = FINE, cluster: dict | None = None, **training: object) -> Rates:
    A = resolve_model(model)
    H = resolve_cluster(ClusterSpec(gpu="h100-sxm-80gb", num_gpus=256, **(cluster or {})))
    return CostModel(A, H, TrainingSpec(seq_len=4096, **training), SearchSpec()).rates


def _copies(r: Rates, tp: int = 1) -> float:
    """Dispatch and combine, forward and backward, of every routed copy of a token (bytes)."""
    return 4 * r.c.A.top_k * r.c.A.h * ACT_BYTES / tp


def test_a_dispatch_inside_a_node_costs_nvlink_time() -> None:
    r = rates(moe_router_force_balance=True)
    H = r.c.H
    got = r.a2a((1, 8, 1))
    want = r.moe * _copies(r) * 7 / 8 / (H.intra_bw * r.c.K.link_eff)
    assert got == pytest.approx(want)
    # the same group with DeepEP's dispatch: inside a node there is no InfiniBand hop
    assert rates(moe_router_force_balance=True, ep_dispatch_dedup=True).a2a((1, 8, 1)) == got


def test_a_dispatch_across_nodes_costs_one_infiniband_hop_and_the_intra_node_hop() -> None:
    ep, nodes = 32, 4  # the expert group spans four nodes
    r = rates(moe_router_force_balance=True, ep_dispatch_dedup=True)
    A, H, K = r.c.A, r.c.H, r.c.K
    # one InfiniBand copy per remote node holding any of the token's top-8 experts
    miss = math.comb(A.E - A.E // nodes, A.top_k) / math.comb(A.E, A.top_k)
    ib = 4 * A.h * ACT_BYTES * (nodes - 1) * (1 - miss) / (H.inter_bw * K.link_eff)
    hop = _copies(r) * (ep - 1) / ep / (H.intra_bw * K.link_eff)  # the NVLink forward
    assert ib > hop  # H100: InfiniBand-bound, as DeepEP measures it
    assert r.a2a((1, ep, 1)) == pytest.approx(r.moe * ib)
    # with a slow intra-node link the hop sets the pace: the same dispatch costs the hop
    slow = rates(
        moe_router_force_balance=True, ep_dispatch_dedup=True, cluster={"intra_node_gbps": 40}
    )
    slow_hop = _copies(slow) * (ep - 1) / ep / (40e9 * K.link_eff)
    assert slow_hop > ib
    assert slow.a2a((1, ep, 1)) == pytest.approx(slow.moe * slow_hop)
    # A flat all-to-all (NCCL, no dedup) sends every remote copy over InfiniBand, at once
    # with the in-node ones: slower than one copy per node.
    flat = rates(moe_router_force_balance=True, ep_dispatch_dedup=False)
    inside, outside = 7 / ep, 24 / ep
    want = max(
        _copies(r) * inside / (H.intra_bw * K.link_eff),
        _copies(r) * outside / (H.inter_bw * K.link_eff),
    )
    assert flat.a2a((1, ep, 1)) == pytest.approx(r.moe * want)
    assert flat.a2a((1, ep, 1)) > r.a2a((1, ep, 1))


def test_deepep_dispatches_fp8_tokens_and_combines_in_bf16_under_fp8_training() -> None:
    # DeepEP @ dd758ca README: "FP8 dispatching and BF16 combining"; a scale per 128 elements
    assert FP8_DISPATCH_BYTES == 1 + 4 / 128  # 1.03125: one fp32 scale per 128 FP8 values
    share = (FP8_DISPATCH_BYTES + ACT_BYTES) / (2 * ACT_BYTES)  # 2 of the 4 all-to-alls in FP8
    for ep in (8, 32):  # inside a node (NVLink-bound) and across four (InfiniBand-bound)
        bf16 = rates(moe_router_force_balance=True, ep_dispatch_dedup=True)
        fp8 = rates(moe_router_force_balance=True, ep_dispatch_dedup=True, precision=Precision.FP8)
        assert fp8.a2a((1, ep, 1)) == pytest.approx(bf16.a2a((1, ep, 1)) * share)
    # NCCL's all-to-all (no DeepEP) moves the BF16 tokens FP8 training hands it
    flat = rates(moe_router_force_balance=True, ep_dispatch_dedup=False, precision=Precision.FP8)
    flat_bf16 = rates(moe_router_force_balance=True, ep_dispatch_dedup=False)
    assert flat.a2a((1, 32, 1)) == pytest.approx(flat_bf16.a2a((1, 32, 1)))


def test_unforced_routing_loads_the_busiest_rank_by_the_expected_maximum() -> None:
    free, forced = rates(), rates(moe_router_force_balance=True)
    cv = free.c.K.moe_load_cv
    assert cv > 0
    for ep in (2, 8, 32):
        want = cv * math.sqrt(ep / 128) * math.sqrt(2 * math.log(ep))
        assert free.imbalance((1, ep, 1)) == pytest.approx(want)
        assert forced.imbalance((1, ep, 1)) == 0.0
        assert free.a2a((1, ep, 1)) == pytest.approx(forced.a2a((1, ep, 1)) * (1 + want))
        assert free.permute((1, ep, 1)) == pytest.approx(forced.permute((1, ep, 1)) * (1 + want))
    assert free.imbalance((1, 1, 1)) == 0.0  # one rank holds every expert


def _ep_step(force: bool) -> tuple[float, float]:
    req = EvaluateRequest.model_validate(
        {
            "model": {"preset": "qwen3-235b-a22b"},
            "cluster": {"num_gpus": 256},
            "training": {"seq_len": 4096, "moe_router_force_balance": force},
            "config": {"tp": 2, "pp": 8, "virtual_stages": 4, "dp": 16, "ep": 8, "etp": 1}
            | {"micro_batch_size": 1, "num_microbatches": 16, "zero_stage": 1}
            | {"recompute": "NONE"},
        }
    )
    p = evaluate(req).performance
    assert p is not None
    return p.step_time_s, p.breakdown.compute_s


def test_unforced_routing_is_slower_in_evaluate() -> None:
    (t_free, c_free), (t_forced, c_forced) = _ep_step(False), _ep_step(True)
    assert t_free > t_forced and c_free > c_forced


def test_fine_grained_experts_run_at_the_rate_of_their_narrow_dim() -> None:
    r = rates()
    A, h0 = r.c.A, r.c.K.gemm_h0
    assert A.fe < A.h
    coarse = ModelSpec(
        **(
            FINE.model_dump()
            | {"moe": FINE.moe.model_copy(update={"expert_ffn_hidden_size": 8192})}
        )
    )
    wide = rates(coarse)
    ratio = r.rate_expert / wide.rate_expert
    assert ratio == pytest.approx(A.fe * (A.h + h0) / (A.h * (A.fe + h0)))
    assert ratio < 0.9  # 1,536-wide experts of a 4,096 model lose over a tenth (h0 > 300)


def test_the_router_passes_over_its_logits() -> None:
    r = rates()
    dense = rates(ModelSpec(**(FINE.model_dump() | {"moe": None})))
    lay = Layout(2, 1, 1, 1, 2, True)
    A = r.c.A
    act = r.moe * r.gate * A.fe * (A.top_k + A.shared) - dense.dense * dense.gate * A.f
    router = r.moe * ROUTER_PASSES * A.E * ROUTER_BYTES / 2
    diff = r.elementwise(lay) - dense.elementwise(lay)
    assert diff == pytest.approx((3 * ACT_BYTES * act / 2 + router) / r.c.H.hbm_bw)
