"""`Space.least_memory_fits` (a stage at a time, stopping when the first stage overflows every
point) answers what the least-memory needs of both stages answer: whether some layout's
least-memory point fits."""

from __future__ import annotations

import numpy as np
from conftest import h100_space

from meshplan.solver.cpsat.tables import Tables
from meshplan.solver.space import fit_order

CASES = [  # (model, GPUs, seq_len, search): tight, roomy and between, dense and MoE
    ("llama3-405b", 16, 8192, {}),
    ("llama3-405b", 64, 8192, {}),
    ("llama3-405b", 256, 8192, {}),
    ("llama3-70b", 8, 8192, {}),
    ("llama3-70b", 16, 4096, {"zero_stage": 1}),
    ("mixtral-8x22b", 8, 4096, {}),
    ("mixtral-8x22b", 32, 4096, {}),
    ("qwen3-235b-a22b", 64, 8192, {}),
]


def test_least_memory_fits_is_any_need_within_the_budget() -> None:
    answers = []
    for case in CASES:
        sp = h100_space(*case)
        lays = sorted(sp.all_layouts, key=fit_order)
        for part in (lays, lays[:1], lays[:5], lays[len(lays) // 2 :], []):
            want = any(n <= sp.cm.budget for _, n in sp.least_memory_needs(part, kept=False))
            for first in (0, 1, 2, 10**6):  # one by one before the rest at once
                assert sp.least_memory_fits(part, first) == want, (case, len(part), first)
            answers.append(want)
    assert True in answers and False in answers  # both answers were put to the test


def test_least_memory_fits_reads_the_last_stage() -> None:
    """Points the first stage lets through and the last refuses do not fit: the answer is the
    one over both stages where they disagree."""
    seen = 0
    for case in CASES:
        sp = h100_space(*case)
        refused = [
            p.lay
            for p, need in sp.least_memory_needs(kept=False)
            if sp.cm.stage_bytes(p, "first") <= sp.cm.budget < need
        ]
        if refused:
            assert sp.least_memory_fits(refused) is sp.least_memory_fits(refused, 3) is False
            seen += 1
    assert seen  # some case has such layouts


def test_some_layout_fits_is_what_the_bounds_find() -> None:
    """The planner's test before its bounds: some layout's least-memory point fits exactly when
    one of the space's least-memory needs is within the budget, and when none does every row's
    coarse bound is infinite (the search would find nothing)."""
    answers = []
    for case in CASES:
        sp = h100_space(*case)
        want = any(n <= sp.cm.budget for _, n in sp.least_memory_needs(sp.layouts, kept=False))
        got = sp.some_layout_fits()
        assert got == want, case
        assert got == sp.some_layout_fits(first=0) == sp.some_layout_fits(first=10**6), case
        if not got:
            assert not np.isfinite(Tables(sp).coarse()).any(), case
        answers.append(got)
    assert True in answers and False in answers
