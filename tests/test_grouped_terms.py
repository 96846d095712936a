"""Cost models of one request at several GPU counts share their grouped terms (`cache.grouped`,
built over a context whose count is 0): each scores every point as the cost model built on its
own does, objective, memory, fit and the float report alike."""

from __future__ import annotations

from itertools import islice

import pytest

from meshplan.solver import cache
from meshplan.solver.costmodel import CostModel
from meshplan.solver.costmodel.model import STAGES
from meshplan.solver.costmodel.point import Rows
from meshplan.solver.planner import _resolve
from meshplan.solver.schema import PlanRequest
from meshplan.solver.space import Space


def _req(model: str, n: int, **training: object) -> PlanRequest:
    return PlanRequest.model_validate(
        {
            "model": {"preset": model},
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": n},
            "training": {"seq_len": 4096, **training},
        }
    )


@pytest.mark.parametrize(
    "model, counts, training",
    [
        ("llama3-70b", (8, 64, 512), {}),
        ("mixtral-8x7b", (16, 128), {}),
        ("llama3-8b", (8, 24), {"precision": "FP8", "framework": "MEGATRON"}),
    ],
    ids=["dense", "moe", "fp8-megatron"],
)
def test_a_shared_grouping_scores_as_its_own(model: str, counts: tuple, training: dict) -> None:
    cache.clear()
    cms = []
    for n in counts:
        req = _req(model, n, **training)
        A, H, cm = _resolve(req)  # the cached model: its terms grouped once for every count
        own = CostModel(A, H, req.training, req.search)  # grouped on its own
        sp = Space.build(A, H, req.training, req.search, own, prune=False)
        rows = Rows.of(sp.layouts)
        at = {lay: i for i, lay in enumerate(sp.layouts)}
        pts = list(islice(sp.points(), 0, 3000, 150))
        assert pts and cm.time_unit_s == own.time_unit_s
        for p in pts:
            i = at[p.lay]
            assert cm.objective_int(p, rows, i) == own.objective_int(p, rows, i)
            assert cm.fits(p, rows, i) == own.fits(p, rows, i)
            for st in STAGES:
                assert cm.tenants_int(p, st, rows, i) == own.tenants_int(p, st, rows, i)
            assert cm.performance(p, rows, i) == own.performance(p, rows, i)
            assert cm.memory_bill(p, rows, i) == own.memory_bill(p, rows, i)
        cms.append(cm)
    assert cache.info()["grouped"] == 1 and cache.info()["models"] == len(counts)
    assert all(c.memory is cms[0].memory for c in cms)  # one grouping for every count
    cache.clear()
