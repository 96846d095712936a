"""The server process's memory: freed heap given back, and the start-up heap kept out of the
garbage collector's full passes.

glibc keeps the memory of freed large buffers in its heaps, so a burst of large requests would
hold the server's peak RSS for good; `malloc_trim(0)` every few seconds returns it. Elsewhere
than glibc (no libc.so.6) this does nothing.

A full (generation-2) collection holds the GIL while it walks every tracked object, and the
modules a server loads (the solver, OR-Tools, protobuf, grpc) are most of them: on a solver
thread it stalled the event loop for up to ~110 ms, so calls ended late and health answered
slowly. `freeze_startup_heap()` moves what exists at start-up to the permanent generation
(`gc.freeze`, CPython >= 3.7), so full passes walk only what requests created.

What requests create mostly stays too: the solver's caches (solver/cache.py) hold cost models,
spaces and tables, over half a million tracked objects after a few hundred plans, and each full
pass over them took ~120 ms (1.9 ms a plan over a 1,000-plan sweep). `settle_heap()`, called
after each solve, freezes what the solve left as well, so the collector walks only what the next
solve makes; evicted cache entries are still freed, by reference counting. Cyclic garbage among
frozen objects would be kept, so once the frozen heap has doubled since the last full pass,
`settle_heap` unfreezes, collects and freezes again (none was found over 500 sweep plans).
In the server process that pass (and the count that decides it) would hold the GIL while the
event loop waits: there `serve` defers both to `collect_when_idle`, which runs them when no call
is in progress (`python -m benchmarks.soak_heap`: with 60 curves of 2,048 cells kept, the
longest settle 1,134 ms and the loop's longest lag 912 ms inline; 1.7 ms and 17 ms deferred).
A solver process (server/worker.py) runs a young collection only past 50,000 new objects, not
Python's 700: each settle's freeze resets the count, so a call as the sweep makes them runs
none. Its young passes at 700 found no cyclic garbage over the 1,000 sweep plans (601 passes,
0 objects) and cost ~1% of its instructions a plan; cycles a call leaves wait, frozen, for the
full pass, unless the call itself made 50,000 objects.

A process that solves also keeps the heap it freed for the next solve (`keep_freed_heap`): by
default glibc hands large freed blocks back to the system at once (munmap, and trimming the top
of the heap past 128 KiB), and the next solve faults the same pages in again, each zeroed by the
kernel. On this 2-core VM that was ~75 page faults a plan and a quarter of a solver process's
system time; the periodic `malloc_trim(0)` still returns what stays free.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import importlib
import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("meshplan.server")


def _glibc(name: str) -> Callable[..., int] | None:
    """glibc's function `name`, or None where there is no glibc."""
    try:
        return getattr(ctypes.CDLL("libc.so.6"), name)
    except (OSError, AttributeError):
        return None


def trimmer() -> Callable[[], int] | None:
    """glibc's malloc_trim(0), or None where there is no glibc."""
    trim = _glibc("malloc_trim")
    return None if trim is None else lambda: trim(0)


# mallopt(3) parameters (glibc malloc.h): M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD.
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
KEEP_HEAP = (
    (_M_MMAP_THRESHOLD, 32 * 2**20),  # blocks up to 32 MiB from the heap, reused when freed
    (_M_TRIM_THRESHOLD, 128 * 2**20),  # free() trims the heap's top only past 128 MiB
    (_M_TOP_PAD, 16 * 2**20),  # the heap grows 16 MiB at a time
)


def keep_freed_heap() -> bool:
    """Set glibc's malloc to keep freed blocks for reuse instead of returning them at once (see
    the module's docstring); False where there is no glibc or it refused a value."""
    mallopt = _glibc("mallopt")
    return mallopt is not None and all(mallopt(param, value) == 1 for param, value in KEEP_HEAP)


async def trim_periodically(interval_s: float) -> None:
    """Trim the heaps every `interval_s` seconds, off the event loop, until cancelled."""
    trim = trimmer()
    if trim is None:
        return
    while True:
        await asyncio.sleep(interval_s)
        await asyncio.to_thread(trim)


# What the first plan and the first scheduler query would import: loaded before the freeze
# (the CP-SAT modules, and OR-Tools with them, load lazily in the CLI: solver/cpsat/search.py).
_WARM_MODULES = (
    "meshplan.solver.planner",
    "meshplan.solver.scheduler",
    "meshplan.solver.cpsat.solve",
)


FULL_PASS_EVERY = 100  # generation-1 collections between two full ones in the server process


