"""One call as the runtime sees it, whatever its transport: a small interface that the gRPC
adapter here and the HTTP front end's context (server/http/calls.py) both implement.

The runtime reads the caller's metadata, address and time left, is told when the call ends,
echoes the call's id, and ends a failed call with `fail`; each transport does the last its own
way (gRPC: a status with google.rpc.BadRequest details; HTTP: the JSON error answer), so neither
translates through the other.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import grpc

from meshplan.server.limits import REQUEST_ID_KEY, CallState, RpcFailure
from meshplan.server.validate import bad_request_status, shorten

Metadata = Sequence[tuple[str, Any]]


class CallContext(ABC):
    """What the runtime needs of a call's transport."""

    transport: str  # "grpc" or "http": the metrics' label

    @abstractmethod
    def invocation_metadata(self) -> Metadata:
        """The call's metadata (lower-case keys): authorization, x-request-id."""

    @abstractmethod
    def peer(self) -> str:
        """The caller's address as gRPC spells a peer ('ipv4:10.0.0.5:41234')."""

    @abstractmethod
    def time_remaining(self) -> float | None:
        """Seconds until the caller's deadline (None: it set none)."""

    @abstractmethod
    def on_done(self, callback: Callable[[], None]) -> None:
        """Call `callback` once the call has ended (answered, failed, or its caller gone)."""

    @abstractmethod
    def echo_request_id(self, request_id: str) -> None:
        """Send the call's id back with its answer, whatever the answer."""

    @abstractmethod
    async def fail(self, call: CallState, failure: RpcFailure) -> NoReturn:
        """End the call with `failure`'s status (field violations as google.rpc.BadRequest)."""


class GrpcCall(CallContext):
    """A grpc.aio.ServicerContext as a CallContext."""

    transport = "grpc"
    __slots__ = ("context",)

    def __init__(self, context: grpc.aio.ServicerContext) -> None:
        self.context = context

    def invocation_metadata(self) -> Metadata:
        return self.context.invocation_metadata() or ()

    def peer(self) -> str:
        return self.context.peer()

    def time_remaining(self) -> float | None:
        return self.context.time_remaining()

    def on_done(self, callback: Callable[[], None]) -> None:
        self.context.add_done_callback(lambda _: callback())

    def echo_request_id(self, request_id: str) -> None:
        # Trailing, not initial, metadata: response headers would commit the call and stop the
        # client's retry policy from moving it to another replica if this one dies mid-solve.
        self.context.set_trailing_metadata(((REQUEST_ID_KEY, request_id),))

    async def fail(self, call: CallState, failure: RpcFailure) -> NoReturn:
        request = ((REQUEST_ID_KEY, call.request_id),)
        message = shorten(failure.message, 1000)
        if failure.violations:
            status = bad_request_status(failure.violations, message)
            await self.context.abort(
                status.code, status.details, tuple(status.trailing_metadata) + request
            )
        await self.context.abort(failure.code, message, request)
        raise AssertionError("abort returned")  # pragma: no cover


def call_context(context: CallContext | grpc.aio.ServicerContext) -> CallContext:
    """The CallContext of a servicer's `context` argument (gRPC's own, or one already)."""
    return context if isinstance(context, CallContext) else GrpcCall(context)
