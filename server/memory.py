"""Give freed heap memory back to the operating system.

glibc keeps the memory of freed large buffers in its heaps, so a burst of large requests would
hold the server's peak RSS for good; `malloc_trim(0)` every few seconds returns it. Elsewhere
than glibc (no libc.so.6) this does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
from collections.abc import Callable

log = logging.getLogger("meshplan.server")


def trimmer() -> Callable[[], int] | None:
    """glibc's malloc_trim(0), or None where there is no glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    return lambda: trim(0)


async def trim_periodically(interval_s: float) -> None:
    """Trim the heaps every `interval_s` seconds, off the event loop, until cancelled."""
    trim = trimmer()
    if trim is None:
        return
    while True:
        await asyncio.sleep(interval_s)
        await asyncio.to_thread(trim)
