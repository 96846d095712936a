"""Caches bounded in bytes: the planner's spaces and grids by the layouts they hold, the scheduler
answers by their weight; an entry heavier than the whole bound is used, not kept."""

from __future__ import annotations

import pytest
from cachetools import LRUCache

from meshplan.solver import cache
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
