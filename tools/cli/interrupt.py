"""Ctrl-C while a solve runs: the solve stops at once and the command exits 130, never with a
partial answer that looks whole."""

from __future__ import annotations

import threading
from collections.abc import Callable
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
