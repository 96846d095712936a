"""What a solver process imports to run scheduler cells, and the package's lazy public names."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

import meshplan.solver.scheduler as scheduler
from meshplan.solver.scheduler.cells import CellTask, solve_cell
from meshplan.solver.scheduler.policy import BatchPolicy, BatchPolicyKind
from meshplan.solver.scheduler.status import CellStatus
from meshplan.solver.schema import ClusterSpec, ModelSpec, SearchSpec, TrainingSpec

# Run in a fresh interpreter: unpickle a cell's task (as a solver process does), solve it, and
# list the scheduler modules that are then loaded.
_CHILD = """
import pickle, sys
from meshplan.solver.scheduler.cells import solve_cell
task = pickle.loads(sys.stdin.buffer.read())
out = solve_cell(task)
print(out.status.value)
print(" ".join(sorted(m for m in sys.modules if m.startswith("meshplan.solver.scheduler"))))
"""


def _task() -> CellTask:
    return CellTask(
        model=ModelSpec(preset="llama3-8b"),
        training=TrainingSpec(seq_len=4096),
        search=SearchSpec(),
        cluster=ClusterSpec(num_gpus=8),
        batch=BatchPolicy(kind=BatchPolicyKind.FIXED_GLOBAL, global_batch_tokens=4096 * 64),
        time_limit_s=30.0,
    )


def test_a_process_running_cells_imports_no_query_request_or_answer_module() -> None:
    got = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=pickle.dumps(_task()),
        capture_output=True,
        check=True,
        timeout=120,
    )
    status, modules = got.stdout.decode().splitlines()
    assert status == solve_cell(_task()).status.value == CellStatus.PLANNED.value
    assert set(modules.split()) == {
        "meshplan.solver.scheduler",
        "meshplan.solver.scheduler.cells",
        "meshplan.solver.scheduler.policy",
        "meshplan.solver.scheduler.status",
    }


def test_every_public_name_loads_from_its_module() -> None:
    for name in scheduler.__all__:
        value = getattr(scheduler, name)
        assert value.__module__.startswith("meshplan.solver.scheduler."), name
        assert name in dir(scheduler)
    # the classes the requests and answers re-export are the same objects
    from meshplan.solver.scheduler import answers, requests

    assert requests.BatchPolicy is BatchPolicy and requests.BatchPolicyKind is BatchPolicyKind
    assert answers.CellStatus is CellStatus is scheduler.CellStatus


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_query"):
        scheduler.no_such_query  # noqa: B018
