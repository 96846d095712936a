"""The explanation of an infeasible plan runs under the solve's deadline and stop event, and its
search for the smallest cluster stays within the schema's cap on cluster.num_gpus."""

from __future__ import annotations

import threading
import time

import pytest
from pydantic import ValidationError

from meshplan.solver import PlanRequest, plan
from meshplan.solver import explain as explain_module
from meshplan.solver.explain import max_gpus
from meshplan.solver.results import PlanStatus
from meshplan.solver.schema import ClusterSpec

# Infeasible at once (6 GiB of HBM), but the smallest cluster that fits is 6144 GPUs (under the
# default MEGATRON profile): the explanation's search rebuilds the space a dozen times (about
# 1.3 s, measured on a loaded machine).
SLOW_EXPLANATION = {
    "model": {"preset": "deepseek-v3"},
    "cluster": {"num_gpus": 24, "hbm_gib": 6},
    "search": {"memory_reserve_gib": 3.0},  # the reserve its 6144-GPU answer was found with
}


def test_no_cluster_fits_is_infeasible_with_its_reason_not_a_crash() -> None:
    # Every degree pinned: only 8192 GPUs can hold this layout, and it needs 274 GiB per GPU
    # (ZeRO-1: Megatron's distributed optimizer is what it runs with pipelining).
    req = PlanRequest.model_validate(
        {
            "model": {"preset": "llama3-405b"},
            "cluster": {"num_gpus": 8192},
            "training": {"seq_len": 32768, "global_batch_tokens": 32768 * 2048},
            "search": {"tp": 8, "pp": 16, "dp": 64, "cp": 1, "zero_stage": 1, "recompute": "NONE"},
        }
    )
    result = plan(req)
    assert result.status == PlanStatus.INFEASIBLE
    assert result.explanation is not None and result.explanation.min_gpus == 0
    assert "no cluster of up to 1,048,576 GPUs fits" in result.explanation.reason
    assert "even tp=8, pp=16" in result.explanation.reason


def test_the_search_cap_is_the_schemas() -> None:
    assert max_gpus() == 1_048_576
    ClusterSpec(num_gpus=max_gpus())
    with pytest.raises(ValidationError):
        ClusterSpec(num_gpus=max_gpus() + 1)


def test_the_explanation_keeps_to_the_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The search for the smallest cluster tries many sizes; each try made 0.1 s slower, it
    cannot finish in the limit and must say so on time."""
    original = explain_module.feasible_at

    def slow(*args: object, **kwargs: object) -> bool:
        time.sleep(0.1)
        return original(*args, **kwargs)

    monkeypatch.setattr(explain_module, "feasible_at", slow)
    limit = 0.3  # the solve proves infeasibility in ~0.05 s
    req = PlanRequest.model_validate({**SLOW_EXPLANATION, "options": {"time_limit_s": limit}})
    started = time.perf_counter()
    result = plan(req)
    took = time.perf_counter() - started
    assert result.status == PlanStatus.INFEASIBLE
    assert took < limit + 0.4, f"{took:.2f} s for a {limit} s limit"
    assert result.explanation is not None and result.explanation.min_gpus == 0
    assert "stopped the search" in result.explanation.reason


def test_the_explanation_stops_with_the_stop_event(monkeypatch: pytest.MonkeyPatch) -> None:
    stop = threading.Event()
    stopped_at: list[float] = []
    original = explain_module.feasible_at

    def stop_during_the_search(*args: object, **kwargs: object) -> bool:
        if not stop.is_set():  # the first count the search tries: the call is cancelled now
            stop.set()
            stopped_at.append(time.perf_counter())
        return original(*args, **kwargs)

    monkeypatch.setattr(explain_module, "feasible_at", stop_during_the_search)
    req = PlanRequest.model_validate({**SLOW_EXPLANATION, "options": {"time_limit_s": 60}})
    result = plan(req, stop_event=stop)
    assert stopped_at and time.perf_counter() - stopped_at[0] < 0.5
    assert result.explanation is not None and "stopped the search" in result.explanation.reason
    assert result.explanation.min_gpus == 0


def test_with_time_the_explanation_finds_the_smallest_cluster() -> None:
    req = PlanRequest.model_validate({**SLOW_EXPLANATION, "options": {"time_limit_s": 60}})
    result = plan(req)
    assert result.explanation is not None and result.explanation.min_gpus == 6144
    assert "the smallest cluster that fits is 6144 GPUs" in result.explanation.reason


@pytest.mark.parametrize(
    ("field", "value"),
    [("inter_node_gbps", 1e-12), ("intra_node_gbps", 1e-300), ("peak_bf16_tflops", 1e-9)],
)
def test_tiny_overrides_are_rejected_by_the_schema(field: str, value: float) -> None:
    with pytest.raises(ValidationError) as err:
        ClusterSpec(num_gpus=8, **{field: value})
    assert err.value.errors()[0]["loc"] == (field,)
