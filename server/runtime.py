"""What every meshplan call goes through, whatever its service: the call's id, caller and
deadline; draining; admission; fair solver slots; the solve runner; the one log line, the
metrics, and the mapping of every failure to a status (an unexpected exception is INTERNAL with
the request id, logged in one line, its text never sent to the caller).

Servicers (the Planner's, and any other meshplan service) hold one Runtime and call
`unary(...)` / `stream(...)` with a body, and `solve(call, fn, ...)` inside it. A call reaches
the runtime through server.context.CallContext: gRPC's context (adapted) or the HTTP front end's.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import grpc

from meshplan.server.auth import caller_of
from meshplan.server.context import CallContext, call_context
from meshplan.server.dispatch import SolveRunner, ThreadRunner
from meshplan.server.limits import (
    Admission,
    CallState,
    FairSlots,
    RpcFailure,
    peer_address,
    request_id,
)
from meshplan.server.logs import FIELDS
from meshplan.server.metrics import Metrics
from meshplan.server.settings import Settings
from meshplan.server.solves import Solve, Solves
from meshplan.server.validate import shorten

log = logging.getLogger("meshplan.server")
T = TypeVar("T")
BATCH_CLOSE_S = 1.0  # the end of a drain's grace kept for batches to answer their other items
REFUSED_LINES_PER_S = 10  # log lines a second for calls refused for their token
FREE_REFUSALS_PER_S = 10  # refusals a second one address gets at once; past it, each waits
REFUSAL_DELAY_S = 0.25  # ... this long (as a login's fail delay): a looping caller slows down

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
        self._refused_by: Counter[str] = Counter()  # refusals by address, this second
        self.refusal_delay_s = REFUSAL_DELAY_S
        self.draining = False
        self.on_close: set[Callable[[], None]] = set()  # called when the grace nearly ends
        self.idle = asyncio.Event()  # set whenever no admitted call is in progress
        self.idle.set()

    # --- one call ---------------------------------------------------------------------------

    def open_call(self, method: str, context: CallContext) -> CallState:
        """The call's id (echoed with its answer), caller, deadline (capped) and stop event."""
        metadata = context.invocation_metadata()
        call = self.new_call(
            method,
            caller_of(metadata, context.peer(), self.settings.auth_token_file is not None),
            context.time_remaining(),
            request_id(metadata),
            context.transport,
        )
        context.on_done(call.stop.set)  # cancelled, or ended
        context.echo_request_id(call.request_id)
        return call

    def new_call(
        self,
        method: str,
        caller: str,
        remaining_s: float | None,
        request_id: str,
        transport: str = "grpc",
    ) -> CallState:
        """A call's state: its caller (a verified token's `auth.caller_of`, else the peer
        address), its deadline capped by max_deadline_s (None: the cap), its id and its
        transport."""
        limit = self.settings.max_deadline_s
        return CallState(
            method=method,
            request_id=request_id,
            caller=caller,
            deadline=time.monotonic() + (limit if remaining_s is None else min(remaining_s, limit)),
            transport=transport,
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
        m.child(m.calls, call.method, status, call.transport).inc()
        m.child(m.call_seconds, call.method, call.transport).observe(elapsed)
        if status == "RESOURCE_EXHAUSTED":
            m.child(m.rejected, call.method, call.transport).inc()
        level = logging.ERROR if error is not None else logging.INFO
        if not log.isEnabledFor(level):  # the line's fields are not even built
            return
        fields: dict[str, Any] = {
            "method": call.method,
            "request_id": call.request_id,
            "caller": call.caller,
            "transport": call.transport,
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

    def refused(self, method: str, peer: str, transport: str = "grpc") -> float:
        """Count a call refused before it was parsed (no valid token) and log it; the seconds
        its refusal waits before it is sent. At most REFUSED_LINES_PER_S lines a second, the
        next line saying how many went unlogged; past FREE_REFUSALS_PER_S refusals a second
        from one address, each waits REFUSAL_DELAY_S (a caller looping on made-up
        tokens must turn the event loop into neither a log writer nor a refusal writer)."""
        name = method.rsplit("/", 1)[-1]
        self.metrics.child(self.metrics.calls, name, "UNAUTHENTICATED", transport).inc()
        now = time.monotonic()
        if now - self._refused_window >= 1.0:
            self._refused_window, self._refused_lines = now, 0
            self._refused_by.clear()
        address = peer_address(peer)
        self._refused_by[address] += 1
        over = self._refused_by[address] > FREE_REFUSALS_PER_S
        delay = self.refusal_delay_s if over else 0.0
        if self._refused_lines >= REFUSED_LINES_PER_S:
            self._refused_unlogged += 1
            return delay
        self._refused_lines += 1
        fields = {"method": name, "status": "UNAUTHENTICATED", "peer": peer, "transport": transport}
        if self._refused_unlogged:
            fields["unlogged_before"] = self._refused_unlogged
            self._refused_unlogged = 0
        log.info("method=%s status=UNAUTHENTICATED", name, extra={FIELDS: fields})
        return delay

    async def unary(
        self,
        method: str,
        context: CallContext | grpc.aio.ServicerContext,
        request: Any,
        body: Body,
        *,
        admit: bool = True,
        batch_requests: int = 0,
    ) -> Any:
        """Run `body(request, call)` for a unary call under every limit; failures -> status."""
        context = call_context(context)
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
        context: CallContext | grpc.aio.ServicerContext,
        request: Any,
        body: StreamBody,
        *,
        batch_requests: Callable[[Any], int] = lambda _: 0,
    ) -> AsyncIterator[Any]:
        """Stream `body(request, call)`'s answers under every limit (the body keeps to the
        call's deadline itself: a timeout cannot span the yields of a generator)."""
        context = call_context(context)
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
        self, context: CallContext, call: CallState, failure: RpcFailure | None
    ) -> None:
        """End the call with `failure`'s status, in its transport's way (None: nothing)."""
        if failure is not None:
            await context.fail(call, failure)

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
