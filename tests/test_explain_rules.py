"""When a framework's rules, not memory, leave no layout, the explanation names the framework
and the rule (solver/explain.py framework_refusal); the evaluate table shows sequence
parallelism only where it means something (tp > 1)."""

from __future__ import annotations

import pytest

from meshplan.solver import evaluate, plan
from meshplan.solver.results import PlanStatus
from meshplan.solver.schema import EvaluateRequest, PlanRequest
from meshplan.tools.render.tables import render_evaluation


def _explain(model: str, framework: str, **pins: object) -> tuple[str, int]:
    req = PlanRequest.model_validate(
        {
            "model": {"preset": model},
            "cluster": {"num_gpus": 64},
            "training": {"framework": framework},
            "search": pins,
        }
    )
    r = plan(req)
    assert r.status is PlanStatus.INFEASIBLE and r.explanation is not None
    return r.explanation.reason, r.explanation.min_gpus


@pytest.mark.parametrize(
    ("model", "framework", "pins", "rule"),
    [
        # Megatron's distributed optimizer is its only sharding with pipelining
        ("llama3-70b", "MEGATRON", {"pp": 4, "zero_stage": 3}, "with pipelining, not zero_stage 3"),
        # DeepSpeed's PipelineModule runs one stage per rank
        ("llama3-70b", "DEEPSPEED", {"virtual_stages": 2}, "no interleaved pipeline"),
        ("llama3-70b", "DEEPSPEED", {"cp": 2}, "no context parallelism"),
        # KempnerForge rejects tied embeddings with pipelining (GPT-3 ties them)
        ("gpt3-175b", "KEMPNERFORGE", {"pp": 4}, "tied embeddings with pp > 1"),
    ],
)
def test_a_framework_rule_is_named(model: str, framework: str, pins: dict, rule: str) -> None:
    text, min_gpus = _explain(model, framework, **pins)
    assert f"training.framework {framework}" in text
    assert rule in text
    assert "factorisation" not in text and "GiB" not in text  # neither batch nor memory wording
    assert min_gpus == 0  # no cluster size lifts a framework rule


def test_memory_is_still_explained_as_memory() -> None:
    text, min_gpus = _explain("llama3-405b", "MEGATRON")
    assert text.startswith("even tp=") and "GiB per GPU" in text
    assert min_gpus > 64


def _table(tp: int, dp: int) -> str:
    req = EvaluateRequest.model_validate(
        {
            "model": {"preset": "llama3-8b"},
            "cluster": {"num_gpus": 8},
            "config": {"tp": tp, "pp": 1, "dp": dp, "micro_batch_size": 1, "num_microbatches": 4},
        }
    )
    return render_evaluation(req, evaluate(req))


def test_sequence_parallel_is_shown_only_with_tp() -> None:
    assert "sequence_parallel" not in _table(1, 8)
    assert "sequence_parallel=true" in _table(2, 4)