def freeze_startup_heap() -> int:
    """Import the solver, collect, and freeze every object left (gc.freeze); the count frozen.
    Then a full pass only every FULL_PASS_EVERY generation-1 passes, not Python's 10: under
    the soak's fuzz each took 100-500 ms (16 in 40,000 calls) and the event loop waited them
    out; at 100, none in 40,000. For the server's own process only: a frozen object is never
    collected."""
    for name in _WARM_MODULES:
        importlib.import_module(name)
    gc.collect()
    gc.freeze()
    gc.set_threshold(*gc.get_threshold()[:2], FULL_PASS_EVERY)
    return gc.get_freeze_count()


# A full collection once the frozen heap has grown this much since the last one (and never
# below _SETTLE_FLOOR objects, so a small heap is not collected after every call). Counting the
# frozen objects walks them all (~50 ns each: 30 ms for 600,000), so the count is taken after
# _SETTLE_CHECK calls at first and then after one call per _SETTLE_SPREAD objects it found:
# about 0.05 ms a call.
_SETTLE_GROWTH = 2.0
_SETTLE_FLOOR = 200_000
_SETTLE_CHECK = 64
_SETTLE_SPREAD = 1_000
_settle_lock = threading.Lock()
_settled: dict[str, Any] = {
    "after_full": 0,
    "calls": 0,
    "check_at": _SETTLE_CHECK,
    "defer": False,  # the server process: counting and full passes wait for an idle moment
    "looked_at": 0,  # `calls` when settle_when_idle last looked
}


def defer_full_passes(defer: bool = True) -> None:
    """In the server process: `settle_heap` neither counts the frozen heap nor runs the full
    pass (the count walks every frozen object, the pass unfreezes the whole heap, start-up
    included: both hold the GIL, and under the soak a pass took 100-500 ms that the event loop
    waited out while calls passed their deadlines); it collects the young generations and
    freezes, and `collect_when_idle` does the rest when no call is in progress."""
    with _settle_lock:
        _settled["defer"] = defer


def settle_heap() -> bool:
    """After a solve: freeze what it left (the caches' new entries) so collections skip it, and
    run one full collection when the frozen heap has doubled since the last; True if it ran.
    Deferred (`defer_full_passes`): the young generations collected first (a query's cycles:
    ~1 ms), and the rest left to `settle_when_idle`."""
    with _settle_lock:
        if _settled["defer"]:
            gc.collect(1)
            gc.freeze()
            _settled["calls"] += 1
            return False
        gc.freeze()  # O(1): the generations' lists are spliced onto the permanent one
        _settled["calls"] += 1
        if _settled["calls"] < _settled["check_at"]:
            return False
        return _count_and_collect()


def settle_when_idle() -> bool:
    """The deferred half of settle_heap, for an idle moment: if anything was settled since the
    last look, count the frozen heap and run the full pass if it has doubled; True if it ran."""
    with _settle_lock:
        if _settled["calls"] == _settled["looked_at"]:
            return False
        _settled["looked_at"] = _settled["calls"]
        return _count_and_collect()


def _count_and_collect() -> bool:
    """Under _settle_lock: a full pass if the frozen heap has doubled since the last one."""
    frozen = gc.get_freeze_count()
    ran = frozen > _SETTLE_GROWTH * max(_settled["after_full"], _SETTLE_FLOOR)
    if ran:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        frozen = _settled["after_full"] = gc.get_freeze_count()
    _settled["check_at"] = _settled["calls"] + max(_SETTLE_CHECK, frozen // _SETTLE_SPREAD)
    return ran


IDLE_CHECK_S = 1.0  # how often collect_when_idle looks
IDLE_QUIET_S = 15.0  # no call in progress this long: idle (a pause between bursts is not)


async def collect_when_idle(
    idle: Callable[[], bool], every_s: float = IDLE_CHECK_S, quiet_s: float = IDLE_QUIET_S
) -> None:
    """Until cancelled: `settle_when_idle` once `idle()` has held at every look for `quiet_s`.
    It runs on the event loop (a collection holds the GIL wherever it runs), so only when no
    call waits for the loop; under unbroken load it waits: the caches it would walk are bounded
    in bytes, and a query's own cycles are collected young before its heap is frozen."""
    quiet_since: float | None = None
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(every_s)
        if not idle():
            quiet_since = None
            continue
        now = loop.time()
        quiet_since = now if quiet_since is None else quiet_since
        if now - quiet_since >= quiet_s:
            settle_when_idle()
