"""One BLAS thread while a plan is computed.

The bounds' matrix products (cpsat/bounds.py) are small: OpenBLAS's threads cost more to wake
than they save, and on a loaded machine they contend with the other solves. Measured over the
benchmark suite's 64 plans from a cold cache on a 2-core machine (under load): 7.8 s with
OpenBLAS's default of 2 threads, 4.8 s with 1. The limit is process-wide (BLAS has no per-thread
setting), so it is taken while any plan runs and the original restored when the last ends.
It is set on threadpoolctl's BLAS library controllers directly (two calls into each library,
~3 us): its `limit()` context re-inspects every loaded library each time (~130 us a plan).
A process that started its BLAS on one thread (the command line sets OPENBLAS_NUM_THREADS=1
before numpy loads) says so with started_on_one_thread(), and threadpoolctl never loads (its
import and library scan: 19 M instructions, 1.5% of the first plan's).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from threadpoolctl import LibController

ONE_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_lock = threading.Lock()
_depth = 0
_restore: list[tuple[LibController, int]] = []  # (BLAS library, its thread count before)
_one_thread_from_start = False


def started_on_one_thread() -> bool:
    """Called before numpy loads: when every BLAS thread variable is 1, the BLAS library starts
    with one thread and one_blas_thread has nothing to do in this process. True if so."""
    global _one_thread_from_start
    if "numpy" not in sys.modules and all(os.environ.get(k) == "1" for k in ONE_THREAD_VARIABLES):
        _one_thread_from_start = True
    return _one_thread_from_start


@cache
def _blas() -> tuple[LibController, ...]:
    """The BLAS libraries loaded (threadpoolctl's controllers; found once)."""
    from threadpoolctl import ThreadpoolController

    return tuple(ThreadpoolController().select(user_api="blas").lib_controllers)


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Limit BLAS to one thread for the duration (re-entrant, shared by concurrent plans)."""
    global _depth
    if _one_thread_from_start:
        yield
        return
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
