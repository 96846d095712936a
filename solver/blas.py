"""One BLAS thread while a plan is computed.

The bounds' matrix products (cpsat/bounds.py) are small: OpenBLAS's threads cost more to wake
than they save, and on a loaded machine they contend with the other solves. Measured over the
benchmark suite's 64 plans from a cold cache on a 2-core machine (under load): 7.8 s with
OpenBLAS's default of 2 threads, 4.8 s with 1. The limit is process-wide (BLAS has no per-thread
setting), so it is taken while any plan runs and the original restored when the last ends.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

from threadpoolctl import ThreadpoolController

_lock = threading.Lock()
_depth = 0
_limiter = None


@cache
def _controller() -> ThreadpoolController:
    return ThreadpoolController()


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Limit BLAS to one thread for the duration (re-entrant, shared by concurrent plans)."""
    global _depth, _limiter
    with _lock:
        if _depth == 0:
            _limiter = _controller().limit(limits=1, user_api="blas")
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _limiter is not None:
                _limiter.restore_original_limits()
                _limiter = None
