"""Where solves run: one small interface between the event loop and the solver.

`runner.start(fn, *args, stop=event)` begins a blocking solve off the event loop and returns an
asyncio future that completes when the solve has really ended; setting `stop` asks it to end
now. The runtime answers a call at its deadline without waiting for that future, and hands the
solver slot on only when the future completes, so the slots always count what really runs.
`ThreadRunner` uses a thread pool: CP-SAT releases the GIL while it solves, and the event loop
that answers health, reflection and the catalog stays free. A process-pool runner only has to
keep the same contract (forward `stop` to the worker; complete the future when it returns).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class SolveRunner(Protocol):
    """Runs blocking solves off the event loop."""

    def start(self, fn: Callable[..., T], *args: Any, stop: threading.Event) -> asyncio.Future[T]:
        """Begin fn(*args); the future completes with its result once it has returned."""
        ...

    def close(self) -> None:
        """Release the workers (solves still running are left to finish)."""
        ...


class ThreadRunner:
    """SolveRunner over a thread pool of `workers` threads (one per solver slot); the solver
    itself polls `stop` (solver.plan's stop_event), so the runner only has to pass it on."""

    def __init__(self, workers: int) -> None:
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="meshplan-solve")

    def start(self, fn: Callable[..., T], *args: Any, stop: threading.Event) -> asyncio.Future[T]:
        return asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
