"""ScalingCurve in-process: the envelope never decreases, every cell trains the stated batch,
pins hold in every cell, the knee and the cache, and bad input naming its field."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshplan.solver import EvaluateRequest, evaluate
from meshplan.solver.scheduler import (
    AnswerCache,
    Budget,
    CellStatus,
    CurveRequest,
    QueryStopped,
    SchedulerInputError,
    cache_key,
    scaling_curve,
)
from meshplan.solver.scheduler.answers import Cell
from meshplan.solver.scheduler.curve import efficiency, envelope_at, knee

SMALL = {
    "num_layers": 4,
    "hidden_size": 512,
    "num_attention_heads": 8,
    "num_kv_heads": 4,
    "ffn_hidden_size": 1536,
    "vocab_size": 32000,
}


def curve(**kw: object) -> CurveRequest:
    base = {
        "model": SMALL,
        "training": {"seq_len": 2048},
        "clusters": [{"gpu": "h100-sxm-80gb"}],
        "grid": {"counts": [1, 2, 4, 8]},
        "batch": {"kind": "FIXED_GLOBAL", "global_batch_tokens": 2048 * 64},
    }
    return CurveRequest.model_validate({**base, **kw})


def _check_envelope(res) -> None:  # noqa: ANN001
    for s in res.clusters:
        cells = [c for c in res.cells if c.cluster == s.cluster]
        assert [c.num_gpus for c in cells] == sorted(c.num_gpus for c in cells)
        prev = 0.0
        for c in cells:
            assert c.envelope_goodput_tokens_per_s >= prev  # never decreases
            prev = c.envelope_goodput_tokens_per_s
            assert c.envelope_goodput_tokens_per_s == pytest.approx(envelope_at(cells, c.num_gpus))
            assert c.envelope_num_gpus <= c.num_gpus
            if c.status is CellStatus.PLANNED:
                assert c.envelope_goodput_tokens_per_s >= c.goodput_tokens_per_s
                assert c.num_gpus_used <= c.num_gpus


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    layers=st.integers(2, 8),
    heads=st.sampled_from([4, 8, 16]),
    head_dim=st.sampled_from([64, 128]),
    counts=st.lists(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 24, 32]), min_size=2, max_size=4),
    seqs=st.sampled_from([12, 32, 48, 64]),
    policy=st.sampled_from(["FIXED_GLOBAL", "FREE"]),
    gpu=st.sampled_from(["h100-sxm-80gb", "a100-sxm-40gb"]),
)
def test_the_envelope_never_decreases_and_a_fixed_batch_is_trained_exactly(
    layers: int, heads: int, head_dim: int, counts: list[int], seqs: int, policy: str, gpu: str
) -> None:
    model = {**SMALL, "num_layers": layers, "num_attention_heads": heads, "num_kv_heads": heads,
             "hidden_size": heads * head_dim, "ffn_hidden_size": 4 * heads * head_dim}  # fmt: skip
    batch = {"kind": policy}
    if policy == "FIXED_GLOBAL":
        batch["global_batch_tokens"] = seqs * 1024
    req = curve(model=model, training={"seq_len": 1024}, grid={"counts": counts},
                clusters=[{"gpu": gpu}], batch=batch)  # fmt: skip
    res = scaling_curve(req)
    assert len(res.cells) == len(set(counts))
    _check_envelope(res)
    for c in res.cells:
        if c.status is not CellStatus.PLANNED:
            assert c.reason
            continue
        cfg = c.config
        tokens = cfg.dp * cfg.micro_batch_size * cfg.num_microbatches * 1024
        assert tokens == c.global_batch_tokens
        if policy == "FIXED_GLOBAL":
            assert tokens == seqs * 1024
        ev = evaluate(
            EvaluateRequest.model_validate(
                {"model": model, "cluster": {"gpu": gpu, "num_gpus": c.num_gpus_used},
                 "training": {"seq_len": 1024, "global_batch_tokens": tokens}, "config": cfg}
            )
        )  # fmt: skip
        assert ev.fits, ev.violations
        assert ev.performance.tokens_per_s == pytest.approx(c.tokens_per_s)


def test_per_replica_cells_train_dp_times_the_replica_batch() -> None:
    res = scaling_curve(
        curve(batch={"kind": "FIXED_PER_REPLICA", "per_replica_batch_tokens": 2048 * 8})
    )
    planned = [c for c in res.cells if c.status is CellStatus.PLANNED]
    assert len(planned) >= 3
    for c in planned:
        assert c.global_batch_tokens == c.config.dp * 2048 * 8


def test_goodput_is_throughput_times_pollux_efficiency() -> None:
    se = {"noise_scale_tokens": 2.0e5, "reference_batch_tokens": 2048 * 16}
    res = scaling_curve(curve(batch={"kind": "FREE", "max_global_batch_tokens": 2048 * 64,
                                     "statistical_efficiency": se}))  # fmt: skip
    for c in res.cells:
        if c.status is CellStatus.PLANNED:
            eff = (2.0e5 + 2048 * 16) / (2.0e5 + c.global_batch_tokens)
            assert c.statistical_efficiency == pytest.approx(eff)
            assert c.goodput_tokens_per_s == pytest.approx(c.tokens_per_s * eff)
            assert c.global_batch_tokens <= 2048 * 64
    assert efficiency(curve().batch, 123) == 1.0  # no efficiency stated: goodput = throughput


def test_pins_hold_in_every_cell_and_a_count_they_cannot_use_says_so() -> None:
    res = scaling_curve(curve(search={"tp": 2}))
    one = res.cells[0]
    assert one.num_gpus == 1 and one.status is CellStatus.COUNT_NOT_USABLE
    assert "search.tp" in one.reason
    assert all(c.config.tp == 2 for c in res.cells if c.status is CellStatus.PLANNED)


def test_a_count_that_cannot_split_the_batch_is_not_usable() -> None:
    req = curve(batch={"kind": "FIXED_GLOBAL", "global_batch_tokens": 2048 * 3},
                search={"tp": 1, "pp": 1, "cp": 1}, grid={"counts": [1, 2, 3]})  # fmt: skip
    by_n = {c.num_gpus: c for c in scaling_curve(req).cells}
    assert by_n[2].status is CellStatus.COUNT_NOT_USABLE and "split" in by_n[2].reason
    assert by_n[3].status is CellStatus.PLANNED and by_n[3].config.dp == 3


def _cells(values: list[float]) -> list[Cell]:
    return [
        Cell(cluster="x", num_gpus=1 << i, status=CellStatus.PLANNED, goodput_tokens_per_s=v)
        for i, v in enumerate(values)
    ]


def test_knee_is_the_first_count_after_which_every_doubling_gains_less_than_the_threshold() -> None:
    assert knee(_cells([1.0, 2.0, 3.0, 3.1, 3.2, 3.25]), 0.05) == 4  # 3 -> 3.1 -> 3.2 -> 3.25
    assert knee(_cells([1.0, 2.0, 4.0, 8.0]), 0.05) == 0  # still doubling: not within the grid
    assert knee(_cells([1.0, 1.01, 1.5, 1.51]), 0.05) == 4  # 1 -> 1.01 is flat, 1.01 -> 1.5 is not
    assert knee(_cells([1.0, 1.01, 1.5, 1.51]), 0.6) == 1


def test_summary_scale_unit_and_largest_useful_count() -> None:
    res = scaling_curve(curve(grid={"counts": [1, 2, 4, 8, 16, 32, 64]}))
    s = res.clusters[0]
    best = max((c for c in res.cells if c.status is CellStatus.PLANNED),
               key=lambda c: (c.goodput_tokens_per_s, -c.num_gpus))  # fmt: skip
    assert s.scale_unit_gpus == best.config.tp * best.config.pp * best.config.cp
    assert s.largest_useful_gpus == best.num_gpus_used
    assert s.peak_goodput_tokens_per_s == best.goodput_tokens_per_s
    assert s.min_feasible_gpus == min(
        c.num_gpus for c in res.cells if c.status is CellStatus.PLANNED
    )


def test_the_same_request_gives_the_same_answer_from_the_cache() -> None:
    req = curve()
    cache: AnswerCache = AnswerCache(4)
    first = scaling_curve(req, cache=cache)
    t0 = time.perf_counter()
    again = scaling_curve(CurveRequest.model_validate(req.model_dump()), cache=cache)
    assert time.perf_counter() - t0 < 0.05  # a lookup, not 4 solves
    assert again is first and cache.hits == 1
    cold = scaling_curve(req)
    assert cold.model_dump_json() == first.model_dump_json()  # same request, same bytes
    assert first.cache_key == cache_key("curve", req)
    other = curve(grid={"counts": [1, 2, 4]})
    assert cache_key("curve", other) != first.cache_key


def test_the_cache_is_bounded() -> None:
    cache: AnswerCache = AnswerCache(2)
    for k in "abc":
        cache.put(k, k)
    assert len(cache) == 2 and cache.get("a") is None and cache.get("c") == "c"


def test_a_stopped_or_late_query_stops() -> None:
    stop = threading.Event()
    stop.set()
    with pytest.raises(QueryStopped) as err:
        scaling_curve(curve(), Budget(stop=stop))
    assert err.value.cancelled
    with pytest.raises(QueryStopped) as err:
        scaling_curve(curve(), Budget(deadline=time.monotonic() - 1))
    assert not err.value.cancelled


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"grid": {"counts": [8, 2048]}, "clusters": [{"max_gpus": 1024}]}, "grid.counts[1]"),
        ({"grid": {"max_nodes": 200}, "clusters": [{"max_gpus": 1024}]}, "grid.max_nodes"),
        ({"grid": {}}, "grid"),
        ({"grid": {"counts": [0, 8]}}, "grid.counts[0]"),
        ({"clusters": []}, "clusters"),
        ({"clusters": [{"gpu": "no-such-gpu"}]}, "clusters[0].gpu"),
        ({"clusters": [{"gpu": "h100-sxm-80gb"}, {"gpu": "h100-sxm-80gb"}]}, "clusters[1].name"),
        ({"training": {"seq_len": 2048, "global_batch_tokens": 4096}}, "training.global_batch_tokens"),
        ({"batch": {"kind": "FIXED_GLOBAL"}}, "batch.global_batch_tokens"),
        ({"batch": {"kind": "FIXED_GLOBAL", "global_batch_tokens": 1000}}, "batch.global_batch_tokens"),
        ({"batch": {"kind": "FREE", "global_batch_tokens": 4096}}, "batch.global_batch_tokens"),
        ({"model": {"preset": "no-such-model"}}, "model.preset"),
        ({"search": {"tp": 3}}, "search.tp"),
        ({"observations": [{"cluster": "h100-sxm-80gb", "num_gpus": 16, "step_time_s": 1.0,
                            "config": {"tp": 1, "pp": 1, "dp": 16, "micro_batch_size": 1,
                                       "num_microbatches": 4}}]}, "observations[0].num_gpus"),
        ({"observations": [{"cluster": "b200", "num_gpus": 8, "step_time_s": 1.0,
                            "config": {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1,
                                       "num_microbatches": 8}}]}, "observations[0].cluster"),
        ({"observations": [{"cluster": "h100-sxm-80gb", "num_gpus": 8, "step_time_s": 1.0,
                            "config": {"tp": 3, "pp": 1, "dp": 1, "micro_batch_size": 1,
                                       "num_microbatches": 8}}]}, "observations[0].config"),
    ],
)  # fmt: skip
def test_bad_input_names_its_field(change: dict, field: str) -> None:
    with pytest.raises(SchedulerInputError) as err:
        scaling_curve(curve(**change))
    assert err.value.field == field, str(err.value)
