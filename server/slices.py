"""The event loop's thread asks Linux for short time slices, so it runs soon after it wakes.

Since Linux 6.6 the fair scheduler is EEVDF (Stoica and Abdel-Wahab 1995, "Earliest Eligible
Virtual Deadline First"): a task's virtual deadline is its eligible time plus its slice over
its weight, and the eligible task with the earliest deadline runs next. Since 6.12 a task may
ask for its own slice (sched_setattr(2) with SCHED_OTHER and `sched_runtime`, 0.1-100 ms; no
privilege needed): a short one gives the loop's thread, which runs for well under a
millisecond per wake-up, earlier deadlines than the solves' and the callers' processes that
run for their whole 3 ms default slice, so it is picked sooner when it wakes on a busy machine
(kernel/sched/fair.c, "sched/fair: Implement an EEVDF-like scheduling policy" and
"sched/eevdf: Allow shorter slices to wakeup-preempt", Linux 6.6 and 6.12). Elsewhere (older
kernels, other systems) nothing changes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import threading
from pathlib import Path

LOOP_SLICE_NS = 500_000  # 0.5 ms: the loop's own work per wake-up is shorter (py-spy, soak load)

# sched_setattr's system call number (include/uapi/asm-generic/unistd.h; arch/x86 tables)
_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}
_SCHED_OTHER = 0


class _SchedAttr(ctypes.Structure):  # struct sched_attr, SCHED_ATTR_SIZE_VER0 (48 bytes)
    _fields_ = [
        ("size", ctypes.c_uint32),
        ("sched_policy", ctypes.c_uint32),
        ("sched_flags", ctypes.c_uint64),
        ("sched_nice", ctypes.c_int32),
        ("sched_priority", ctypes.c_uint32),
        ("sched_runtime", ctypes.c_uint64),
        ("sched_deadline", ctypes.c_uint64),
        ("sched_period", ctypes.c_uint64),
    ]


def ask_for_short_slices(slice_ns: int = LOOP_SLICE_NS) -> bool:
    """Ask the kernel for `slice_ns` slices for the calling thread (at its niceness); True if
    it took them (Linux >= 6.12), False elsewhere."""
    number = _SCHED_SETATTR.get(platform.machine())
    if number is None:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())  # this thread's
    except (OSError, AttributeError):
        return False
    attr = _SchedAttr(
        size=ctypes.sizeof(_SchedAttr), sched_policy=_SCHED_OTHER, sched_nice=nice,
        sched_runtime=slice_ns,
    )  # fmt: skip
    return libc.syscall(number, 0, ctypes.byref(attr), 0) == 0


def name_this_thread(name: str) -> None:
    """The calling thread's name as Linux shows it (top -H, ps -L, /proc/PID/task/TID/comm:
    15 characters at most); nothing elsewhere."""
    with contextlib.suppress(OSError):
        Path("/proc/thread-self/comm").write_text(name[:15])
