"""A query's cells on a server's solver slots, a turn of a few cells at a time: the turns cover
the cells in order, a turn stops starting cells past its CPU time, and what it leaves undone is
sent again (the answer is the in-process one)."""

from __future__ import annotations

import threading

import pytest
from test_grpc_support import LOOPBACK, running_server

import meshplan.server.scheduler as server_scheduler
from meshplan.client import PlannerClient
from meshplan.server.scheduler import TURN_CELLS, _turns
from meshplan.solver.scheduler import CurveRequest, scaling_curve
from meshplan.solver.scheduler.cells import CellOutcome, CellTask, run_cells, solve_cell
from meshplan.solver.scheduler.policy import BatchPolicy, BatchPolicyKind
from meshplan.solver.schema import ClusterSpec, ModelSpec, SearchSpec, TrainingSpec

CURVE = {
    "model": {"preset": "llama3-8b"},
    "training": {"seq_len": 4096},
    "clusters": [{"gpu": "h100-sxm-80gb"}, {"gpu": "a100-sxm-80gb"}],
    "grid": {"max_nodes": 3, "sub_node": True},
    "batch": {"kind": "FIXED_GLOBAL", "global_batch_tokens": 4096 * 64},
}


@pytest.mark.parametrize("n", [0, 1, 2, 7, 8, 9, 64, 256, 4096])
@pytest.mark.parametrize("width", [1, 2, 3, 16])
def test_the_turns_cover_every_cell_once_in_order_and_shrink_to_one(n: int, width: int) -> None:
    turns = _turns(n, width)
    assert [i for a, b in turns for i in range(a, b)] == list(range(n))  # each once, in order
    sizes = [b - a for a, b in turns]
    assert all(1 <= k <= TURN_CELLS for k in sizes)
    assert sizes == sorted(sizes, reverse=True)  # the small turns come last
    if n >= 2 * width:
        assert sizes[-2 * width :] == [1] * (2 * width)  # the slots end together
    if n >= 8 * width * TURN_CELLS:
        assert len(turns) < n / 2  # far fewer hand-offs than cells


def _tasks(counts: list[int]) -> list[CellTask]:
    return [
        CellTask(
            model=ModelSpec(preset="llama3-8b"),
            training=TrainingSpec(seq_len=4096),
            search=SearchSpec(),
            cluster=ClusterSpec(num_gpus=n),
            batch=BatchPolicy(kind=BatchPolicyKind.FIXED_GLOBAL, global_batch_tokens=4096 * 64),
            time_limit_s=30.0,
        )
        for n in counts
    ]


def _answer(out: CellOutcome) -> tuple:
    res = out.result
    assert res is not None
    return out.status, res.config, res.performance  # not the solver's timings


def test_a_turn_starts_no_cell_past_its_cpu_time_but_always_runs_one() -> None:
    tasks = _tasks([8, 16, 32])
    alone = [_answer(solve_cell(t)) for t in tasks]
    one = run_cells(tasks, None, 0.0, stop=threading.Event())
    assert [_answer(o) for o in one] == alone[:1]
    every = run_cells(tasks, None, 60.0, stop=threading.Event())
    assert [_answer(o) for o in every] == alone


def test_a_stopped_turn_raises_before_its_next_cell() -> None:
    stop = threading.Event()
    stop.set()
    with pytest.raises(TimeoutError, match="cancelled"):
        run_cells(_tasks([8]), None, 60.0, stop=stop)


def test_cells_a_turn_leaves_undone_are_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_scheduler, "TURN_CPU_S", 0.0)  # every turn runs one cell
    req = CurveRequest.model_validate(CURVE)
    with (
        running_server(max_concurrent_solves=2, max_solves_per_caller=2) as (port, _),
        PlannerClient(f"{LOOPBACK}:{port}", default_timeout=120) as client,
    ):
        got = client.scaling_curve(req)
    assert len(got.cells) == 2 * 6  # 1, 2, 4 GPUs, then 1..3 nodes of 8
    assert got == scaling_curve(req)
