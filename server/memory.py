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
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import importlib
import logging
from collections.abc import Callable

log = logging.getLogger("meshplan.server")


def trimmer() -> Callable[[], int] | None:
    """glibc's malloc_trim(0), or None where there is no glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    return lambda: trim(0)


async def trim_periodically(interval_s: float) -> None:
    """Trim the heaps every `interval_s` seconds, off the event loop, until cancelled."""
    trim = trimmer()
    if trim is None:
        return
    while True:
        await asyncio.sleep(interval_s)
        await asyncio.to_thread(trim)


# What the first plan and the first scheduler query would import: loaded before the freeze.
_WARM_MODULES = ("meshplan.solver.planner", "meshplan.solver.scheduler")


def freeze_startup_heap() -> int:
    """Import the solver, collect, and freeze every object left (gc.freeze); the count frozen.
    For the server's own process only: a frozen object is never collected."""
    for name in _WARM_MODULES:
        importlib.import_module(name)
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
