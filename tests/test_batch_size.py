"""The default batch: with no global batch, the cap is DeepSeek LLM's optimal batch
B_opt = 0.2920·C^0.3271 for C = 6·N·D, D = 20 tokens per active parameter unless given."""

from __future__ import annotations

import math

import pytest

from meshplan.solver import PlanRequest, plan
from meshplan.solver.batch_size import batch_choice, optimal_batch_tokens
from meshplan.solver.results import BatchSource
from meshplan.solver.schema import TrainingSpec
from meshplan.solver.space import batch_of

N_8B = 8_030_261_248  # llama3-8b's active parameters as the planner counts them
QWEN2_05B = {  # Qwen2-0.5B's shape (its config.json): the "0.5B model on 1 GPU"
    "num_layers": 24,
    "hidden_size": 896,
    "num_attention_heads": 14,
    "num_kv_heads": 2,
    "ffn_hidden_size": 4864,
    "vocab_size": 151936,
    "tie_embeddings": True,
}


def test_the_law_by_hand() -> None:
    c = 6 * N_8B * 20 * N_8B  # 7.74e21 FLOP
    assert optimal_batch_tokens(c) == pytest.approx(0.2920 * c**0.3271)
    assert optimal_batch_tokens(c) == pytest.approx(4.2185e6, rel=1e-4)  # ~4.2M tokens
    assert optimal_batch_tokens(8 * c) / optimal_batch_tokens(c) == pytest.approx(8**0.3271)
    with pytest.raises(ValueError, match="positive"):
        optimal_batch_tokens(0)


def test_which_rule_sets_the_batch() -> None:
    t = TrainingSpec(seq_len=4096)
    law = batch_choice(t, N_8B)
    assert law.source is BatchSource.SCALING_LAW and law.train_tokens == 20 * N_8B
    assert law.compute_flops == pytest.approx(6 * N_8B * 20 * N_8B)
    assert (
        law.cap_tokens % 4096 == 0
        and 0 <= optimal_batch_tokens(law.compute_flops) - law.cap_tokens < 4096
    )
    assert "DeepSeek LLM" in law.reason and "Hoffmann" in law.reason
    more = batch_choice(TrainingSpec(seq_len=4096, train_tokens=15 * 10**12), N_8B)
    assert more.train_tokens == 15 * 10**12 and more.cap_tokens > law.cap_tokens
    given = batch_choice(TrainingSpec(seq_len=4096, critical_batch_tokens=1 << 20), N_8B)
    assert given.source is BatchSource.CRITICAL_BATCH and given.cap_tokens == 1 << 20
    fixed = batch_choice(TrainingSpec(seq_len=4096, global_batch_tokens=1 << 21), N_8B)
    assert fixed.source is BatchSource.GLOBAL_BATCH and fixed.cap_tokens == 0
    tiny = batch_choice(TrainingSpec(seq_len=1 << 20), 1000)  # the law is below one sequence
    assert tiny.cap_tokens == 1 << 20


def test_the_space_reads_the_same_cap() -> None:
    t = TrainingSpec(seq_len=4096)
    assert batch_of(t, N_8B).cap_seqs == batch_choice(t, N_8B).cap_tokens // 4096
    t = TrainingSpec(seq_len=4096, critical_batch_tokens=1 << 22)  # explicit caps stay as they were
    assert batch_of(t, N_8B).cap_seqs == (1 << 22) // 4096
    t = TrainingSpec(seq_len=4096, global_batch_tokens=1 << 21)
    b = batch_of(t, N_8B)
    assert (b.fixed_seqs, b.cap_seqs) == (512, 0)


def test_a_small_model_on_one_gpu_gets_a_small_batch() -> None:
    """Under the old fixed 4 Mi-token cap, a 0.5B model on 1 GPU took 256 accumulation steps
    of 2 sequences (a 43 s step); the law gives it the batch its compute budget calls for."""
    req = PlanRequest.model_validate(
        {"model": QWEN2_05B, "cluster": {"num_gpus": 1}, "training": {"seq_len": 8192}}
    )
    res = plan(req)
    assert res.batch is not None and res.batch.source is BatchSource.SCALING_LAW
    n = res.num_parameters.active
    expected = 0.2920 * (6 * n * 20 * n) ** 0.3271
    assert res.batch.cap_tokens == math.floor(expected / 8192) * 8192
    assert res.performance is not None
    assert res.performance.global_batch_tokens <= res.batch.cap_tokens < 4_194_304 // 4
    assert res.config is not None and res.config.num_microbatches < 64


def test_plan_states_an_explicit_cap() -> None:
    req = PlanRequest.model_validate(
        {
            "model": {"preset": "llama3-8b"},
            "cluster": {"num_gpus": 8},
            "training": {"seq_len": 4096, "critical_batch_tokens": 1 << 20},
        }
    )
    res = plan(req)
    assert res.batch is not None and res.batch.source is BatchSource.CRITICAL_BATCH
    assert res.performance is not None and res.performance.global_batch_tokens == 1 << 20
