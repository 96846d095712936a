"""The event loop's thread is named for Linux, so the soak (and top -H) can find it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from meshplan.server.threadnames import name_this_thread


@pytest.mark.skipif(not Path("/proc/thread-self/comm").exists(), reason="Linux only")
def test_a_thread_named_shows_its_name_to_linux() -> None:
    seen: list[str] = []

    def run() -> None:
        name_this_thread("meshplan-loop-and-more")
        seen.append(Path("/proc/thread-self/comm").read_text().strip())

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == ["meshplan-loop-a"]  # 15 characters: Linux's TASK_COMM_LEN less the NUL
