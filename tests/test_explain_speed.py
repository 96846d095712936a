"""The fast least-memory computation and the reuse of "fits on k GPUs" across requests give
exactly the explanation the straightforward computation gives: the same words, smallest cluster
and least bytes per GPU."""

from __future__ import annotations

from typing import Any

import pytest

from meshplan.solver import PlanRequest, cache, plan, planner
from meshplan.solver import explain as explain_module
from meshplan.solver.costmodel import Layout, Point
from meshplan.solver.costmodel.model import STAGES
from meshplan.solver.planner import _resolve
from meshplan.solver.results import Explanation, PlanStatus
from meshplan.solver.rules import folds
from meshplan.solver.schema import Recompute
from meshplan.solver.space import Space

H100 = "h100-sxm-80gb"


def _req(model: str, n: int, **kw: Any) -> dict:
    return {
        "model": {"preset": model},
        "cluster": {"gpu": kw.pop("gpu", H100), "num_gpus": n, **kw.pop("cluster", {})},
        "training": {"seq_len": kw.pop("seq_len", 8192), **kw.pop("training", {})},
        "search": kw.pop("search", {}),
        "options": {"time_limit_s": 60},
    }


# Infeasible requests: memory refuses (dense, MoE, pinned, another framework, sub-node counts),
# and a framework rule refuses (no smallest cluster to search).
INFEASIBLE = {
    "70b-8": _req("llama3-70b", 8),
    "405b-64": _req("llama3-405b", 64, seq_len=4096),
    "8x22b-8": _req("mixtral-8x22b", 8),
    "qwen3-16-mi300": _req("qwen3-235b-a22b", 16, gpu="mi300x-192gb"),
    "70b-tp2-z1": _req("llama3-70b", 16, search={"tp": 2, "zero_stage": 1}),
    "405b-deepspeed": _req("llama3-405b", 32, training={"framework": "DEEPSPEED"}),
    "70b-4gpus-small-hbm": _req("llama3-70b", 4, cluster={"hbm_gib": 40}),
    "405b-fewer": _req("llama3-405b", 48, search={"allow_fewer_gpus": True}),
    "megatron-rule": _req(
        "llama3-70b", 64, training={"framework": "MEGATRON"}, search={"pp": 4, "zero_stage": 3}
    ),
}


def _points_by_scans(sp: Space, row: Layout) -> list[Point]:
    """The least-memory point at every ZeRO stage the row runs, as first written: list scans
    over every value of the space."""
    v = sp.search.virtual_stages if row.pp > 1 and sp.search.virtual_stages else 1
    dbs = [x for x in sp.db_all if x[0] == row.dp and sp.pipeline_fits_batch((row.pp, v), x)]
    tes = [x for x in sp.te_all if x[0] == row.tp and folds(row.tp, row.cp, row.dp, *x[1:])]
    if not dbs or not tes:
        return []
    _, b, m = min(dbs, key=lambda x: (x[1], x[2]))
    _, e, et = max(tes, key=lambda x: (x[1] * x[2], x[1]))
    order = [Recompute.FULL, Recompute.SELECTIVE, Recompute.NONE]
    r = min(sp.rs, key=order.index)
    return [Point(row, v, b, m, e, et, r, z) for z in sorted(sp.zero_values(row), reverse=True)]


def _need(sp: Space, p: Point) -> int:
    return max(sp.cm.stage_bytes(p, st) for st in STAGES)


def _point_by_scans(sp: Space, row: Layout) -> Point | None:
    """The point of least memory over every ZeRO stage (the higher on a tie)."""
    return min(_points_by_scans(sp, row), key=lambda p: _need(sp, p), default=None)


def _needs_one_by_one(sp: Space) -> list[tuple[Point, int]]:
    pts = [p for p in (_point_by_scans(sp, r) for r in sp.all_layouts) if p is not None]
    return [(p, _need(sp, p)) for p in pts]


def _frugal(sp: Space, check: object = None) -> tuple[Point, int] | None:
    return min(_needs_one_by_one(sp), key=lambda pn: pn[1], default=None)


def _feasible_at(sp: Space, check: object = None) -> bool:
    return any(need <= sp.cm.budget for _, need in _needs_one_by_one(sp))


def _straightforward(spec: dict, monkeypatch: pytest.MonkeyPatch) -> Explanation | None:
    """The explanation with every least-memory figure computed point by point, and no count's
    answer known beforehand."""
    cache.clear()
    with monkeypatch.context() as m:
        m.setattr(explain_module, "frugal", _frugal)
        m.setattr(explain_module, "feasible_at", _feasible_at)
        m.setattr(cache, "fits_by_count", lambda *a: {})
        r = plan(PlanRequest.model_validate(spec))
    cache.clear()
    return r.explanation


