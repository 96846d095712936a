"""The solver worker process's side of server/pool.py and server/courier.py: warm up, say ready, then run one call at a
time from the pipe, answer it, settle the heap (server/memory.py) and wait for the next. A
second pipe carries the server's stops (set the running call's event), recalls (a call queued
behind the running one is answered `None` instead of being run) and pings (answered at once); the worker also says there which call it took off its pipe."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

log = logging.getLogger("meshplan.server")

_TRIM_EVERY_S = 5.0  # a worker returns freed heap to the system at most this often
YOUNG_PASS_OBJECTS = 50_000  # a worker's threshold for a young collection (Python's: 700)


# A solve is throughput work; the server's event loop (health checks, admission, answers) is
# latency work: on a machine with fewer free cores than busy processes, the workers at a lower
# priority let the loop run the moment it wakes instead of waiting out their time slices.
WORKER_NICENESS = 5
# Where Linux schedules by session ("autogroup", sched(7): on by default on most distributions
# outside containers), a nice value only ranks threads within one session, and each session gets
# an equal share of the CPUs: workers in the server's session spent the share its event loop
# waits for. Each worker takes a session of its own. Its group keeps the default weight: at
# niceness 5 there too (/proc/self/autogroup), a worker on a machine at load 10 got 7% of a core
# and took 10 s and more over one collection (measured with py-spy here), so its calls outlived
# their stops and it was killed.


def worker_main(
    conn: Connection, ctrl: Connection, warm: bool, cache_bytes: int | None = None
) -> None:
    """A worker's life: warm up, say ready, then run one call at a time until the pipe closes.
    `cache_bytes`: the bound of its caches together (solver/cache.py `configure`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's: it drains, then ends us
    yield_to_the_server()
    lock = threading.Lock()
    sending = threading.Lock()  # ctrl carries pongs (listener) and "took" (this thread)
    state: dict[str, Any] = {"seq": 0, "event": None}
    stopped: set[int] = set()  # calls told to stop (the running one, or one queued behind it)
    recalled: set[int] = set()  # queued calls asked back before they start

    def listen() -> None:  # stops and recalls from the server, and its pings
        while True:
            try:
                kind, seq = ctrl.recv()
                if kind == "ping":  # the server's heartbeat (server/courier.py): still here
                    with sending:
                        ctrl.send(("pong", seq))
                    continue
            except (EOFError, OSError):
                return
            with lock:
                if seq < state["seq"]:
                    continue  # a call that has already ended
                (recalled if kind == "recall" else stopped).add(seq)
                if kind == "stop" and state["seq"] == seq and state["event"] is not None:
                    state["event"].set()

    threading.Thread(target=listen, name="meshplan-stop", daemon=True).start()
    _keep_freed_heap()
    if cache_bytes is not None:
        from meshplan.solver import cache

        cache.configure(cache_bytes)
    if warm:
        warm_up()
    gc.collect()
    gc.freeze()  # the start-up heap stays out of full collections (server/memory.py)
    # young passes only past this many new objects: between two calls, settle_heap's freeze
    # resets the count, so a call as the sweep makes them runs none (server/memory.py)
    gc.set_threshold(YOUNG_PASS_OBJECTS, *gc.get_threshold()[1:])
    trim = _trimmer()
    trimmed = time.monotonic()
    conn.send(("ready", os.getpid()))
    while True:
        try:
            seq, fn, args = conn.recv()
        except (EOFError, OSError):
            return
        with sending, contextlib.suppress(OSError):  # the courier's heartbeat reads it
            ctrl.send(("took", seq))
        event = threading.Event()
        with lock:
            state["seq"], state["event"] = seq, event
            if seq in stopped:
                event.set()
            asked_back = seq in recalled
            for done in [s for s in stopped | recalled if s < seq]:
                stopped.discard(done)
                recalled.discard(done)
        if asked_back:  # never started: the server starts it again when it is its turn
            conn.send((seq, None, None))
            with sending, contextlib.suppress(OSError):
                ctrl.send(("settled", seq))
            continue
        try:
            reply: tuple[int, bool, Any] = (seq, True, fn(*args, stop=event))
        except BaseException as err:  # noqa: BLE001  every failure goes back to the caller
            reply = (seq, False, err)
        with lock:
            state["event"] = None
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return
        except Exception as err:  # noqa: BLE001  an answer that does not pickle
            conn.send((seq, False, RuntimeError(f"the answer could not be sent back: {err}")))
        settle_heap()  # what the call left (the caches) stays out of collections
        if trim is not None and time.monotonic() - trimmed > _TRIM_EVERY_S:
            trim()
            trimmed = time.monotonic()
        with sending, contextlib.suppress(OSError):  # idle again: the heartbeat's short wait
            ctrl.send(("settled", seq))


def yield_to_the_server() -> None:
    """This process at WORKER_NICENESS, in a session (and so an autogroup) of its own: solves
    yield the CPU to the server's event loop. It still ends with its pipe (the server's end);
    SIGINT is ignored as before (Ctrl-C is the server's)."""
    with contextlib.suppress(OSError):
        os.setsid()
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICENESS)


def warm_up() -> None:
    """Import what a call needs and solve one small plan (the lazy imports, the first tables):
    what a server's solver process does before its first call, and a Ray worker actor too
    (tools/sweep/ray_backend.py)."""
    from meshplan.server import work
    from meshplan.solver import plan
    from meshplan.solver.cpsat import solve  # OR-Tools: lazy in the CLI, loaded here up front
    from meshplan.solver.scheduler import cells  # a scheduler query's turns run here (~14 ms)
    from meshplan.solver.schema import PlanRequest

    del work, cells, solve
    req = PlanRequest.model_validate(
        {
            "model": {"preset": "llama3-8b"},
            "cluster": {"num_gpus": 8},
            "options": {"time_limit_s": 10},
        }
    )
    try:
        plan(req)
    except Exception as err:  # noqa: BLE001  a warm-up failure must not stop the worker
        log.warning("solver warm-up failed: %s", err)


def _trimmer() -> Callable[[], int] | None:
    from meshplan.server.memory import trimmer

    return trimmer()


def _keep_freed_heap() -> None:
    from meshplan.server.memory import keep_freed_heap

    keep_freed_heap()


def settle_heap() -> None:
    from meshplan.server.memory import settle_heap as settle

    settle()
