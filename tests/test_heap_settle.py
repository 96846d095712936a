"""The solver processes keep what each call leaves (the solver's caches) out of the garbage
collector's passes (server/memory.py settle_heap), and still collect cyclic garbage once the
frozen heap has doubled."""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import threading

from meshplan.server import dispatch
from meshplan.server.dispatch import ThreadRunner
from meshplan.server.pool import ProcessRunner
from meshplan.server.worker import YOUNG_PASS_OBJECTS

# a probe's garbage: a Node that refers to itself, and a weak reference that says when it is freed
_CYCLES = """
import weakref

class Node:
    pass

def cycle():
    n = Node()
    n.me = n
    return weakref.ref(n)
"""

_PROBE = (
    _CYCLES
    + """
import gc, json, time, weakref
from meshplan.server import memory

memory._SETTLE_CHECK = 1  # look at the frozen count after every call
memory._SETTLE_SPREAD = 10**9
memory._settled["check_at"] = 1
memory._SETTLE_FLOOR = 1_000
gc.collect()
first = memory.settle_heap()  # nothing collected since start: a full pass, then the baseline

def full_pass():
    t = time.perf_counter()
    gc.collect()
    return time.perf_counter() - t

kept = [[i] for i in range(300_000)]  # a cache: tracked, alive
unfrozen = min(full_pass() for _ in range(3))
small = cycle()  # garbage in a cycle, made before the heap has doubled
grown = memory.settle_heap()  # far more than twice the baseline: unfreeze, collect, freeze
small_freed = small() is None
frozen = min(full_pass() for _ in range(3))
late = cycle()
again = memory.settle_heap()  # no growth since: only frozen, and so kept
gc.collect()
print(json.dumps({
    "first": first, "grown": grown, "small_freed": small_freed, "again": again,
    "late_kept": late() is not None, "unfrozen_s": unfrozen, "frozen_s": frozen,
    "kept": len(kept),
}))
"""
)


def test_settled_calls_leave_the_caches_out_of_collections_and_cycles_are_still_collected() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["first"] and got["grown"] and not got["again"], got
    assert got["small_freed"], "a full pass must free cyclic garbage"
    assert got["late_kept"], "a frozen cycle is only freed at the next full pass"
    # a pass after settling walks only what came since, not the 300,000 kept lists
    assert got["frozen_s"] < got["unfrozen_s"] / 10, got


def test_the_thread_runner_settles_the_heap_after_every_call(monkeypatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(dispatch, "settle_heap", lambda: calls.append(1))

    def double(x: int, stop: threading.Event) -> int:
        return 2 * x

    def fail(stop: threading.Event) -> int:
        raise ValueError("bad")

    async def run() -> tuple[int, str]:
        runner = ThreadRunner(1)
        try:
            got = await runner.start(double, 21, stop=threading.Event())
            try:
                await runner.start(fail, stop=threading.Event())
            except ValueError as err:
                return got, str(err)
            return got, ""
        finally:
            runner.close()

    assert asyncio.run(run()) == (42, "bad")
    assert calls == [1, 1]


def collector_state(*, stop: threading.Event) -> tuple[bool, int, int]:
    """In a solver process: whether automatic collection is on, its young threshold, and how
    many frozen objects."""
    return gc.isenabled(), gc.get_threshold()[0], gc.get_freeze_count()


def test_a_solver_process_collects_young_objects_only_past_its_threshold() -> None:
    """A worker's start-up heap is frozen and its young passes wait for 50,000 new objects
    (Python's default: 700): a call that makes fewer runs none, as each settle's freeze resets
    the count; settle_heap's full pass, when the frozen heap has doubled, still runs."""
    pool = ProcessRunner(1, warm=False)
    try:
        assert pool.wait_ready(120) == 1

        async def go() -> tuple[bool, int, int]:
            return await pool.start(collector_state, stop=threading.Event())

        enabled, young, frozen = asyncio.run(go())
        assert enabled and young == YOUNG_PASS_OBJECTS > 700 and frozen > 10_000
    finally:
        pool.close()
        pool.join()


_DEFERRED = (
    _CYCLES
    + """
import asyncio, gc, json, time, weakref
from meshplan.server import memory

memory._SETTLE_FLOOR = 1_000
memory.defer_full_passes()
gc.collect()

kept = []
settles = []
old = None
for call in range(40):  # queries filling a cache: the frozen heap far past doubled
    kept.append([[i] for i in range(20_000)])
    if call == 20:  # a cycle frozen as garbage (made unreachable after its query settled)
        holder = [Node()]
        holder[0].me = holder[0]
        old = weakref.ref(holder[0])
    t = time.perf_counter()
    young = cycle()  # the query's own cycle: collected young, not frozen
    memory.settle_heap()
    settles.append(time.perf_counter() - t)
    if call == 20:
        del holder
young_freed = young() is None
old_kept_busy = old() is not None

async def main():
    busy = asyncio.create_task(memory.collect_when_idle(lambda: False, 0.01, 0.02))
    await asyncio.sleep(0.2)
    busy.cancel()
    kept_while_busy = old() is not None
    t = time.perf_counter()
    idle = asyncio.create_task(memory.collect_when_idle(lambda: True, 0.01, 0.02))
    while old() is not None and time.perf_counter() - t < 60:
        await asyncio.sleep(0.01)
    idle.cancel()
    return kept_while_busy, old() is None

kept_while_busy, freed_when_idle = asyncio.run(main())
t = time.perf_counter()
gc.unfreeze(); gc.collect(); gc.freeze()
full = time.perf_counter() - t
print(json.dumps({
    "young_freed": young_freed, "old_kept_busy": old_kept_busy,
    "kept_while_busy": kept_while_busy, "freed_when_idle": freed_when_idle,
    "max_settle_s": max(settles), "full_s": full,
}))
"""
)


def test_deferred_settling_never_runs_the_full_pass_in_a_call_and_runs_it_when_idle() -> None:
    """In the server process (`defer_full_passes`), settle_heap collects the young generations
    and freezes, and never walks the frozen heap: its longest call is far shorter than the full
    pass it used to run there; the full pass waits for `collect_when_idle` to see no call in
    progress, and then frees the cyclic garbage that was frozen."""
    out = subprocess.run(
        [sys.executable, "-c", _DEFERRED], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["young_freed"], "a query's own cycle must be collected before the freeze"
    assert got["old_kept_busy"] and got["kept_while_busy"], "no full pass while calls run"
    assert got["freed_when_idle"], "the full pass must run once idle, and free frozen cycles"
    assert got["max_settle_s"] < got["full_s"] / 5, got
