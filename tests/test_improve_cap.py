"""Tables.improve_cap scores the rows' guesses in order of fine bound and stops once the next
bound exceeds the best fitting objective: it sets the cap and the best point that scoring every
guess gives (the least objective that fits, of equal ones the first row's), and scores no guess
whose bound is above it."""

from __future__ import annotations

import numpy as np
import pytest

from meshplan.solver import cache
from meshplan.solver.cpsat.bounds import Fine
from meshplan.solver.cpsat.tables import Tables
from meshplan.solver.planner import _resolve
from meshplan.solver.schema import PlanRequest
from meshplan.solver.space import Space

DENSE = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 32},
    "training": {"seq_len": 4096},
}
MOE = {
    "model": {"preset": "mixtral-8x7b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 64},
    "training": {"seq_len": 4096, "global_batch_tokens": 4096 * 256},
}


def _tables(req: dict) -> Tables:
    cache.clear()  # a fresh memo: no guess scored before
    r = PlanRequest.model_validate(req)
    A, H, cm = _resolve(r)
    return Tables(Space.build(A, H, r.training, r.search, cm, prune=False))


def _every_guess(tb: Tables, rows: list[int]) -> tuple[float, int | None]:
    """The cap and the best row that scoring every guess below the cap gives (argmin: the first
    of equal objectives), each guess scored by the cost model afresh."""
    cm, best, arg = tb.sp.cm, np.inf, None
    for r in rows:
        f = tb._fine.get(r)
        if f is None or f.at is None or not f.bound < tb.cap:
            continue
        p = tb._point(r, f)
        cm._scores.clear()  # not the points the cost model kept
        s = cm.objective_int(p, tb.rows, r) if cm.fits(p, tb.rows, r) else np.inf
        assert s >= f.bound  # the premise of the early stop: a guess costs at least its bound
        if s < best:
            best, arg = s, r
    return (best, arg) if best < tb.cap else (tb.cap, None)


@pytest.mark.parametrize("req", [DENSE, MOE], ids=["dense", "moe"])
def test_the_cap_and_best_point_of_scoring_every_guess(req: dict) -> None:
    tb = _tables(req)
    order = np.argsort(tb.coarse(), kind="stable")[:96].tolist()
    lowered = 0
    for k in range(0, len(order), 16):
        batch = order[k : k + 16]
        tb.refine(batch)
        want_cap, want_row = _every_guess(tb, batch)
        before = tb.cap
        tb.improve_cap(batch)
        assert tb.cap == want_cap
        if want_row is not None:
            lowered += 1
            assert tb.best == tb.guess(want_row)
        else:
            assert tb.cap == before
    assert lowered >= 1  # the first batch at least lowers an infinite cap


def _fine(bound: float) -> Fine:
    e = np.zeros(1, dtype=np.int64)
    return Fine(bound, e, e, np.zeros((1, 1, 1)), e.reshape(1, 1, 1), (0, 0, 0), np.inf, -1.0)


def _stubbed(tb: Tables, fines: dict[int, Fine], score: dict[int, int | None]) -> list[int]:
    """Rows with these fine bounds whose guesses score `score` (None: does not fit); returns
    the list of rows scored."""
    scored: list[int] = []
    tb._fine = dict(fines)
    tb._point = lambda r, f: r  # type: ignore[method-assign]
    tb.score = lambda r: scored.append(r) or score[r]  # type: ignore[method-assign]
    tb.guess = lambda r: ("guess", r)  # type: ignore[method-assign]
    tb.memo["scores"] = {}
    return scored


def test_ties_go_to_the_first_row_and_guesses_above_the_best_are_not_scored() -> None:
    tb = _tables(DENSE)
    # row 5 (bound 10, objective 12) is scored first; row 3 (bound 11, objective 12) ties it
    # and comes first in the rows; row 7 does not fit; row 8's bound is 12: it may tie, it is
    # scored; rows 9 and 4 (bounds 12.5, 20) cannot beat 12 and are not scored
    fines = {3: _fine(11), 5: _fine(10), 7: _fine(9), 8: _fine(12), 9: _fine(12.5), 4: _fine(20)}
    score = {3: 12, 5: 12, 7: None, 8: 13, 9: 13, 4: 25}
    scored = _stubbed(tb, fines, score)
    tb.cap, tb.best = 100.0, None
    tb.improve_cap([4, 9, 8, 5, 7, 3])
    assert tb.cap == 12 and tb.best == ("guess", 5)  # row 5 is before row 3 in the call
    assert scored == [7, 5, 3, 8]
    tb.cap, tb.best = 100.0, None
    tb.improve_cap([3, 5, 7, 8, 9, 4])  # scores read back from the memo: nothing scored again
    assert tb.cap == 12 and tb.best == ("guess", 3) and scored == [7, 5, 3, 8]


def test_no_guess_below_the_cap_leaves_it() -> None:
    tb = _tables(DENSE)
    scored = _stubbed(tb, {1: _fine(5), 2: _fine(50)}, {1: None, 2: 40})
    tb.cap, tb.best = 30.0, "known"
    tb.improve_cap([1, 2])  # row 2's bound is above the cap: not a candidate
    assert (tb.cap, tb.best) == (30.0, "known") and scored == [1]
