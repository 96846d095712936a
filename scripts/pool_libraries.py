"""What two maintained process pools do where meshplan's server/pool.py must act: a call that must
stop, a worker that dies, the calls beside it. Not a dependency: run it in a scratch venv.

    python3 -m venv /tmp/v && /tmp/v/bin/pip install pebble==5.2.3 loky==3.7.0
    /tmp/v/bin/python scripts/pool_libraries.py

docs/settings.md ("The solver processes") says what it printed and why neither replaces server/pool.py.
"""

import multiprocessing as mp
import os
import time
from concurrent.futures import TimeoutError as FTimeout


def solve(seconds):
    t0 = time.time()
    while time.time() - t0 < seconds:
        pass
    return os.getpid()


def die():
    os._exit(3)


if __name__ == "__main__":
    import pebble

    with pebble.ProcessPool(max_workers=2, context=mp.get_context("spawn")) as pool:
        slow = pool.schedule(solve, args=(5,), timeout=1.0)
        sib = pool.schedule(solve, args=(2,))
        t0 = time.time()
        try:
            slow.result()
        except FTimeout:
            print(
                f"pebble: timeout -> worker killed after {time.time() - t0:.1f}s, no partial answer (TimeoutError)"
            )
        print("pebble: sibling still answers:", type(sib.result()).__name__)
        running = pool.schedule(solve, args=(5,))
        time.sleep(0.5)
        print("pebble: cancel() of a running call:", running.cancel(), "(kills its process)")
        d = pool.schedule(die)
        try:
            d.result()
        except Exception as e:
            print(
                "pebble: worker death ->",
                type(e).__name__,
                "for that call only; pool goes on:",
                type(pool.schedule(solve, args=(0.1,)).result()).__name__,
            )
    from loky import get_reusable_executor

    ex = get_reusable_executor(max_workers=2)
    a = ex.submit(solve, 3)
    time.sleep(0.3)
    b = ex.submit(die)
    try:
        b.result()
    except BaseException as e:
        print("loky: worker death ->", type(e).__name__)
    try:
        a.result()
        print("loky: sibling answered")
    except BaseException as e:
        print("loky: the sibling running call fails too ->", type(e).__name__)
    r = ex.submit(solve, 5)
    time.sleep(0.3)
    print(
        "loky: cancel() of a running call:", r.cancel(), "(it runs on; no per-call timeout or kill)"
    )
    ex.shutdown(kill_workers=True)
