"""Terms that grow with the job: stragglers, the dp tail no overlap hides, and what hidden dp
traffic costs the compute it hides behind; each only where the profile overlaps the traffic."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from meshplan.solver.arch import resolve_model
from meshplan.solver.costmodel import CostModel, Point
from meshplan.solver.costmodel.constants import Constants, load_constants
from meshplan.solver.costmodel.dp_timing import _tail
from meshplan.solver.costmodel.point import Layout, Rows
from meshplan.solver.hardware import resolve_cluster
from meshplan.solver.schema import (
    ClusterSpec,
    ModelSpec,
    ParallelConfig,
    Recompute,
    SearchSpec,
    TrainingSpec,
)

LLAMA8 = ModelSpec(preset="llama3-8b")


def model(gpus: int, constants: Constants | None = None, **training: object) -> CostModel:
    A = resolve_model(LLAMA8)
    H = resolve_cluster(ClusterSpec(gpu="h100-sxm-80gb", num_gpus=gpus))
    t = TrainingSpec(seq_len=4096, global_batch_tokens=4096 * gpus * 4, **training)
    return CostModel(A, H, t, SearchSpec(), constants)


def point(dp: int, z: int = 1) -> Point:
    return Point.from_config(
        ParallelConfig(
            tp=1,
            pp=1,
            dp=dp,
            micro_batch_size=1,
            num_microbatches=4,
            zero_stage=z,
            recompute=Recompute.NONE,
        )
    )


def test_stragglers_grow_as_the_expected_maximum_of_n_gpus() -> None:
    cm = model(1024)
    R, k = cm.rates, cm.ctx.K
    assert R.straggle(Layout(1, 1, 1, 1, 1, False)) == 0.0
    for n in (8, 256, 1024):
        want = k.jitter * math.sqrt(2 * math.log(n))
        assert R.straggle(Layout(1, 1, 1, n, n, False)) == want
    lays = [Layout(1, 1, 1, n, n, False) for n in (8, 1024, 8, 256)]
    rows = Rows.of(lays)  # a row computes the same bits alone as among others
    assert list(R.straggle(rows)) == [R.straggle(x) for x in lays]


def _dp(cm: CostModel, p: Point) -> float:
    return cm.time_per_token(p)["dp_comm"] * cm.tokens(p)


def test_the_last_bucket_stays_exposed_where_the_rest_hides() -> None:
    # omega at its prior: the fitted value moves with each refit, and this layout sits near the
    # point where the overlap stops hiding the rest
    cm = model(64, replace(load_constants(), jitter=0.0, overlap_tax=0.0, omega=0.8))
    p = point(64)
    comm, credit = cm.dp[1]
    assert comm.float_value(p) < credit.float_value(p)  # the overlap hides the rest
    tail = float(_tail(cm.ctx, p.lay, cm.rates, 1)) / (p.b * p.M) * cm.tokens(p)
    assert tail > 0
    assert _dp(cm, p) == pytest.approx(tail)  # one bucket's reduce-scatter and all-gather


def test_no_tail_and_no_tax_where_the_traffic_is_not_overlapped() -> None:
    zero_jitter = replace(load_constants(), jitter=0.0)
    on_k = model(64, zero_jitter, dp_comm_overlap=True)
    off_k = model(64, zero_jitter, dp_comm_overlap=False)
    p = point(64)
    comm, _ = off_k.dp[1]
    # unoverlapped: the whole traffic, once, no tail and no tax on top
    assert _dp(off_k, p) == pytest.approx(comm.float_value(p) * off_k.tokens(p))
    # overlapped: the traffic mostly hides; what is left is the tail and the tax, both > 0
    exposed = _dp(on_k, p)
    assert 0 < exposed < _dp(off_k, p)
    untaxed = model(64, replace(zero_jitter, overlap_tax=0.0), dp_comm_overlap=True)
    assert _dp(untaxed, p) < exposed  # the tax is a cost of overlapping


def test_a_bigger_job_loses_more_to_stragglers() -> None:
    small, big = model(16), model(1024)
    s = small.performance(point(16)).breakdown.dp_comm_s / small.performance(point(16)).step_time_s
    b = big.performance(point(1024)).breakdown.dp_comm_s / big.performance(point(1024)).step_time_s
    assert b > s
