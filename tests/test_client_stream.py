"""The blocking client reads a PlanBatch stream on the caller's own thread: no channel thread is
started to hand each answer over (one wake-up less per answer)."""

from __future__ import annotations

import threading

from test_grpc_client import fake_plan
from test_grpc_support import LOOPBACK, running_server, small_request

from meshplan.client import PlannerClient


def test_plan_batch_starts_no_thread_to_read_the_stream() -> None:
    reqs = [small_request()] * 3
    with (
        running_server(plan_fn=fake_plan, max_concurrent_solves=2) as (port, _),
        PlannerClient(f"{LOOPBACK}:{port}", max_attempts=1) as client,
    ):
        assert len(list(client.plan_batch(reqs, timeout=10))) == 3  # the server's threads exist
        before = set(threading.enumerate())
        stream = client.plan_batch(reqs, timeout=10)
        first = next(stream)
        # the server's solve pool and its loop's executor (heap trims) start threads on demand
        new = set(threading.enumerate()) - before
        started = {t for t in new if not t.name.startswith(("meshplan-", "asyncio_"))}
        rest = list(stream)
    assert first.result is not None and len(rest) == 2
    assert not started, f"threads started to read the stream: {started}"
