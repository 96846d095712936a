"""One cell = one plan under the batch policy. Every query computes its cells through a
`CellSolver` (default `solve_cells`, a loop in this thread); the server passes one that sends
each cell to its pool of worker processes (CellTask, CellOutcome and QueryStopped pickle).

Under FIXED_GLOBAL a cell pins training.global_batch_tokens; under FREE it caps it; under
FIXED_PER_REPLICA it tries each data-parallel degree d (pinned) with a global batch of d x the
per-replica batch and keeps the fastest.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from meshplan.solver.arch import resolve_model
from meshplan.solver.hardware import resolve_cluster
from meshplan.solver.planner import check_pins, plan
from meshplan.solver.results import PlanResult, PlanStatus
from meshplan.solver.scheduler.policy import BatchPolicy, BatchPolicyKind
from meshplan.solver.scheduler.status import CellStatus
from meshplan.solver.schema import (
    ClusterSpec,
    ModelSpec,
    Options,
    PlanRequest,
    SearchSpec,
    TrainingSpec,
)
from meshplan.solver.space import divisors, fewer_gpu_counts


class QueryStopped(TimeoutError):
    """The query was cancelled or ran out of time; `cancelled` tells which."""

    def __init__(self, message: str, cancelled: bool) -> None:
        super().__init__(message)
        self.cancelled = cancelled

    def __reduce__(self) -> tuple[object, ...]:  # crosses from a worker process intact
        return (QueryStopped, (str(self), self.cancelled))


@dataclass
class Budget:
    """A query's stop event and deadline (time.monotonic(); None: no deadline)."""

    stop: threading.Event | None = None
    deadline: float | None = None

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def check(self) -> None:
        if self.stop is not None and self.stop.is_set():
            raise QueryStopped("the query was cancelled", cancelled=True)
        left = self.remaining()
        if left is not None and left <= 0:
            raise QueryStopped("the query ran out of time", cancelled=False)


@dataclass(frozen=True)
class CellTask:
    """Everything one cell's plan needs (picklable, for a process pool)."""

    model: ModelSpec
    training: TrainingSpec
    search: SearchSpec
    cluster: ClusterSpec
    batch: BatchPolicy
    time_limit_s: float
    explain: bool = False  # search the smallest count that fits (Replan's "node count that would")


@dataclass(frozen=True)
class CellOutcome:
    """A cell's plan (None when none), its status and the reason."""

    status: CellStatus
    result: PlanResult | None
    reason: str = ""


def _request(
    task: CellTask, training: TrainingSpec, search: SearchSpec, limit: float
) -> PlanRequest:
    return PlanRequest(
        model=task.model,
        cluster=task.cluster,
        training=training,
        search=search,
        options=Options(time_limit_s=limit, explain=task.explain),
    )


def _one(task: CellTask, training: TrainingSpec, search: SearchSpec, budget: Budget) -> CellOutcome:
    budget.check()
    left = budget.remaining()
    limit = task.time_limit_s if left is None else max(min(task.time_limit_s, left), 1e-3)
    try:
        check_pins(resolve_model(task.model), resolve_cluster(task.cluster), search)
    except ValueError as err:  # a pin this count cannot hold (e.g. tp does not divide it)
        return CellOutcome(CellStatus.COUNT_NOT_USABLE, None, str(err))
    req = _request(task, training, search, limit)
    try:
        res = plan(req, stop_event=budget.stop)
    except TimeoutError:
        budget.check()
        return CellOutcome(CellStatus.UNSOLVED, None, "no layout found within the time limit")
    budget.check()  # a plan cut short by the stop event is not an answer
    if res.status is not PlanStatus.INFEASIBLE:
        return CellOutcome(CellStatus.PLANNED, res)
    why = res.explanation
    reason = why.reason if why else "no layout fits"
    if why is not None and why.min_memory_bytes > 0:
        return CellOutcome(CellStatus.DOES_NOT_FIT, res, reason)
    if res.solver is not None and res.solver.status == "UNKNOWN":
        return CellOutcome(CellStatus.UNSOLVED, res, "no layout found within the time limit")
    return CellOutcome(CellStatus.COUNT_NOT_USABLE, res, reason)


