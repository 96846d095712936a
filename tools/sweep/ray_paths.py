"""The many-plans paths on Ray (tools/sweep/ray_backend.py): a sweep's cells, a batch's requests
and a scheduler query's cells, each spread over warm worker actors.

    from meshplan.tools.sweep.ray_paths import RayBackend
    with RayBackend("auto") as ray:                     # or None: a local cluster
        curve = scaling_curve(req, solver=ray.cells)    # any CellSolver parameter
        for out in ray.sweep(jobs): ...                 # tools/sweep/solve.py's Outcome

The CLI's `--ray [ADDRESS]` builds one (tools/cli/*.py). The library calls take it the same
way: `run_sweep(..., ray=backend)`, and `solver=backend.cells` for scaling_curve,
training_front, smallest_allocation and replan.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from typing import Any

from meshplan.tools.sweep.ray_backend import ClusterInfo, Workers, import_ray, ray_cluster
from meshplan.tools.sweep.solve import Job, Outcome, _outcome, split_unloaded

RAY_LOCAL = ""  # `--ray` given without an address: Ray's default rules


class RayBackend:
    """A Ray cluster (ray_backend.ray_cluster's address rules) and its worker actors, kept warm
    from the first call to `close`. `workers`: actors at most (0: one per CPU of the cluster);
    `cpus`: the size of a local cluster this starts (0: one per usable CPU); `warm`: each actor
    solves a small plan before its first call, as a server's solver process does."""

    def __init__(
        self, address: str | None = None, workers: int = 0, cpus: int = 0, warm: bool = False
    ) -> None:
        self.address, self._cpus = address or None, cpus
        self.workers = Workers(count=workers, warm=warm)
        self.info: ClusterInfo | None = None
        self._stack = ExitStack()

    def open(self) -> RayBackend:
        """Connect (or start the local cluster); the actors start with the first call."""
        if self.info is None:
            self.info = self._stack.enter_context(ray_cluster(self.address, self._cpus))
            self._stack.callback(self.workers.close)
        return self

    def close(self) -> None:
        """Kill the actors; shut down the cluster if this started it."""
        self._stack.close()
        self.info = None

    def __enter__(self) -> RayBackend:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sweep(self, jobs: Sequence[Job]) -> Iterator[Outcome]:
        """A sweep's cells as they finish (a cell whose model did not load at once, as
        solve_local does)."""
        self.open()
        failed, todo = split_unloaded(jobs)
        yield from failed
        for chunk, answers in self.workers.run("plans", [j.request for j in todo]):
            for j, (result, error) in zip(chunk, answers, strict=True):
                yield _outcome(todo[j], result, error)

    def batch(self, requests: Sequence[Any]) -> Iterator[Any]:
        """PlanBatch's items (client.sync.BatchItem) for validated PlanRequests, as they
        finish; a failed plan is an item with the error PlanBatch would give."""
        import grpc

        from meshplan.client.exceptions import FieldViolation, InvalidRequestError, PlannerError
        from meshplan.client.sync import BatchItem
        from meshplan.solver.results import PlanResult

        self.open()
        dicts = [r.model_dump(mode="json") for r in requests]
        for chunk, answers in self.workers.run("batch", dicts):
            for i, (result, code, message, bad) in zip(chunk, answers, strict=True):
                if result is not None:
                    yield BatchItem(i, PlanResult.model_validate(result))
                    continue
                status = grpc.StatusCode[code]
                if code != "INVALID_ARGUMENT":
                    yield BatchItem(i, error=PlannerError(status, message))
                    continue
                # the fields as PlanBatch names them (server/servicer.py: requests[i].<path>)
                item = f"requests[{i}]"
                fields = [FieldViolation(f"{item}.{f}" if f else item, d) for f, d in bad]
                yield BatchItem(i, error=InvalidRequestError(status, message, violations=fields))

    def cells(self, tasks: Sequence[Any], budget: Any) -> list[Any]:
        """A CellSolver (solver/scheduler/cells.py): every cell's outcome, in the order of
        `tasks`, under the query's budget (checked while waiting; a stop kills the actors)."""
        self.open()
        out: list[Any] = [None] * len(tasks)

        def left() -> tuple[float | None]:
            return (budget.remaining(),)

        for chunk, (ok, value) in self.workers.run("cells", list(tasks), left, budget.check):
            if not ok:
                self.workers.close()  # the other cells would be thrown away with the query
                raise value
            for i, outcome in zip(chunk, value, strict=True):
                out[i] = outcome
        return out


def ray_backend(a: argparse.Namespace, workers: int = 0) -> RayBackend | None:
    """The RayBackend that `--ray` asks for, not yet connected, or
    None without --ray. Ray's absence is a one-line ValueError (exit 2) before anything runs."""
    if getattr(a, "ray", None) is None:
        return None
    if getattr(a, "server", None):
        raise ValueError("--ray: give --ray or --server, not both")
    import_ray()
    return RayBackend(a.ray or None, workers=workers or getattr(a, "jobs", 0) or 0)
