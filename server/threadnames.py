"""The server's threads as Linux shows them (top -H, ps -L, /proc/PID/task/TID/comm): Python
3.11 does not name a thread for the system, so `threading.Thread(name=...)` stays invisible
there; the soak reads the event loop's thread by its name (its CPU time and run-queue wait)."""

from __future__ import annotations

import contextlib
from pathlib import Path


def name_this_thread(name: str) -> None:
    """The calling thread's name for Linux (15 characters at most); nothing elsewhere."""
    with contextlib.suppress(OSError):
        Path("/proc/thread-self/comm").write_text(name[:15])
