"""Many plan requests through PlanBatch on one or several servers, in chunks, as the answers
come: what `meshplan batch` and a sweep's `--server` both send."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

from meshplan.client.exceptions import FieldViolation, InvalidRequestError
from meshplan.client.sync import BatchItem, PlannerClient
from meshplan.solver.schema import PlanRequest


def send_chunks(
    client: PlannerClient, reqs: list[PlanRequest], chunk: int, timeout: float, in_flight: int = 1
) -> Iterator[BatchItem]:
    """The answers to `reqs` sent through PlanBatch in chunks of `chunk`, as they come (indices
    into `reqs`); `in_flight` chunks are sent at once (one per server: the client spreads calls
    over its targets, and each server spreads a chunk over its solver processes)."""
    chunk = max(1, chunk)
    starts = list(range(0, len(reqs), chunk))
    if in_flight <= 1 or len(starts) <= 1:
        for start in starts:
            yield from _chunk(client, reqs[start : start + chunk], start, timeout)
        return
    answers: queue.Queue[BatchItem | BaseException | None] = queue.Queue()
    pending = iter(starts)
    lock = threading.Lock()
    stop = threading.Event()

    def sender() -> None:
        try:
            while not stop.is_set():
                with lock:
                    start = next(pending, None)
                if start is None:
                    return
                for item in _chunk(client, reqs[start : start + chunk], start, timeout):
                    answers.put(item)
        except BaseException as err:  # noqa: BLE001  handed to the reader
            answers.put(err)
        finally:
            answers.put(None)

    senders = [threading.Thread(target=sender, daemon=True) for _ in range(in_flight)]
    for thread in senders:
        thread.start()
    try:
        done = 0
        while done < len(senders):
            got = answers.get()
            if got is None:
                done += 1
            elif isinstance(got, BaseException):
                raise got
            else:
                yield got
    finally:
        stop.set()  # a failed chunk or an early stop: send no more


def _chunk(
    client: PlannerClient, part: list[PlanRequest], start: int, timeout: float
) -> Iterator[BatchItem]:
    for item in client.plan_batch(part, timeout=timeout):
        if isinstance(item.error, InvalidRequestError) and start:  # paths in the whole file
            old, new = f"requests[{item.index}]", f"requests[{item.index + start}]"
            item.error.violations[:] = [
                FieldViolation(v.field.replace(old, new, 1), v.description)
                for v in item.error.violations
            ]
        yield BatchItem(item.index + start, item.result, item.error)
