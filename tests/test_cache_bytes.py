"""Caches bounded in bytes: the planner's spaces and grids by the layouts they hold, the scheduler
answers by their weight; an entry heavier than the whole bound is used, not kept."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import numpy as np
import pytest
from cachetools import LRUCache

from meshplan.server.pool import ProcessRunner
from meshplan.server.settings import Settings
from meshplan.solver import cache, rowmemo
from meshplan.solver.planner import plan
from meshplan.solver.scheduler.cache import AnswerCache, curve_bytes
from meshplan.solver.schema import PlanRequest


def _request(num_gpus: int) -> PlanRequest:
    return PlanRequest.model_validate(
        {"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": num_gpus},
         "training": {"seq_len": 4096}, "options": {"time_limit_s": 5}}
    )  # fmt: skip


def test_spaces_are_kept_within_their_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    cache.clear()
    plan(_request(64))
    one = cache.info()["space_bytes"]
    assert one > cache.SPACE_BASE_BYTES  # weighed by its layouts
    bound = int(one * 1.5)  # room for one such space, not two
    monkeypatch.setattr(cache, "_spaces", LRUCache(bound, getsizeof=cache._space_bytes))
    for n in (64, 128, 256):
        assert plan(_request(n)).config is not None
        assert cache.info()["space_bytes"] <= bound and cache.info()["spaces"] == 1
    cache.clear()


def test_the_answer_cache_weighs_its_answers() -> None:
    answers: AnswerCache[bytes] = AnswerCache(100, len)
    answers["a"], answers["b"] = b"x" * 60, b"y" * 30
    answers["c"] = b"z" * 30  # 120 bytes: the least recently used ("a") goes
    assert answers.get("a") is None and answers.size == 60
    answers["huge"] = b"w" * 101  # heavier than the whole bound: not kept, nothing dropped
    assert answers.get("huge") is None and len(answers) == 2

    class Curve:
        cells = [None] * 4096

    assert curve_bytes(Curve()) > 19e6  # a 4,096-cell curve holds ~20 MB as objects


def _held_array_bytes(memo: dict) -> int:
    """The bytes of the distinct arrays a memo's values hold (their bases, once each)."""
    bases: dict[int, int] = {}

    def walk(v: object) -> None:
        if isinstance(v, np.ndarray):
            b = v
            while isinstance(b.base, np.ndarray):
                b = b.base
            bases[id(b)] = min(b.nbytes, bases.get(id(b), b.nbytes))
        elif isinstance(v, (tuple, list)):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)

    for v in memo.values():
        walk(v)
    return sum(bases.values())


@pytest.fixture
def small_caches() -> Iterator[int]:
    bound = 16 * 2**20
    cache.configure(bound)
    yield bound
    cache.configure(cache.DEFAULT_BYTES)


def test_a_process_planning_distinct_requests_stays_within_its_bound(small_caches: int) -> None:
    """The distinct mix planned in one process with the caches bounded at 16 MiB: after every
    plan the counted bytes of the rows, tables, spaces and grids stay within their bounds
    (their sum within the whole), the rows' count is honest (at least the arrays their memos
    hold) and rows dropped from the cache while a space still holds them hold no tables; the
    answers are those of a process with the default bounds."""
    from benchmarks.suite import distinct_requests

    reqs = distinct_requests(40, time_limit_s=10.0)
    small = []
    for req in reqs:
        res = plan(req)
        small.append((res.status, res.config, res.performance))
        info = cache.info()
        assert info["row_bytes"] <= rowmemo.MAX_ROW_BYTES
        assert info["table_bytes"] <= cache.MAX_TABLE_BYTES
        assert info["space_bytes"] <= cache.MAX_SPACE_BYTES
        assert info["grid_bytes"] <= cache.MAX_GRID_BYTES
        total = sum(info[k] for k in ("row_bytes", "table_bytes", "space_bytes", "grid_bytes"))
        assert total <= small_caches
        kept = list(rowmemo._rows.values())
        assert sum(_held_array_bytes(r.memo) for r in kept) <= info["row_bytes"]
    assert cache.info()["row_sets"] < len(reqs)  # some were dropped
    held = [sp.__dict__.get("rows") for sp in cache._spaces.values()]
    dropped = [r for r in held if r is not None and all(r is not k for k in rowmemo._rows.values())]
    assert all(len(r.memo) == 0 for r in dropped)
    cache.configure(cache.DEFAULT_BYTES)
    default = [(r.status, r.config, r.performance) for r in map(plan, reqs)]
    assert default == small


def test_rows_dropped_while_in_use_are_kept_again(small_caches: int) -> None:
    """Rows dropped from the cache whose memo grows again (a space kept in use) are counted
    and kept again; a memo that its rows no longer use counts nothing."""
    plan(_request(64))
    (sp,) = cache._spaces.values()
    r = sp.rows
    assert any(k is r for k in rowmemo._rows.values())
    old = r.memo
    cache.clear()  # drops every rows: r, still held by the space, loses its memo
    assert r.memo is not old and len(r.memo) == 0 and cache.info()["row_sets"] == 0
    old[("unused",)] = np.zeros(1000)
    assert cache.info()["row_bytes"] == 0  # the old memo is no longer r's
    r.memo[("x",)] = np.zeros(1000)
    info = cache.info()
    assert info["row_sets"] == 1 and 8000 < info["row_bytes"] < 8000 + 6 * 8 * len(r) + 2000
    assert cache.rows(sp.cm, sp.layouts) is r


def cache_bounds(*, stop: threading.Event | None) -> dict[str, int]:
    """The caches' bounds of the process this runs in (a solver process)."""
    return cache.bounds()


def test_solver_processes_bound_their_caches_as_the_setting_says() -> None:
    total = Settings(solver_cache_bytes=24 * 2**20).solver_cache_bytes
    pool = ProcessRunner(1, warm=False, cache_bytes=total)
    try:
        assert pool.wait_ready(120) == 1

        async def go() -> dict[str, int]:
            return await pool.start(cache_bounds, stop=threading.Event())

        got = asyncio.run(go())
    finally:
        pool.close()
        pool.join()
    assert got == {"rows": 6 * 2**20, "tables": 6 * 2**20, "spaces": 9 * 2**20, "grids": 3 * 2**20}
    assert cache.bounds()["rows"] == cache.DEFAULT_BYTES // 4  # this process: its own
