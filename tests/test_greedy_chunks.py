"""The greedy recipe scores its candidates a chunk of rows at a time and keeps the first that
fits: the point it returns does not depend on how the rows are chunked."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import h100_space

from meshplan.solver import greedy as greedy_mod
from meshplan.solver.cpsat.tables import Tables

SPECS = {  # ZeRO-1 pinned: the first rows of the recipe's order (tp=1, pp=1 first) do not fit
    "tight-dense": ("llama3-70b", 32, 8192, {"zero_stage": 1}),
    "moe": ("mixtral-8x7b", 64, 4096, {}),
    "small": ("llama3-8b", 8, 4096, {}),
}


def _tables(model: str, n: int, seq: int, search: dict) -> Tables:
    return Tables(h100_space(model, n, seq, search))


@pytest.mark.parametrize("spec", list(SPECS), ids=list(SPECS))
def test_the_greedy_point_does_not_depend_on_the_chunks(
    spec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tb = _tables(*SPECS[spec])
    fitting = np.flatnonzero(np.isfinite(tb.coarse()))
    got: dict[tuple[int, int], tuple] = {}
    calls: dict[tuple[int, int], int] = {}
    real = tb.sp.cm.fits_many
    for chunk in (1, 3, 16, 10**6):
        for one in (0, 3, 10**6):  # candidates scored one by one before the rest at once
            monkeypatch.setattr(greedy_mod, "FIRST_CHUNK", chunk)
            monkeypatch.setattr(greedy_mod, "ONE_BY_ONE", one)
            n = [0]
            monkeypatch.setattr(
                tb.sp.cm, "fits_many", lambda *a, n=n: n.__setitem__(0, n[0] + 1) or real(*a)
            )
            got[chunk, one] = (greedy_mod.greedy(tb), greedy_mod.greedy(tb, fitting))
            calls[chunk, one] = n[0]
    base = got[1, 0]
    assert base[0] is not None and base[1] is not None
    assert all(g == base for g in got.values())
    assert calls[10**6, 10**6] == 0  # every candidate scored one by one
    if spec == "tight-dense":  # all rows: the recipe's first rows fit nowhere, chunks run on
        assert calls[1, 0] > calls[10**6, 0] == 2  # once per greedy call
