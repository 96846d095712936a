"""The first round proven without CP-SAT (`cpsat/exact.py`) gives what the CP-SAT round gives:
the oracle's optimum, and the same configuration; and it declines (CP-SAT decides) whenever a
point may beat the hint."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from test_grpc_support import small_request
from test_oracle_property import instances, oracle_settings

import meshplan.solver.cpsat.search as search_mod
from meshplan.solver import cache, plan
from meshplan.solver.cpsat.exact import exact_round
from meshplan.solver.cpsat.tables import Tables
from meshplan.solver.oracle import oracle
from meshplan.solver.planner import _resolve
from meshplan.solver.results import PlanResult, PlanStatus
from meshplan.solver.schema import PlanRequest
from meshplan.solver.space import Space


def _cpsat_only(req: PlanRequest) -> PlanResult:
    cache.clear()  # no tables or models kept from the other path
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(search_mod, "exact_round", lambda *_: None)
        return plan(req)


@oracle_settings(60)
@given(instances())
def test_both_paths_reach_the_oracle_optimum_and_agree(req: PlanRequest) -> None:
    cache.clear()
    fast = plan(req)
    slow = _cpsat_only(req)
    ref = oracle(req)
    assert fast.status is slow.status
    if ref.objective is None:
        assert fast.status is PlanStatus.INFEASIBLE
        return
    assert fast.status is PlanStatus.OPTIMAL
    assert fast.solver.objective == slow.solver.objective == ref.objective
    assert fast.config == slow.config
    assert fast.solver.bound == slow.solver.bound == ref.objective


def test_the_first_round_is_proven_without_a_model() -> None:
    cache.clear()
    fast, slow = plan(small_request()), _cpsat_only(small_request())
    assert fast.status is slow.status is PlanStatus.OPTIMAL
    assert fast.config == slow.config and fast.solver.objective == slow.solver.objective
    assert fast.solver.num_variables == 0 and fast.solver.solve_time_s == 0.0
    assert slow.solver.num_variables > 0


def test_a_point_below_the_hint_leaves_the_proof_to_cpsat() -> None:
    """Hinted with a fitting point of the best row that is not its optimum, the exact round
    declines; hinted with the row's optimum (found by scoring every point), it proves it."""
    req = small_request()
    A, H, cm = _resolve(req)
    sp = Space.build(A, H, req.training, req.search, cm, prune=False)
    tb = Tables(sp)
    row = int(np.argmin(tb.coarse()))
    lay = sp.layouts[row]
    scored = sorted(
        (
            (cm.objective_int(p, tb.rows, row), p)
            for p in sp.points()
            if p.lay == lay and cm.fits(p, tb.rows, row)
        ),
        key=lambda x: x[0],
    )
    (best, opt), (worse, other) = scored[0], next(x for x in scored if x[0] > scored[0][0])
    assert exact_round(tb, [row], other, float(worse)) is None
    got = exact_round(tb, [row], opt, float(best))
    assert got is not None and got.point == opt and got.objective == got.bound == best


def test_the_cli_says_how_a_plan_was_proven() -> None:
    """A plan proven without a CP-SAT model says so, not "0 vars"; one with a model gives its
    size."""
    from meshplan.tools.render.tables import render_plan

    req = PlanRequest.model_validate({"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": 8}})
    res = plan(req)
    text = render_plan(req, res)
    assert res.solver is not None
    if res.solver.num_variables:
        assert f"{res.solver.num_variables} vars" in text
    else:
        assert "no CP-SAT model: the bounds and exact scores proved it" in text
    forced = res.model_copy(update={"solver": res.solver.model_copy(update={"num_variables": 123})})
    assert "123 vars" in render_plan(req, forced)
