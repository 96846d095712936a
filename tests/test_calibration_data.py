"""The vendored calibration runs load with their sources, profiles, categories and conversions
(tools/calibration/loaders.py), checked by hand on a few records."""

from __future__ import annotations

from collections import Counter

import pytest

from meshplan.solver.arch import resolve_model
from meshplan.solver.schema import Framework, Precision, Recompute
from meshplan.tools.calibration.score import (
    DEFAULTS,
    SOURCES,
    evaluate_run,
    load_all,
    load_megatron,
    megatron_flops_per_token,
)


@pytest.fixture(scope="module")
def runs() -> dict[str, object]:
    return {r.id: r for r in load_all()}


def test_counts_by_source_and_category(runs) -> None:
    assert len(runs) == 48 + 50 + 7
    by_source = Counter(r.source for r in runs.values())
    assert by_source == {
        "narayanan2021": 10,
        "korthikanti2022": 10,
        "torchtitan": 23,
        "mosaicml": 5,
        "kempnerforge": 7,
        "mcore_r080": 11,
        "nemo2407": 12,
        "dgxc2502": 22,
        "moezoo": 5,
    }
    # fsdp_runs.json's sources (tools/calibration/fsdp.py) are loaded apart from these three files
    assert set(by_source) | {"llmfoundry", "nanotron"} == set(SOURCES) == set(DEFAULTS)
    assert Counter(r.category for r in runs.values()) == {
        "BF16-dense": 60,
        "FP8-dense": 36,
        "MoE": 9,
    }


def test_every_run_has_its_framework_profile(runs) -> None:
    expect = {
        "narayanan2021": Framework.MEGATRON,
        "korthikanti2022": Framework.MEGATRON,
        "torchtitan": Framework.TORCHTITAN,
        "mosaicml": Framework.LLM_FOUNDRY,
        "kempnerforge": Framework.KEMPNERFORGE,
        "mcore_r080": Framework.MEGATRON,
        "nemo2407": Framework.MEGATRON,
        "dgxc2502": Framework.MEGATRON,
        "moezoo": Framework.MEGATRON,
    }
    for r in runs.values():
        assert r.training.framework is expect[r.source], r.id
        c = r.config
        assert c.tp * c.pp * c.dp * c.cp == r.cluster.num_gpus, r.id
        assert c.dp * c.micro_batch_size * c.num_microbatches * r.training.seq_len == (
            r.training.global_batch_tokens
        ), r.id


def test_megatron_weak_scaling_tflops_convert_by_megatrons_formula(runs) -> None:
    r = runs["mcore_r080_h100_weak_1.7B_48gpu"]
    A = resolve_model(r.model)
    # 12·L·h²·((1 + 1 + s/h) + 4 + V/2Lh) with L=24, h=2048, s=4096, V=131072, by hand:
    by_hand = 12 * 24 * 2048**2 * (2 + 4096 / 2048 + 4 + 131072 / (2 * 24 * 2048))
    assert megatron_flops_per_token(A, 4096) == pytest.approx(by_hand)
    assert r.tokens_per_s_per_gpu == pytest.approx(408.8e12 / by_hand)
    assert r.training.precision is Precision.BF16 and r.config.virtual_stages == 1
    # no interleaving is named: Megatron's default, one chunk per stage
    big = runs["mcore_r080_h100_weak_462B_6144gpu"]
    assert (big.config.pp, big.config.virtual_stages, big.config.num_microbatches) == (16, 1, 64)
    assert big.training.tp_comm_overlap and big.training.dp_comm_overlap
    # strong scaling: the 177B weak row's tp 8 pp 6, dp = GPUs/48, same 1,152 sequences
    s = runs["mcore_r080_h100_strong_gpt177B_4608gpu"]
    assert (s.config.tp, s.config.pp, s.config.dp, s.config.num_microbatches) == (8, 6, 96, 12)
    assert s.tokens_per_s_per_gpu == pytest.approx(
        0.42 * 989e12 / megatron_flops_per_token(resolve_model(s.model), 4096)
    )


def test_dgxc_and_nemo_conventions_are_undone(runs) -> None:
    # FP8 MFU is published against the FP8 peak: against the BF16 peak it doubles.
    r = runs["dgxc_2502_gpt3_fp8_128xh100"]
    assert r.tokens_per_s_per_gpu == 728.0
    assert evaluate_run(r).published_mfu == pytest.approx(2 * 0.3952, rel=0.01)
    assert r.training.precision is Precision.FP8 and r.category == "FP8-dense"
    # Grok-1's published MFU halves causal attention; ours does not, so ours is higher.
    g = runs["dgxc_2502_grok_bf16_512xh100"]
    assert evaluate_run(g).published_mfu > g.source_mfu * 1.02
    assert g.category == "MoE" and not g.training.tp_comm_overlap
    # NeMo prints tokens/s per GPU and model TFLOP/s only; the Llama rows agree with ours.
    n = runs["nemo2407_h100_fp8_llama2-7b_8gpu"]
    assert n.tokens_per_s_per_gpu == 16934
    assert evaluate_run(n).published_mfu == pytest.approx(780 / 989, rel=0.01)
    assert n.config.recompute is Recompute.NONE and n.config.zero_stage == 1


def test_moe_zoo_runs_keep_their_expert_layout(runs) -> None:
    r = runs["mcore_moezoo_qwen3_235b_bf16_256xh100_crossnode_ep32_1f1boverlap"]
    assert r.tokens_per_s_per_gpu == pytest.approx(2048 * 4096 / 17.6 / 256)
    assert (r.config.tp, r.config.pp, r.config.dp, r.config.ep) == (2, 8, 16, 32)
    assert r.config.etp == 1 and r.model.head_dim == 128
    assert r.training.ep_comm_overlap is True
    assert r.config.recompute is Recompute.NONE  # "norm, act" recomputes no GEMM
    fsdp = runs["mcore_moezoo_qwen3_235b_bf16_256xh100_intranode_ep8_fsdp"]
    assert fsdp.config.zero_stage == 3 and fsdp.config.recompute is Recompute.FULL
    assert fsdp.training.ep_comm_overlap is False


def test_requests_carry_etp_and_head_dim() -> None:
    r = next(x for x in load_megatron() if x.model.moe and x.config.etp == 1)
    req = r.request()
    assert req.config.etp == 1 and req.config.tp == 2
    assert req.model.head_dim == 128  # Qwen3: not hidden / heads = 64
