"""What every meshplan call goes through, whatever its service: the call's id, caller and
deadline; draining; admission; fair solver slots; the solve runner; the one log line, the
metrics, and the mapping of every failure to a status (an unexpected exception is INTERNAL with
the request id, logged in one line, its text never sent to the caller).

Servicers (the Planner's, and any other meshplan service) hold one Runtime and call
`unary(...)` / `stream(...)` with a body, and `solve(call, fn, ...)` inside it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import grpc

from meshplan.server.auth import caller_of
from meshplan.server.dispatch import SolveRunner, ThreadRunner
from meshplan.server.limits import (
    REQUEST_ID_KEY,
    Admission,
    CallState,
    FairSlots,
    RpcFailure,
    request_id,
)
from meshplan.server.logs import FIELDS
from meshplan.server.metrics import Metrics
from meshplan.server.settings import Settings
from meshplan.server.solves import Solve, Solves
from meshplan.server.validate import bad_request_status, shorten

log = logging.getLogger("meshplan.server")
T = TypeVar("T")
BATCH_CLOSE_S = 1.0
REFUSED_LINES_PER_S = 10  # log lines a second for calls refused for their token  # the end of a drain's grace kept for batches to answer their other items

Body = Callable[[Any, CallState], Awaitable[Any]]
StreamBody = Callable[[Any, CallState], AsyncIterator[Any]]


class Runtime(Solves):
    """Shared by the servicers of one server; lives on the server's event loop."""

    def __init__(
        self, settings: Settings, metrics: Metrics, runner: SolveRunner | None = None
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.runner = runner or ThreadRunner(settings.max_concurrent_solves)
        self.admission = Admission(
            total=settings.max_concurrent_solves + settings.max_queued_solves,
            per_caller=settings.max_calls_per_caller,
            batch_per_caller=settings.max_batch_requests_per_caller,
            max_waiting=settings.max_waiting_calls,
        )
        self.slots = FairSlots(settings.max_concurrent_solves, settings.solves_per_caller)
        self.slots.on_wait = self._recall
        self._behind: set[Solve] = set()  # queued behind a running solve, not yet started
        self._refused_window, self._refused_lines, self._refused_unlogged = 0.0, 0, 0
        self.draining = False
        self.on_close: set[Callable[[], None]] = set()  # called when the grace nearly ends
        self.idle = asyncio.Event()  # set whenever no admitted call is in progress
        self.idle.set()

    # --- one call ---------------------------------------------------------------------------

    def open_call(self, method: str, context: grpc.aio.ServicerContext) -> CallState:
        """The call's id (echoed in the trailers), caller, deadline (capped) and stop event."""
        metadata = context.invocation_metadata()
        call = self.new_call(
            method,
            caller_of(metadata, context.peer(), self.settings.auth_token_file is not None),
            context.time_remaining(),
            request_id(metadata),
        )
        context.add_done_callback(lambda _: call.stop.set())  # cancelled, or ended
        # Trailing, not initial, metadata: response headers would commit the call and stop the
        # client's retry policy from moving it to another replica if this one dies mid-solve.
        context.set_trailing_metadata(((REQUEST_ID_KEY, call.request_id),))
        return call

    def new_call(
        self, method: str, caller: str, remaining_s: float | None, request_id: str
    ) -> CallState:
        """A call's state from any front end (gRPC: `open_call`; JSON over HTTP): its caller
        (a verified token's `auth.caller_of`, else the peer address), its deadline capped by
        max_deadline_s (None: the cap), and its id."""
        limit = self.settings.max_deadline_s
        return CallState(
            method=method,
            request_id=request_id,
            caller=caller,
            deadline=time.monotonic() + (limit if remaining_s is None else min(remaining_s, limit)),
        )

    def close_call(
        self,
        call: CallState,
        status: str,
        error: BaseException | None = None,
        failure: RpcFailure | None = None,
    ) -> None:
        """The call has ended: its solve is told to stop, and its one log line and metrics
        carry `failure`'s status if it failed, else `status`."""
        call.stop.set()
        if failure is not None:
            status = failure.code.name
        elapsed = time.monotonic() - call.started
        m = self.metrics
        m.child(m.calls, call.method, status).inc()
        m.child(m.call_seconds, call.method).observe(elapsed)
        if status == "RESOURCE_EXHAUSTED":
            m.child(m.rejected, call.method).inc()
        level = logging.ERROR if error is not None else logging.INFO
        if not log.isEnabledFor(level):  # the line's fields are not even built
            return
        fields: dict[str, Any] = {
            "method": call.method,
            "request_id": call.request_id,
            "caller": call.caller,
            "status": status,
            "solve_s": round(call.solve_s, 3),
            "call_s": round(elapsed, 3),
        }
        if error is not None:
            frame = traceback.extract_tb(error.__traceback__)[-1:] if error.__traceback__ else []
            where = f" at {frame[0].filename}:{frame[0].lineno}" if frame else ""
            fields["error"] = shorten(f"{type(error).__name__}: {error}{where}", 300)
            log.debug("request_id=%s", call.request_id, exc_info=error)
        log.log(
            level,
            "method=%s request_id=%s status=%s",
            call.method,
            call.request_id,
            status,
            extra={FIELDS: fields},
        )

    def refused(self, method: str, peer: str) -> None:
        """Count a call refused before it was parsed (no valid token), and log it: at most
        REFUSED_LINES_PER_S lines a second, the next line saying how many went unlogged (a
        caller looping on made-up tokens must not turn the event loop into a log writer)."""
        name = method.rsplit("/", 1)[-1]
        self.metrics.child(self.metrics.calls, name, "UNAUTHENTICATED").inc()
        now = time.monotonic()
        if now - self._refused_window >= 1.0:
            self._refused_window, self._refused_lines = now, 0
        if self._refused_lines >= REFUSED_LINES_PER_S:
            self._refused_unlogged += 1
            return
        self._refused_lines += 1
        fields = {"method": name, "status": "UNAUTHENTICATED", "peer": peer}
        if self._refused_unlogged:
            fields["unlogged_before"] = self._refused_unlogged
            self._refused_unlogged = 0
        log.info("method=%s status=UNAUTHENTICATED", name, extra={FIELDS: fields})

    async def unary(
        self,
        method: str,
        context: grpc.aio.ServicerContext,
        request: Any,
        body: Body,
        *,
        admit: bool = True,
        batch_requests: int = 0,
    ) -> Any:
        """Run `body(request, call)` for a unary call under every limit; failures -> status."""
        call = self.open_call(method, context)
        answer, failure = await self.run(
            call, request, body, admit=admit, batch_requests=batch_requests
        )
        if failure is None:
            return answer
        await self.abort(context, call, failure)

    async def run(
        self,
        call: CallState,
        request: Any,
        body: Body,
        *,
        admit: bool = True,
        batch_requests: int = 0,
    ) -> tuple[Any, RpcFailure | None]:
        """`body(request, call)` under every limit, whatever the front end: draining, the
        caller's turn for admission, the deadline; then the call's log line and metrics.
        (answer, None), or (None, the failure to send: any exception mapped to a status)."""
        status, error, failure = "OK", None, None
        try:
            if not admit and self.draining:  # a call that needs no ticket is still a new call
                raise _shutting_down()
            # answered just before the caller gives up, so both see DEADLINE_EXCEEDED
            margin = self.settings.deadline_margin_s
            async with asyncio.timeout(max(call.remaining() - margin, 0)):
                if not admit:
                    return await body(request, call), None
                async with self._admitted(call, batch_requests):
                    return await body(request, call), None
        except RpcFailure as err:
            failure = err
        except TimeoutError:
            failure = RpcFailure(grpc.StatusCode.DEADLINE_EXCEEDED, "the call's deadline passed")
        except asyncio.CancelledError:
            status = _ended(call, self.settings.deadline_margin_s)
            raise
        except Exception as err:  # a bug: INTERNAL, logged in one line, no text to the caller
            error = err
            failure = internal(call)
        finally:
            self.close_call(call, status, error, failure)
        return None, failure

    async def stream(
        self,
        method: str,
        context: grpc.aio.ServicerContext,
        request: Any,
        body: StreamBody,
        *,
        batch_requests: Callable[[Any], int] = lambda _: 0,
    ) -> AsyncIterator[Any]:
        """Stream `body(request, call)`'s answers under every limit (the body keeps to the
        call's deadline itself: a timeout cannot span the yields of a generator)."""
        call = self.open_call(method, context)
        status, error, failure = "OK", None, None
        try:
            async with self._admitted(call, batch_requests(request)):
                async for item in body(request, call):
                    yield item
        except RpcFailure as err:
            failure = err
        except (asyncio.CancelledError, GeneratorExit):
            status = _ended(call, self.settings.deadline_margin_s)
            raise
        except Exception as err:
            error = err
            failure = internal(call)
        finally:
            self.close_call(call, status, error, failure)
        await self.abort(context, call, failure)

    @asynccontextmanager
    async def _admitted(self, call: CallState, batch_requests: int) -> AsyncIterator[None]:
        """Hold an admission ticket, waiting for one in the caller's turn until the call's
        deadline less the margin (UNAVAILABLE while draining, RESOURCE_EXHAUSTED past a cap)."""
        if self.draining:
            raise _shutting_down()
        m, admission = self.metrics, self.admission
        deadline = call.deadline - self.settings.deadline_margin_s
        try:
            async with admission.admit(call.caller, batch_requests, deadline):
                self.idle.clear()
                m.calls_in_progress.set(admission.in_progress)
                m.calls_waiting.set(admission.queued)
                yield
        finally:
            m.calls_in_progress.set(admission.in_progress)
            m.calls_waiting.set(admission.queued)
            if admission.in_progress == 0:
                self.idle.set()

    async def abort(
        self, context: grpc.aio.ServicerContext, call: CallState, failure: RpcFailure | None
    ) -> None:
        """End the call with `failure`'s status (field violations as google.rpc.BadRequest)."""
        if failure is None:
            return
        request = ((REQUEST_ID_KEY, call.request_id),)
        message = shorten(failure.message, 1000)
        if failure.violations:
            status = bad_request_status(failure.violations, message)
            await context.abort(
                status.code, status.details, tuple(status.trailing_metadata) + request
            )
        await context.abort(failure.code, message, request)

    async def drain(self, grace_s: float) -> bool:
        """Refuse new calls; wait up to `grace_s` for the admitted ones. True if all finished.
        A batch still streaming near the end of the grace answers each item it has not
        answered with a per-item UNAVAILABLE (`on_close`), then ends, before the server stops."""
        self.draining = True
        self.admission.refuse_waiting(_shutting_down())  # to another replica, at once
        close_s = min(BATCH_CLOSE_S, grace_s / 4)
        try:
            await asyncio.wait_for(self.idle.wait(), grace_s - close_s)
            return True
        except TimeoutError:
            pass
        for callback in list(self.on_close):
            callback()
        try:
            await asyncio.wait_for(self.idle.wait(), close_s)
        except TimeoutError:
            return False
        return True


def _ended(call: CallState, margin_s: float) -> str:
    """The status of a call that gRPC cancelled: DEADLINE_EXCEEDED once its deadline is within
    the margin the server answers by (the client's deadline came before the server's answer,
    which a loaded server sends late), else CANCELLED."""
    return "DEADLINE_EXCEEDED" if call.remaining() <= margin_s else "CANCELLED"


def _shutting_down() -> RpcFailure:
    """UNAVAILABLE while draining: the client's retry policy moves the call to another replica."""
    return RpcFailure(grpc.StatusCode.UNAVAILABLE, "the server is shutting down")


def internal(call: CallState) -> RpcFailure:
    """INTERNAL for an unexpected exception: the caller gets the request id, the log the rest."""
    return RpcFailure(
        grpc.StatusCode.INTERNAL,
        f"internal error; the server logged it under request id {call.request_id}",
    )
