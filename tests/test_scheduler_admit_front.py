"""SmallestAllocation equals a brute-force walk over the curve; TrainingFront has no dominated
and no missing point against brute force over the same cells."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshplan.solver.scheduler import (
    AdmitRequest,
    AnswerCache,
    CellStatus,
    FrontRequest,
    SchedulerInputError,
    scaling_curve,
    smallest_allocation,
    training_front,
)
from meshplan.solver.scheduler.admit import curve_request
from meshplan.solver.scheduler.front import curve_request as front_curve
from meshplan.solver.scheduler.front import non_dominated

CURVES: AnswerCache = AnswerCache(8)  # the tests share curves: the walk and its brute force
MODEL = {"preset": "llama3-8b"}
BATCH = {"kind": "FIXED_GLOBAL", "global_batch_tokens": 4096 * 256}
CLUSTERS = [
    {"gpu": "h100-sxm-80gb", "max_gpus": 64, "price_per_gpu_hour": 3.0},
    {"gpu": "a100-sxm-80gb", "max_gpus": 48, "price_per_gpu_hour": 1.2},
]


def admit(**kw: object) -> AdmitRequest:
    base = {"model": MODEL, "training": {"seq_len": 4096}, "batch": BATCH, "clusters": CLUSTERS,
            "work": {"tokens": 20_000_000_000}, "deadline_s": 2 * 86400.0,
            "startup_overhead_s": 900.0, "downtime_fraction": 0.05}  # fmt: skip
    return AdmitRequest.model_validate({**base, **kw})


def brute_force(req: AdmitRequest) -> dict[str, tuple[int, float] | None]:
    """Per type: (GPUs, finish) of the allocation the objective prefers, straight from the cells."""
    curve = scaling_curve(curve_request(req), cache=CURVES)
    out = {}
    for t in req.clusters:
        best = None
        for c in curve.cells:
            if (
                c.cluster != t.label
                or c.status is not CellStatus.PLANNED
                or c.num_gpus > t.max_gpus
            ):
                continue
            rate = c.band_low_tokens_per_s if req.use_band_upper else c.tokens_per_s
            if req.work.tokens:
                run = req.work.tokens / (rate * c.statistical_efficiency)
            else:
                run = req.work.steps * c.global_batch_tokens / rate
            fin = req.startup_overhead_s + run / (1 - req.downtime_fraction)
            if fin > req.deadline_s:
                continue
            hours = c.num_gpus_used * fin / 3600
            key = {
                "FEWEST_GPUS": (c.num_gpus_used, fin),
                "CHEAPEST": (hours * t.price_per_gpu_hour, c.num_gpus_used, fin),
                "FEWEST_GPU_HOURS": (hours, c.num_gpus_used, fin),
            }[req.objective.value]
            if best is None or key < best[0]:
                best = (key, c.num_gpus_used, fin)
        out[t.label] = None if best is None else (best[1], best[2])
    return out


@pytest.mark.parametrize(
    "change",
    [
        {},
        {"objective": "CHEAPEST"},
        {"objective": "FEWEST_GPU_HOURS", "use_band_upper": True},
        {"deadline_s": 12 * 3600.0},
        {"deadline_s": 3600.0},  # nobody makes it
        {"work": {"steps": 5000}, "deadline_s": 86400.0},
    ],
)
def test_smallest_allocation_equals_a_brute_force_walk(change: dict) -> None:
    req = admit(**change)
    res = smallest_allocation(req, curves=CURVES)
    expect = brute_force(req)
    for a in res.allocations:
        want = expect[a.cluster]
        if want is None:
            assert a.status.value != "MEETS_DEADLINE"
            assert a.reason
        else:
            assert a.status.value == "MEETS_DEADLINE"
            assert (a.num_gpus, a.finish_s) == (want[0], pytest.approx(want[1]))
            assert a.finish_s <= res.time_available_s
    assert res.feasible == any(v is not None for v in expect.values())
    if res.feasible:
        ok = [a for a in res.allocations if a.status.value == "MEETS_DEADLINE"]
        assert res.pick in ok
    else:
        assert res.pick is None and "earliest finish" in res.reason


def test_a_deadline_in_the_past_or_missing_is_bad_input() -> None:
    with pytest.raises(SchedulerInputError) as err:
        smallest_allocation(admit(deadline_s=0.0, deadline_unix_s=1000.0, now_unix_s=2000.0))
    assert err.value.field == "deadline_unix_s" and "past" in err.value.description
    with pytest.raises(SchedulerInputError) as err:
        smallest_allocation(admit(deadline_s=0.0))
    assert err.value.field == "deadline_s"
    with pytest.raises(SchedulerInputError) as err:
        smallest_allocation(admit(work={"tokens": 1, "steps": 1}))
    assert err.value.field == "work"


def test_a_type_whose_memory_floor_is_above_what_is_available_does_not_fit() -> None:
    res = smallest_allocation(admit(model={"preset": "llama3-70b"},
                                    clusters=[{"gpu": "a100-sxm-40gb", "max_gpus": 4}]))  # fmt: skip
    (a,) = res.allocations
    assert a.status.value == "DOES_NOT_FIT" and "GiB" in a.reason
    assert not res.feasible


def front(**kw: object) -> FrontRequest:
    base = {"model": MODEL, "training": {"seq_len": 4096}, "batch": {"kind": "FREE"},
            "clusters": [{"gpu": "h100-sxm-80gb", "price_per_gpu_hour": 3.0},
                         {"gpu": "a100-sxm-80gb", "price_per_gpu_hour": 1.2}],
            "grid": {"max_nodes": 6, "sub_node": True}, "token_budget": 10**11}  # fmt: skip
    return FrontRequest.model_validate({**base, **kw})


def _dominated(p: tuple[float, float], others: list[tuple[float, float]]) -> bool:
    return any(q[0] <= p[0] and q[1] <= p[1] and q != p for q in others)


def test_the_front_has_no_dominated_and_no_missing_point() -> None:
    res = training_front(front(), curves=CURVES)
    assert res.priced and len(res.points) >= 10
    for axis, flag in (("gpu_hours", "on_front_gpu_hours"), ("cost", "on_front_cost")):
        xy = [(p.days, getattr(p, axis)) for p in res.points]
        for p, q in zip(res.points, xy, strict=True):
            assert getattr(p, flag) == (not _dominated(q, xy)), (p.cluster, p.num_gpus_used)
    curve = scaling_curve(front_curve(front()), cache=CURVES)  # the cells the front read
    planned = {(c.cluster, c.num_gpus_used) for c in curve.cells if c.status is CellStatus.PLANNED}
    assert {(p.cluster, p.num_gpus_used) for p in res.points} == planned
    for p in res.points:
        assert p.days == pytest.approx(10**11 / p.goodput_tokens_per_s / 86400)


def test_the_front_marks_where_the_critical_batch_binds() -> None:
    res = training_front(front(training={"seq_len": 4096, "critical_batch_tokens": 4096 * 16},
                               clusters=[{"gpu": "h100-sxm-80gb"}]))  # fmt: skip
    (c,) = res.clusters
    assert not res.priced and not any(p.on_front_cost for p in res.points)
    walls = {p.num_gpus: p.binding_wall.value for p in res.points}
    capped = sorted(n for n, w in walls.items() if w == "DP_CAP")
    assert c.critical_batch_gpus == (capped[0] if capped else 0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=25))
def test_the_sweep_matches_brute_force_dominance(pts: list[tuple[int, int]]) -> None:
    xy = [(float(x), float(y)) for x, y in pts]
    assert non_dominated(xy) == [not _dominated(p, xy) for p in xy]
