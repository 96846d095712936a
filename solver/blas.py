"""One BLAS thread while a plan is computed.

The bounds' matrix products (cpsat/bounds.py) are small: OpenBLAS's threads cost more to wake
than they save, and on a loaded machine they contend with the other solves. Measured over the
benchmark suite's 64 plans from a cold cache on a 2-core machine (under load): 7.8 s with
OpenBLAS's default of 2 threads, 4.8 s with 1. The limit is process-wide (BLAS has no per-thread
setting), so it is taken while any plan runs and the original restored when the last ends.
It is set on threadpoolctl's BLAS library controllers directly (two calls into each library,
~3 us): its `limit()` context re-inspects every loaded library each time (~130 us a plan).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

from threadpoolctl import LibController, ThreadpoolController

_lock = threading.Lock()
_depth = 0
_restore: list[tuple[LibController, int]] = []  # (BLAS library, its thread count before)


@cache
def _blas() -> tuple[LibController, ...]:
    """The BLAS libraries loaded (threadpoolctl's controllers; found once)."""
    return tuple(ThreadpoolController().select(user_api="blas").lib_controllers)


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Limit BLAS to one thread for the duration (re-entrant, shared by concurrent plans)."""
    global _depth
    with _lock:
        if _depth == 0:
            for lib in _blas():
                before = lib.num_threads
                if before != 1:
                    lib.set_num_threads(1)
                    _restore.append((lib, before))
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                while _restore:
                    lib, before = _restore.pop()
                    lib.set_num_threads(before)
