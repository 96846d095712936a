"""Many plans on a Ray cluster: the cluster (Ray's address rules), warm worker actors, and a
dispatcher that keeps them busy and hands answers back in the order they finish.

A worker is a Ray actor set up as a server's solver process is (server/worker.py: lower
priority, freed heap kept, warm-up plan, start-up heap frozen, the heap settled after each call),
so its caches (solver/cache.py) stay warm across every plan it is sent (the warm-up plan is
optional: a sweep's first plan warms the caches as well). Plans go in chunks, two
chunks in flight per actor, so an actor never waits for the driver. An actor (or its node) that
dies fails the calls it held: their chunks are sent again to a fresh actor, and since a chunk's
answers are handed back only when the whole chunk has come back, none is lost or handed back
twice. Leaving early (Ctrl-C, SIGTERM, a consumer that stops) kills every actor at once
(`ray.kill`): the cluster's work stops with the driver.

Ray is optional (`pip install 'meshplan[ray]'`); without it `import_ray` raises a one-line
ValueError that says what to install. The paths that use this (sweep, batch, the scheduler
queries) are in tools/sweep/ray_paths.py.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

RAY_MISSING = "--ray: Ray is not installed; install it with: pip install 'meshplan[ray]'"
IN_FLIGHT = 2  # chunks sent to each actor at once: one solving, one waiting in its queue
MAX_CHUNK = 8  # plans per call at most: ~0.1 ms of the driver's time a plan instead of ~1 ms
_POLL_S = 0.2  # ray.wait's timeout, so a Ctrl-C or a stop is seen at once
_TRIM_EVERY_S = 5.0  # as server/worker.py: freed heap returned to the system at most this often
# one plan of PlanWorker.batch: (result JSON, "", "", []) or (None, status name, message,
# [(field, description), ...])
BatchAnswer = tuple[Any, str, str, list[tuple[str, str]]]


def import_ray() -> Any:
    """The `ray` module, or ValueError(RAY_MISSING) when it is not installed."""
    try:
        import ray
    except ImportError:
        raise ValueError(RAY_MISSING) from None
    return ray


@dataclass
class ClusterInfo:
    """The cluster a run uses: its address, its CPUs, whether this process started it, and how
    long connecting (or starting it) took."""

    address: str
    cpus: int
    started: bool
    connect_s: float


@contextlib.contextmanager
def ray_cluster(address: str | None = None, cpus: int = 0) -> Iterator[ClusterInfo]:
    """Connect to Ray by its own address rules: `auto` (the cluster running on this machine),
    `ray://HOST:10001` (Ray Client), `HOST:6379`, or None (RAY_ADDRESS if set, else a new local
    cluster of `cpus` CPUs, default one per usable CPU, shut down on leaving). A Ray already
    initialised in this process (a library caller's) is used as it is and left running."""
    ray = import_ray()
    t0 = time.monotonic()
    started = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {
            "address": address or None,
            "include_dashboard": False,
            "log_to_driver": False,  # the command's own lines, not every worker's log
            "logging_level": logging.WARNING,
        }
        if (address or "").startswith("ray://"):  # Ray Client: the others would go to the
            kwargs = {"address": address}  # server's own ray.init, with a warning
        elif not address and not os.environ.get("RAY_ADDRESS"):
            from meshplan.server.settings import usable_cpus

            kwargs["num_cpus"] = cpus or usable_cpus()
        try:
            with warnings.catch_warnings():  # Ray Client's time-out warning: the error says it
                warnings.simplefilter("ignore", UserWarning)
                ray.init(**kwargs)
        except ConnectionError as err:
            raise ValueError(
                f"--ray {address or ''}: no Ray cluster to connect to: {err}"
            ) from None
        started = True
    try:
        cpus_now = int(ray.cluster_resources().get("CPU", 1))
        yield ClusterInfo(address or "local", cpus_now, started, time.monotonic() - t0)
    finally:
        if started:
            ray.shutdown()


class PlanWorker:
    """The body of a worker actor (made remote by `_actor_class`): one call at a time."""

    def __init__(self, warm: bool = True) -> None:
        _prepare_process(warm)
        self._trim = _trimmer()
        self._trimmed = time.monotonic()

    def pid(self) -> int:
        """This actor's process id (the tests kill it)."""
        return os.getpid()

    def plans(
        self, requests: list[dict[str, Any]]
    ) -> list[tuple[dict[str, Any] | None, str | None]]:
        """solve_request of each request: (the result as JSON, None) or (None, the error)."""
        from meshplan.tools.sweep.solve import solve_request

        out = [solve_request(r) for r in requests]  # each settles the heap after its plan
        self._maybe_trim()
        return out

    def batch(self, requests: list[dict[str, Any]]) -> list[BatchAnswer]:
        """Each plan as a PlanBatch item would have it: (result JSON, "", "", []) or (None, the
        gRPC status name, the message, the field violations as (field, description) pairs, their
        paths relative to the request: the driver puts `requests[i].` before them)."""
        from pydantic import ValidationError

        from meshplan.server.memory import settle_heap
        from meshplan.server.validate import from_validation_error
        from meshplan.server.work import invalid
        from meshplan.solver.planner import plan
        from meshplan.solver.schema import PlanRequest

        out: list[BatchAnswer] = []
        for r in requests:
            try:
                req = PlanRequest.model_validate(r)
            except ValidationError as err:  # as the server's parse() reports a bad item
                bad = from_validation_error(err)
                out.append((None, "INVALID_ARGUMENT", bad[0].description, _pairs(bad)))
                continue
            try:
                out.append((plan(req).model_dump(mode="json"), "", "", []))
            except (ValueError, KeyError, OverflowError) as err:  # as server/work.py maps them
                failure = invalid(err, req)
                out.append((None, "INVALID_ARGUMENT", failure.message, _pairs(failure.violations)))
            except TimeoutError as err:
                out.append((None, "DEADLINE_EXCEEDED", f"no plan found: {err}", []))
            except Exception as err:  # noqa: BLE001  one request's failure is its error row
                out.append((None, "INTERNAL", f"{type(err).__name__}: {err}", []))
            finally:
                settle_heap()
        self._maybe_trim()
        return out

    def cells(self, tasks: list[Any], seconds_left: float | None) -> tuple[bool, Any]:
        """The cells under the query's time left: (True, outcomes) or (False, the exception,
        e.g. QueryStopped, which pickles intact)."""
        from meshplan.server.memory import settle_heap
        from meshplan.solver.scheduler.cells import Budget, solve_cell

        deadline = None if seconds_left is None else time.monotonic() + seconds_left
        budget = Budget(deadline=deadline)  # this process's clock: the driver's may differ
        try:
            out = []
            for task in tasks:
                budget.check()
                out.append(solve_cell(task, budget))
                settle_heap()
            return True, out
        except Exception as err:  # noqa: BLE001  handed to the driver, raised there
            return False, err
        finally:
            self._maybe_trim()

    def _maybe_trim(self) -> None:
        if self._trim is not None and time.monotonic() - self._trimmed > _TRIM_EVERY_S:
            self._trim()
            self._trimmed = time.monotonic()


def _pairs(violations: Sequence[Any]) -> list[tuple[str, str]]:
    """server/validate.py's Violations as plain (field, description) pairs (they cross from the
    actor as plain data)."""
    return [(v.field, v.description) for v in violations]


def _prepare_process(warm: bool) -> None:
    """What server/worker.py's worker_main does before its first call: lower priority, freed
    heap kept, the solver imported (with `warm`, one small plan solved too, as a server's
    process does for its first caller's sake), the start-up heap frozen."""
    from meshplan.server import worker
    from meshplan.server.memory import keep_freed_heap

    with contextlib.suppress(OSError):
        os.nice(worker.WORKER_NICENESS)
    keep_freed_heap()
    if warm:
        worker.warm_up()  # the solver's imports and one small plan
    else:
        from meshplan.solver import plan
        from meshplan.solver.cpsat import solve
        from meshplan.solver.scheduler import cells

        del plan, solve, cells
    gc.collect()
    gc.freeze()
    gc.set_threshold(worker.YOUNG_PASS_OBJECTS, *gc.get_threshold()[1:])


def _trimmer() -> Callable[[], int] | None:
    from meshplan.server.memory import trimmer

    return trimmer()


_ACTOR: Any = None


def _actor_class() -> Any:
    """PlanWorker as a Ray actor of one CPU, not restarted by Ray (the dispatcher replaces it)."""
    global _ACTOR
    if _ACTOR is None:
        ray = import_ray()
        _ACTOR = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(PlanWorker)
    return _ACTOR


class WorkersLost(RuntimeError):
    """Worker actors kept dying: more replacements than the dispatcher allows."""


@dataclass
class _Slot:
    """One actor, its generation (how many were replaced before it), whether it has started
    (answered its ping) and its calls in flight."""

    actor: Any
    generation: int = 0
    ready: bool = False
    load: int = 0


@dataclass
class Workers:
    """Up to `count` warm worker actors (0: one per CPU of the cluster), started on first use
    and kept across calls; `close` kills them. `lost` counts the actors that died."""

    count: int = 0
    warm: bool = False
    max_lost: int = 0  # replacements allowed (0: 4 per actor)
    lost: int = 0
    _slots: list[_Slot] = field(default_factory=list)

    def _start(self, wanted: int) -> None:
        ray = import_ray()
        cpus = int(ray.cluster_resources().get("CPU", 1))
        n = max(1, min(self.count or cpus, wanted))
        while len(self._slots) < n:
            self._slots.append(_Slot(_actor_class().remote(self.warm)))

    def pids(self) -> list[int]:
        """The actors' process ids (starts one actor per CPU if none runs yet)."""
        ray = import_ray()
        self._start(self.count or 1 << 30)
        pids = ray.get([s.actor.pid.remote() for s in self._slots])
        for slot in self._slots:
            slot.ready = True
        return pids

    def close(self) -> None:
        """Kill every actor now: their calls stop with them."""
        ray = import_ray()
        for slot in self._slots:
            with contextlib.suppress(Exception):
                ray.kill(slot.actor, no_restart=True)
        self._slots.clear()

    def run(
        self,
        method: str,
        items: Sequence[Any],
        args: Callable[[], tuple[Any, ...]] = tuple,
        check: Callable[[], None] | None = None,
    ) -> Iterator[tuple[list[int], Any]]:
        """Call `method(chunk, *args())` on the actors over `items` in chunks; yield
        (indices of the chunk, the call's answer) as calls finish. `check` runs while waiting
        (a query's budget: it raises to stop). Any exit before the end kills the actors."""
        ray = import_ray()
        from ray.exceptions import ObjectLostError, RayActorError

        if not items:
            return
        self._start(len(items))
        per = max(1, min(MAX_CHUNK, len(items) // (len(self._slots) * IN_FLIGHT * 4)))
        todo = deque(list(range(i, min(i + per, len(items)))) for i in range(0, len(items), per))
        # ref -> (slot, generation, chunk); chunk None: the actor's start-up ping. Chunks go only
        # to actors that have answered it, so an actor that cannot be placed (no free CPU, its
        # node gone) holds no work: the others do it.
        flying: dict[Any, tuple[int, int, list[int] | None]] = {}
        for i, slot in enumerate(self._slots):
            if not slot.ready:
                flying[slot.actor.pid.remote()] = (i, slot.generation, None)
        limit = self.max_lost or 4 * len(self._slots)
        finished = False
        try:
            while todo or any(chunk is not None for _, _, chunk in flying.values()):
                for i, slot in enumerate(self._slots):
                    while todo and slot.ready and slot.load < IN_FLIGHT:
                        chunk = todo.popleft()
                        ref = getattr(slot.actor, method).remote([items[j] for j in chunk], *args())
                        flying[ref] = (i, slot.generation, chunk)
                        slot.load += 1
                ready: list[Any] = []
                while not ready:
                    if check is not None:
                        check()
                    ready, _ = ray.wait(list(flying), num_returns=1, timeout=_POLL_S)
                ref = ready[0]
                i, generation, chunk = flying.pop(ref)
                slot = self._slots[i]
                try:
                    answer = ray.get(ref)
                except (RayActorError, ObjectLostError) as err:  # the actor or its node died
                    if chunk is not None:
                        todo.appendleft(chunk)  # sent again; nothing of it was handed back
                    if generation == slot.generation:  # first of its calls to fail: replace it
                        self.lost += 1
                        if self.lost > limit:
                            why = str(err).strip().splitlines()[-1:] or ["no reason given"]
                            raise WorkersLost(
                                f"{self.lost} Ray worker actors died (is meshplan of "
                                f"this version installed on every node?); the last: {why[0]}"
                            ) from None
                        slot = self._slots[i] = _Slot(
                            _actor_class().remote(self.warm), generation + 1
                        )
                        flying[slot.actor.pid.remote()] = (i, slot.generation, None)
                    continue
                if chunk is None:  # the ping: the actor has started
                    slot.ready = slot.ready or generation == slot.generation
                    continue
                if generation == slot.generation:  # else: a replaced actor's answer, still good
                    slot.load -= 1
                yield chunk, answer
            finished = True
        finally:
            if not finished:  # Ctrl-C, a stop, a consumer that left: stop the cluster's work
                self.close()

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