@pytest.mark.parametrize("name", list(INFEASIBLE))
def test_the_explanation_is_the_straightforward_one(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = INFEASIBLE[name]
    want = _straightforward(spec, monkeypatch)
    got = plan(PlanRequest.model_validate(spec))
    assert got.status is PlanStatus.INFEASIBLE and want is not None
    assert got.explanation == want
    again = plan(PlanRequest.model_validate(spec))  # every count it tried now known
    assert again.explanation == want


@pytest.mark.parametrize("name", ["8x22b-8", "405b-deepspeed", "70b-tp2-z1"])
def test_least_memory_points_are_the_scans(name: str) -> None:
    req = PlanRequest.model_validate(INFEASIBLE[name])
    A, H, cm = _resolve(req)
    sp = Space.build(A, H, req.training, req.search, cm, prune=False)
    assert sp.all_layouts
    for row in sp.all_layouts:
        assert sp.least_memory_point(row) == _point_by_scans(sp, row)
    fast = sp.least_memory_needs(kept=False)
    assert fast == _needs_one_by_one(sp)
    assert explain_module.frugal(sp) == _frugal(sp)
    assert explain_module.feasible_at(sp) == _feasible_at(sp)


def test_counts_of_one_job_share_their_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep over GPU counts pays each count's test once, and each answer is the one the
    request gets alone."""
    counts = [8, 16, 24, 32]
    alone = [_straightforward(_req("llama3-405b", n), monkeypatch) for n in counts]
    calls: list[int] = []
    tables: list[int] = []
    real, real_tables = explain_module.feasible_at, planner.Tables
    monkeypatch.setattr(
        explain_module,
        "feasible_at",
        lambda sp, check: calls.append(sp.H.num_gpus) or real(sp, check),
    )
    monkeypatch.setattr(planner, "Tables", lambda sp, *a: tables.append(1) or real_tables(sp, *a))
    swept = [plan(PlanRequest.model_validate(_req("llama3-405b", n))).explanation for n in counts]
    assert swept == alone and all(e is not None and e.min_gpus > 32 for e in swept)
    assert len(calls) == len(set(calls))  # no count tested twice
    assert 8 not in calls  # the first request's own count: its least memory said no
    assert len(tables) < len(counts)  # a count known not to fit is answered without a solve
    assert cache.info()["fit_requests"] == 1 and cache.info()["fit_counts"] > len(calls)
    cache.clear()
    assert cache.info()["fit_requests"] == 0 == cache.info()["fit_counts"]


def _fits_alone(spec: dict, k: int) -> bool:
    """Whether the request fits on k GPUs, computed point by point from nothing kept."""
    req = PlanRequest.model_validate({**spec, "cluster": {**spec["cluster"], "num_gpus": k}})
    A, H, cm = _resolve(req)
    search = req.search.model_copy(update={"allow_fewer_gpus": False})
    return _feasible_at(Space.build(A, H, req.training, search, cm, prune=False))


# tp, pp and cp pinned: memory is tight enough that each field below changes whether the job
# fits on one of `PROBES` GPUs (16: 8, 24, 256: 128 and 256 for the batch caps).
# The probes were chosen with a 3 GiB reserve (the default then): kept, so each field still matters.
TIGHT = {"memory_reserve_gib": 3.0}
PINNED = _req("llama3-70b", 8, search={"tp": 8, "pp": 1, "cp": 1, **TIGHT})
PROBES = (16, 24, 256)
VARIANTS = {
    "model": {"model": {"preset": "llama3-405b"}},
    "gpu": {"cluster": {"gpu": "h200-141gb", "num_gpus": 8}},
    "hbm_gib": {"cluster": {"gpu": H100, "num_gpus": 8, "hbm_gib": 60}},
    "seq_len": {"training": {"seq_len": 131072}},
    "framework": {"training": {"seq_len": 8192, "framework": "DEEPSPEED"}},
    "global_batch": {"training": {"seq_len": 8192, "global_batch_tokens": 8192 * 24}},
    "critical_batch": {"training": {"seq_len": 8192, "critical_batch_tokens": 8192 * 16}},
    "tp": {"search": {"tp": 1, "pp": 1, "cp": 1, **TIGHT}},
    "zero_stage": {"search": {"tp": 8, "pp": 1, "cp": 1, "zero_stage": 0, **TIGHT}},
    "recompute": {"search": {"tp": 8, "pp": 1, "cp": 1, "recompute": "NONE", **TIGHT}},
    "micro_batch": {"search": {"tp": 8, "pp": 1, "cp": 1, "micro_batch_size": 16, **TIGHT}},
    "reserve": {"search": {"tp": 8, "pp": 1, "cp": 1, "memory_reserve_gib": 40}},
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_the_reuse_key_covers_every_field(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    variant = {**PINNED, **VARIANTS[name]}
    assert any(_fits_alone(PINNED, k) != _fits_alone(variant, k) for k in PROBES)  # it matters
    want = _straightforward(variant, monkeypatch)
    base = plan(PlanRequest.model_validate(PINNED)).explanation
    req = PlanRequest.model_validate(variant)
    A, H, cm = _resolve(req)
    assert base is not None and base.min_gpus and cache.info()["fit_requests"] == 1
    assert cache.fits_by_count(cm, req.training, req.search) == {}  # none of the base's answers
    assert plan(req).explanation == want
    assert cache.info()["fit_requests"] == 2
    cache.clear()


def test_the_counts_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    cache.clear()
    from cachetools import LRUCache

    monkeypatch.setattr(cache, "_fits", LRUCache(1))
    plan(PlanRequest.model_validate(INFEASIBLE["70b-8"]))
    assert cache.info()["fit_requests"] == 1
    plan(PlanRequest.model_validate(INFEASIBLE["8x22b-8"]))
    assert cache.info()["fit_requests"] == 1  # the older job's counts dropped
    req = PlanRequest.model_validate(INFEASIBLE["70b-8"])
    A, H, cm = _resolve(req)
    assert cache.fits_by_count(cm, req.training, req.search) == {}
    cache.clear()


def test_a_pinned_virtual_stage_count_is_in_the_least_memory_point() -> None:
    """With virtual_stages pinned, the least-memory point of a pipelined row has that many
    chunks and a micro-batch count the interleaved schedule runs; the explanation names a
    layout the pin allows (pp > 1), never the unpipelined one it forbids."""
    req = PlanRequest.model_validate(_req("llama3-70b", 8, search={"virtual_stages": 2}))
    A, H, cm = _resolve(req)
    sp = Space.build(A, H, req.training, req.search, cm, prune=False)
    pts = [p for p in map(sp.least_memory_point, sp.layouts) if p is not None]
    assert pts and all(p.v == (2 if p.lay.pp > 1 else 1) for p in pts)
    assert all(sp.pipeline_fits_batch((p.lay.pp, p.v), (p.lay.dp, p.b, p.M)) for p in pts)
    got = plan(req)
    assert got.status is PlanStatus.INFEASIBLE and got.explanation is not None
    assert (
        "pp=1," not in got.explanation.reason and "with 2 virtual stages" in got.explanation.reason
    )


def test_the_smallest_cluster_fits_though_a_count_between_does_not() -> None:
    """Bisection over counts assumes more GPUs never hurt; divisibility breaks that (70B with 2
    virtual stages fits 32 GPUs, not 40): the smallest count named is one that plans."""
    pins = {"virtual_stages": 2}
    got = plan(PlanRequest.model_validate(_req("llama3-70b", 24, search=pins)))
    assert got.status is PlanStatus.INFEASIBLE and got.explanation is not None
    assert got.explanation.min_gpus == 32

    def status(n: int) -> PlanStatus:
        return plan(PlanRequest.model_validate(_req("llama3-70b", n, search=pins))).status

    assert status(32) is PlanStatus.OPTIMAL
    assert status(40) is PlanStatus.INFEASIBLE  # where bisection between 24 and 48 looks first


def test_a_planned_count_is_known_to_the_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan's own test of its count (some layout's least-memory point fits, or none does) is
    the answer the explanation's search wants there: kept for the job, that count is not tested
    again, and the explanation is the straightforward one. A space over fewer counts as well
    (allow_fewer_gpus) says nothing of one count and leaves nothing."""
    spec = _req("llama3-405b", 8)
    want = _straightforward(spec, monkeypatch)
    assert want is not None and want.min_gpus > 64
    fits = plan(PlanRequest.model_validate(_req("llama3-405b", want.min_gpus)))
    below = plan(PlanRequest.model_validate(_req("llama3-405b", 64)))
    assert fits.status is PlanStatus.OPTIMAL and below.status is PlanStatus.INFEASIBLE
    req = PlanRequest.model_validate(spec)
    A, H, cm = _resolve(req)
    known = cache.fits_by_count(cm, req.training, req.search)
    assert known[want.min_gpus] is True and known[64] is False
    calls: list[int] = []
    real = explain_module.feasible_at
    monkeypatch.setattr(
        explain_module,
        "feasible_at",
        lambda sp, check: calls.append(sp.H.num_gpus) or real(sp, check),
    )
    assert plan(req).explanation == want
    assert calls and want.min_gpus not in calls and 64 not in calls
    cache.clear()
    fewer = PlanRequest.model_validate(_req("llama3-405b", 256, search={"allow_fewer_gpus": True}))
    assert plan(fewer).status is PlanStatus.OPTIMAL
    A, H, cm = _resolve(fewer)
    assert cache.fits_by_count(cm, fewer.training, fewer.search) == {}
    cache.clear()
