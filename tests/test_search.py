"""Row generation: stopped between rounds it answers with the earlier optimum, unproven; the
time limit covers the tables; alternatives are distinct and no better than the optimum."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given
from test_grpc_support import big_request, small_request
from test_oracle_property import instances, oracle_settings

import meshplan.solver.cpsat.search as search_mod
import meshplan.solver.cpsat.solve as solve_mod
import meshplan.solver.cpsat.tables as tables_mod
import meshplan.solver.planner as planner_mod
from meshplan.solver import cache, plan
from meshplan.solver.oracle import oracle
from meshplan.solver.results import PlanStatus
from meshplan.solver.schema import PlanRequest


def test_stopped_between_rounds_answers_the_earlier_optimum(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stop = threading.Event()
    solve = solve_mod.solve  # search.py imports it with the first CP-SAT model

    def solve_then_stop(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        res = solve(*args, **kwargs)
        stop.set()  # the call ends right after the first CP-SAT round
        return res

    def never_proven(self: search_mod._Rows, value: float, gap: float) -> bool:
        self.add_best(1)  # as if a row below the optimum had been left out
        return False

    monkeypatch.setattr(solve_mod, "solve", solve_then_stop)
    monkeypatch.setattr(search_mod._Rows, "cover", never_proven)
    r = plan(small_request(), stop_event=stop)
    monkeypatch.undo()
    proven = plan(small_request())
    assert r.status is PlanStatus.FEASIBLE and r.solver.status == "FEASIBLE"
    assert not r.solver.used_fallback
    assert 0 < r.solver.bound <= proven.solver.objective <= r.solver.objective
    assert 0 <= r.solver.gap < 1


def test_time_limit_covers_the_tables() -> None:
    """10,800 layouts and a 50 ms limit: the tables and bounds outlast it, so the answer is
    the greedy plan, unproven (or none at all), and it comes soon after the limit."""
    cache.clear()  # cold: with its tables kept from an earlier plan it is proven in time
    started = time.perf_counter()
    try:
        r = plan(big_request(time_limit_s=0.05))
    except TimeoutError:
        r = None
    assert time.perf_counter() - started < 1.5
    if r is not None:
        assert r.status is PlanStatus.FEASIBLE and r.solver.used_fallback
        assert r.solver.status == "FALLBACK" and r.solver.bound == 0.0


def test_alternatives_are_distinct_and_no_better() -> None:
    r = plan(small_request(top_k=3))
    assert r.status is PlanStatus.OPTIMAL and len(r.alternatives) == 3
    shapes = {
        (c.tp, c.pp, c.dp, c.cp, c.ep, c.virtual_stages, c.micro_batch_size, c.num_microbatches)
        for c in [r.config, *(a.config for a in r.alternatives)]
    }
    assert len(shapes) == 4
    assert all(a.performance.step_time_s >= 0 for a in r.alternatives)
    best = r.performance.tokens_per_s
    assert all(a.performance.tokens_per_s <= best * (1 + 1e-6) for a in r.alternatives)


@oracle_settings(60)
@given(instances())
def test_many_small_rounds_reach_the_oracle_optimum(req: PlanRequest) -> None:
    """Start from the row with the worst bound and grow one row per round: the answer rests
    on the proof across rounds, not on the first model holding the optimum."""

    def worst_first(self: search_mod._Rows, n: int) -> None:
        while self.pos < len(self.todo):
            self._refine(1)
        self.model += [r for _, r in self._out()[-n:]]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(search_mod, "FIRST_ROWS", 1)
        mp.setattr(search_mod, "GROW_MIN", 1)
        mp.setattr(search_mod._Rows, "add_best", worst_first)
        res = plan(req)
    ref = oracle(req)
    if ref.objective is None:
        assert res.status is PlanStatus.INFEASIBLE
    else:
        assert res.status is PlanStatus.OPTIMAL and res.solver.objective == ref.objective


def test_stopped_before_the_first_model_falls_back_to_the_greedy_plan() -> None:
    stop = threading.Event()
    greedy = planner_mod.greedy

    def greedy_then_stop(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        hint = greedy(*args, **kwargs)
        stop.set()  # the call ends after the coarse bounds and the greedy plan
        return hint

    cache.clear()  # a space planned before keeps its greedy plan: this one must compute it
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(planner_mod, "greedy", greedy_then_stop)
        r = plan(small_request(), stop_event=stop)
    assert r.status is PlanStatus.FEASIBLE and r.solver.used_fallback
    assert r.solver.status == "FALLBACK" and r.solver.gap == 1.0


def _refined_and_answer(req: PlanRequest, cut: bool = True, lead: bool = True) -> tuple[int, dict]:
    """Rows refined (fine bounds computed) plus fine cells listed while planning `req` from
    fresh caches, and the answer without its timings; `cut`: whether rows above the cap wait,
    `lead`: whether each batch refines its most promising row first (both the default)."""
    seen: list[int] = []
    init, refine = search_mod._Rows.__init__, search_mod._Rows._refine
    fine = tables_mod.fine_bounds

    def counted(self: search_mod._Rows, k: int, below: float = search_mod.INF) -> None:
        before = self.pos
        refine(self, k, below)
        seen.append(self.pos - before)

    def cells(tb: tables_mod.Tables, rows: list[int], cap: float) -> dict:
        got = fine(tb, rows, cap)
        seen.extend(len(f.db) for f in got.values())
        return got

    def uncut(self: search_mod._Rows, tables: tables_mod.Tables) -> None:
        init(self, tables)
        self.best_only = cut

    cache.clear()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(search_mod._Rows, "_refine", counted)
        mp.setattr(search_mod._Rows, "__init__", uncut)
        mp.setattr(tables_mod, "fine_bounds", cells)
        if not lead:
            mp.setattr(tables_mod.Tables, "lead", lambda self, rows: None)
        d = plan(req).model_dump(mode="json")
    d["solver"]["wall_time_s"] = d["solver"]["solve_time_s"] = 0
    return sum(seen), d


_SPACES = (
    small_request(),
    small_request(top_k=3),
    PlanRequest.model_validate(
        {"model": {"preset": "llama3-70b"}, "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 64}}
    ),
    PlanRequest.model_validate(
        {
            "model": {"preset": "mixtral-8x7b"},
            "cluster": {"gpu": "a100-sxm-80gb", "num_gpus": 32},
        }
    ),
)


@pytest.mark.parametrize("what", ["cut", "lead"])
def test_less_refined_and_the_answer_is_the_same(what: str) -> None:
    """Rows whose coarse bound exceeds the best objective known cannot hold the best point, so
    they wait ("cut"); the most promising row of a batch is refined first and its best point
    caps the rest ("lead"). Either leaves every answer (alternatives included) as it was, and
    spares rows or fine cells on some of these spaces."""
    fewer = 0
    for req in _SPACES:
        n_on, on = _refined_and_answer(req)
        n_off, off = _refined_and_answer(req, **{what: False})
        assert on == off
        assert n_on <= n_off
        fewer += n_on < n_off
    assert fewer


def test_a_repeated_search_reads_its_lead_rows_from_the_tables() -> None:
    """The lead row of each batch is kept with the tables (by the batch's rows and the cap): a
    repeated request takes the same rows and gives the same answer without choosing again."""
    cache.clear()
    seen: list[tables_mod.Tables] = []
    lead = tables_mod.Tables.lead

    def spy(self: tables_mod.Tables, rows: list[int]) -> None:
        seen.append(self)
        lead(self, rows)

    req = PlanRequest.model_validate(
        {"model": {"preset": "llama3-70b"}, "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 64}}
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tables_mod.Tables, "lead", spy)
        first = plan(req).model_dump(mode="json")
        kept = {k: v for k, v in seen[0].memo.items() if isinstance(k, tuple) and k[0] == "lead"}
        assert kept and all(v is None or isinstance(v, int) for v in kept.values())
        mp.setattr(tables_mod.Tables, "_most_promising", lambda self, rows: pytest.fail(rows))
        again = plan(req).model_dump(mode="json")
    for d in (first, again):
        d["solver"]["wall_time_s"] = d["solver"]["solve_time_s"] = 0
    assert again == first
