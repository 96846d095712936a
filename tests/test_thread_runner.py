"""ThreadRunner hands a solve's outcome to the event loop itself: results, exceptions, and a
solve still queued when the pool shuts down (its future is cancelled, never left pending)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from meshplan.server.dispatch import ThreadRunner


def test_outcomes_and_a_queued_solve_cancelled_at_shutdown() -> None:
    release = threading.Event()
    started = threading.Event()

    def held(stop: threading.Event) -> str:
        started.set()
        release.wait(10)
        return "ran"

    def fail(stop: threading.Event) -> str:
        raise ValueError("bad input")

    async def run() -> tuple[str, bool, str]:
        runner = ThreadRunner(1)
        with pytest.raises(ValueError, match="bad input"):
            await runner.start(fail, stop=threading.Event())
        first = runner.start(held, stop=threading.Event())
        queued = runner.start(held, stop=threading.Event())
        await asyncio.to_thread(started.wait, 10)
        runner.close()  # the queued solve never starts
        release.set()
        result = await asyncio.wait_for(first, 10)
        await asyncio.wait_for(asyncio.wait([queued]), 10)
        return result, queued.cancelled(), "done"

    assert asyncio.run(run()) == ("ran", True, "done")
