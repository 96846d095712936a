"""Where solves run: one small interface between the event loop and the solver.

The servicer awaits `runner.run(fn, *args, stop=event)`; the runner owns the threads (or, later,
processes) the solves run on. `ThreadRunner` uses a thread pool: CP-SAT releases the GIL while it
solves, and the event loop that answers health, reflection and the catalog stays free. A process
pool runner only has to honour the same contract: `stop` set means "finish now", and `run`
returns only once the solve has really ended, so a solver slot is never handed on early.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class SolveRunner(Protocol):
    """Runs one blocking solve off the event loop."""

    async def run(self, fn: Callable[..., T], *args: Any, stop: threading.Event) -> T:
        """fn(*args); if the awaiting task is cancelled, set `stop`, wait for fn to return,
        and re-raise the cancellation."""
        ...

    def close(self) -> None:
        """Release the workers (solves still running are left to finish)."""
        ...


class ThreadRunner:
    """SolveRunner over a thread pool of `workers` threads (one per solver slot)."""

    def __init__(self, workers: int) -> None:
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="meshplan-solve")

    async def run(self, fn: Callable[..., T], *args: Any, stop: threading.Event) -> T:
        future = asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            stop.set()  # the solver polls this event (and CP-SAT is told to stop)
            await asyncio.wait({future})  # the slot stays taken until the thread is free
            if not future.cancelled():
                future.exception()  # retrieved: the call has ended, its outcome is moot
            raise

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