def cap_tokens(batch: BatchPolicy, training: TrainingSpec) -> int:
    """The largest global batch a cell may train (tokens; 0: the planner's default cap, the
    scaling law of `meshplan.solver.batch_size`)."""
    if batch.kind is BatchPolicyKind.FREE:
        return batch.max_global_batch_tokens or training.critical_batch_tokens
    return training.critical_batch_tokens


def solve_cell(task: CellTask, budget: Budget | None = None) -> CellOutcome:
    """The best plan of one cell under its batch policy."""
    budget = budget or Budget()
    b, t = task.batch, task.training
    if b.kind is BatchPolicyKind.FIXED_GLOBAL:
        return _one(
            task,
            t.model_copy(update={"global_batch_tokens": b.global_batch_tokens}),
            task.search,
            budget,
        )
    if b.kind is BatchPolicyKind.FREE:
        cap = cap_tokens(b, t)
        out = _one(task, t.model_copy(update={"critical_batch_tokens": cap}), task.search, budget)
        lo = b.min_global_batch_tokens
        if (
            out.status is CellStatus.PLANNED
            and lo
            and out.result.performance.global_batch_tokens < lo
        ):
            fixed = t.model_copy(update={"global_batch_tokens": lo, "critical_batch_tokens": cap})
            out = _one(task, fixed, task.search, budget)
            if out.status is not CellStatus.PLANNED:
                return CellOutcome(
                    CellStatus.COUNT_NOT_USABLE,
                    None,
                    f"the fastest batch is below min_global_batch_tokens ({lo}) and no layout "
                    f"trains {lo} tokens: {out.reason}",
                )
        return out
    return _per_replica(task, budget)


def _per_replica(task: CellTask, budget: Budget) -> CellOutcome:
    t, q, n = task.training, task.search, task.cluster.num_gpus
    per = task.batch.per_replica_batch_tokens
    cap = t.critical_batch_tokens
    gpn = resolve_cluster(task.cluster).gpn
    counts = fewer_gpu_counts(n, gpn) if q.allow_fewer_gpus else [n]
    dps = sorted({d for g in counts for d in divisors(g)}, reverse=True)
    if q.dp:
        dps = [d for d in dps if d == q.dp]
    best: CellOutcome | None = None
    tried: list[CellOutcome] = []
    for d in dps:
        if cap and d * per > cap:
            continue  # past the critical batch
        training = t.model_copy(update={"global_batch_tokens": d * per})
        out = _one(task, training, q.model_copy(update={"dp": d}), budget)
        tried.append(out)
        if out.status is CellStatus.PLANNED and (
            best is None
            or out.result.performance.tokens_per_s > best.result.performance.tokens_per_s
        ):
            best = out
    if best is not None:
        return best
    if not tried:
        return CellOutcome(
            CellStatus.COUNT_NOT_USABLE,
            None,
            f"every data-parallel degree of {n} GPUs times {per} tokens per replica exceeds the "
            f"critical batch ({cap} tokens)",
        )
    # Memory beats divisibility as the reason: some degree splits the batch but overflows.
    for status in (CellStatus.DOES_NOT_FIT, CellStatus.UNSOLVED, CellStatus.COUNT_NOT_USABLE):
        found = [o for o in tried if o.status is status]
        if found:
            return CellOutcome(status, found[0].result, found[0].reason)
    raise AssertionError("unreachable")


CellSolver = Callable[[Sequence[CellTask], Budget], list[CellOutcome]]


def run_cells(
    tasks: Sequence[CellTask], deadline: float | None, turn_cpu_s: float, *, stop: threading.Event
) -> list[CellOutcome]:
    """The first cells of `tasks`, in order, under a query's deadline (time.monotonic()) and
    stop event: what one turn of a server's solver slot runs (server.scheduler; module-level,
    so a worker process can). No cell starts once the turn has used `turn_cpu_s` of CPU time
    (one always runs); the caller sends the rest in a later turn."""
    budget = Budget(stop=stop, deadline=deadline)
    start = time.thread_time()  # this thread's: a server running solves on threads has others
    out: list[CellOutcome] = []
    for task in tasks:
        if out and time.thread_time() - start >= turn_cpu_s:
            break
        budget.check()
        out.append(solve_cell(task, budget))
    return out


def solve_cells(tasks: Sequence[CellTask], budget: Budget) -> list[CellOutcome]:
    """Every cell, in order, checking the budget between cells (the loop a pool can replace)."""
    out = []
    for task in tasks:
        budget.check()
        out.append(solve_cell(task, budget))
    return out
