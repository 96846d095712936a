"""Ctrl-C while a solve runs: the solve stops at once and the command exits 130, never with a
partial answer that looks whole."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")


def interruptible(work: Callable[[threading.Event], T]) -> T:
    """work(stop) on a worker thread, so that Ctrl-C reaches the main thread at once even while
    CP-SAT or a gRPC call holds the worker: then `stop` is set, the worker gets a moment to wind
    down, and KeyboardInterrupt goes on up."""
    stop = threading.Event()
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = work(stop)
        except BaseException as e:  # noqa: BLE001  handed to the main thread
            box["error"] = e

    worker = threading.Thread(target=target, name="meshplan-solve", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.05)
    except KeyboardInterrupt:
        stop.set()
        worker.join(5.0)
        raise
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C so the same clean-up runs (a sweep stops
    its worker processes); the command exits 143 (128 + SIGTERM)."""


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises Terminated in the main thread (elsewhere: no change)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise Terminated()

    before = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)
