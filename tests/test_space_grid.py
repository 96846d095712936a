"""Spaces that share their grid key (the model, framework, sequence length, precision, pins, GPUs
per node and count, batch) share their layouts and axis values (`cache.grid`): a space built from
a grid another request left in the cache equals one built with the cache empty, and requests
that differ in what the grid reads get grids of their own."""

from __future__ import annotations

import pytest

from meshplan.solver import cache
from meshplan.solver.planner import _resolve
from meshplan.solver.schema import PlanRequest
from meshplan.solver.space import Space

FIELDS = ("all_layouts", "layouts", "db_all", "db", "te_all", "te", "pv", "rs", "zs")


def _req(model: str, gpu: str, n: int, seq: int = 4096, **kw: dict) -> PlanRequest:
    return PlanRequest.model_validate(
        {
            "model": {"preset": model},
            "cluster": {"gpu": gpu, "num_gpus": n, **kw.get("cluster", {})},
            "training": {"seq_len": seq, **kw.get("training", {})},
            "search": kw.get("search", {}),
        }
    )


def _build(req: PlanRequest, prune: bool = False) -> Space:
    A, H, cm = _resolve(req)
    return Space.build(A, H, req.training, req.search, cm, prune=prune)


def _fields(sp: Space) -> dict:
    return {f: getattr(sp, f) for f in FIELDS}


CASES = [  # (request built first, request read from the grid it left: same key, other GPU type)
    (_req("llama3-70b", "h100-sxm-80gb", 64), _req("llama3-70b", "a100-sxm-80gb", 64)),
    (_req("mixtral-8x7b", "h100-sxm-80gb", 128), _req("mixtral-8x7b", "b200-192gb", 128)),
    (
        _req("llama3-8b", "h100-sxm-80gb", 48, search={"allow_fewer_gpus": True, "zero_stage": 3}),
        _req("llama3-8b", "h200-141gb", 48, search={"allow_fewer_gpus": True, "zero_stage": 3}),
    ),
]


@pytest.mark.parametrize("first, second", CASES, ids=["dense", "moe", "fewer-gpus-pinned"])
@pytest.mark.parametrize("prune", [False, True], ids=["unpruned", "pruned"])
def test_a_grid_from_the_cache_gives_the_space_built_afresh(
    first: PlanRequest, second: PlanRequest, prune: bool
) -> None:
    cache.clear()
    fresh = _fields(_build(second, prune))
    cache.clear()
    _build(first, prune)
    assert cache.info()["grids"] == 1
    shared = _fields(_build(second, prune))
    assert cache.info()["grids"] == 1  # read, not built again
    assert shared == fresh and shared["layouts"]
    cache.clear()


@pytest.mark.parametrize(
    "other",
    [
        _req("llama3-70b", "h100-sxm-80gb", 32),  # the count
        _req("llama3-70b", "h100-sxm-80gb", 64, seq=8192),  # the sequence length
        _req("llama3-70b", "h100-sxm-80gb", 64, search={"tp": 4}),  # a pin
        _req("llama3-70b", "h100-sxm-80gb", 64, cluster={"gpus_per_node": 4}),  # tp's reach
        _req("llama3-70b", "h100-sxm-80gb", 64, training={"global_batch_tokens": 4096 * 64}),
        _req("llama3-70b", "h100-sxm-80gb", 64, training={"framework": "DEEPSPEED"}),
    ],
    ids=["count", "seq_len", "pin", "gpus-per-node", "batch", "framework"],
)
def test_what_the_grid_reads_keys_it(other: PlanRequest) -> None:
    cache.clear()
    base = _fields(_build(_req("llama3-70b", "h100-sxm-80gb", 64)))
    got = _fields(_build(other))
    assert cache.info()["grids"] == 2
    cache.clear()
    assert got == _fields(_build(other)) and got != base
    cache.clear()
