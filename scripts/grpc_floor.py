"""The floor under meshplan's "gRPC adds" figure: a bare gRPC server on loopback, no meshplan code.

    .venv/bin/python scripts/grpc_floor.py [--calls N]

A unary method returns 610 bytes (a plan's answer) after a "solve": a busy loop of S ms, run by
`grpc.aio` on a thread-pool thread (one hand-off, as meshplan's server does) or by grpc's
synchronous server on its handler thread. The client busy-loops B ms before each call (as the
latency benchmark's in-process plan does). Printed: the round trip less the solve, p50, for
each (B, S): what the transport itself adds on this machine once its threads sleep through a
solve.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import grpc

ANSWER = b"x" * 610
REQUEST = b"y" * 200
CASES_MS = ((0, 0), (5, 0), (0, 5), (5, 5), (0, 20))  # (busy before the call, solve)


def busy(seconds: float) -> None:
    """Spin for `seconds` of wall time (a solve, or the client's own work)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        pass


def _handler(solve_s: float, last: list[float]) -> Callable[[], bytes]:
    def work() -> bytes:
        t0 = time.perf_counter()
        busy(solve_s)
        last[0] = time.perf_counter() - t0
        return ANSWER

    return work


def _measure(port: int, before_s: float, last: list[float], calls: int) -> float:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        method = ch.unary_unary("/floor.S/M")
        for _ in range(min(calls, 50)):  # warm the channel
            method(REQUEST, timeout=60)
        adds = []
        for _ in range(calls):
            busy(before_s)
            t0 = time.perf_counter()
            method(REQUEST, timeout=60)
            adds.append(time.perf_counter() - t0 - last[0])
    return statistics.median(adds)


def aio_adds(before_s: float, solve_s: float, calls: int) -> float:
    """p50 seconds a grpc.aio call adds around a solve handed to a thread-pool thread."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    pool, last = ThreadPoolExecutor(1), [0.0]
    work = _handler(solve_s, last)

    async def method(request: bytes, context: object) -> bytes:
        return await asyncio.get_running_loop().run_in_executor(pool, work)

    async def start() -> tuple[grpc.aio.Server, int]:
        server = grpc.aio.server()
        handlers = {"M": grpc.unary_unary_rpc_method_handler(method)}
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("floor.S", handlers),)
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server, port

    server, port = asyncio.run_coroutine_threadsafe(start(), loop).result()
    try:
        return _measure(port, before_s, last, calls)
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(0), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        pool.shutdown()


def sync_adds(before_s: float, solve_s: float, calls: int) -> float:
    """p50 seconds a call to grpc's synchronous server adds around a solve on its thread."""
    last = [0.0]
    work = _handler(solve_s, last)
    server = grpc.server(ThreadPoolExecutor(4))
    handlers = {"M": grpc.unary_unary_rpc_method_handler(lambda request, context: work())}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("floor.S", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        return _measure(port, before_s, last, calls)
    finally:
        server.stop(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300, help="calls per case (default 300)")
    args = parser.parse_args(argv)
    print("busy before  solve   grpc.aio + hop   sync server   (adds, p50)")
    for before_ms, solve_ms in CASES_MS:
        a = aio_adds(before_ms / 1e3, solve_ms / 1e3, args.calls)
        s = sync_adds(before_ms / 1e3, solve_ms / 1e3, args.calls)
        print(f"{before_ms:8d} ms {solve_ms:4d} ms   {a * 1e3:9.3f} ms   {s * 1e3:8.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
