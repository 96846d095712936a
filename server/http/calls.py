"""One HTTP call as the servicers see a gRPC call, and their failures as HTTP answers.

`HttpContext` is the HTTP call's server.context.CallContext (metadata, peer, time remaining,
done callbacks, the request id, fail), so an HTTP call runs the servicer's own coroutine. Its
`fail` raises `Aborted`, which `error_response` turns into the HTTP status of the gRPC code (google.rpc.Code's mapping, as in
https://github.com/googleapis/googleapis/blob/master/google/rpc/code.proto) and a JSON body in
the shape of Google's JSON errors, with the same google.rpc.BadRequest field violations.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any, NoReturn

import grpc
from aiohttp import web
from google.protobuf import json_format
from google.rpc import status_pb2

from meshplan.server.auth import AUTHORIZATION
from meshplan.server.context import CallContext
from meshplan.server.limits import REQUEST_ID_KEY, CallState, RpcFailure
from meshplan.server.validate import MESSAGE_CHARS, Violation, bad_request_status, shorten

DETAILS_KEY = "grpc-status-details-bin"  # where grpc_status puts the google.rpc.Status
TIMEOUT = "timeout"  # header or query field: the call's deadline, in seconds from now

# google/rpc/code.proto: the HTTP status of each code
HTTP_STATUS = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
}
_DURATION = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(ms|s)?\s*")


class Aborted(Exception):
    """A call ended with a non-OK status (what grpc's context.abort does, as an exception)."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        violations: list[Violation] | None = None,
        request_id: str = "",
    ) -> None:
        super().__init__(message)
        self.code, self.message = code, message
        self.violations = violations or []
        self.request_id = request_id


def parse_timeout(text: str | None) -> float | None:
    """The `timeout` header or query field as seconds ("2.5", "2.5s", "500ms"); None if
    absent; RpcFailure (INVALID_ARGUMENT, naming `timeout`) if it is not a positive duration."""
    if text is None:
        return None
    match = _DURATION.fullmatch(text)
    seconds = None
    if match:
        seconds = float(match.group(1)) / (1000 if match.group(2) == "ms" else 1)
    if seconds is None or seconds <= 0:
        why = f"must be a positive number of seconds, e.g. 30 or 2.5s or 500ms (got {shorten(repr(text))})"  # fmt: skip
        raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, f"{TIMEOUT}: {why}", [Violation(TIMEOUT, why)])  # fmt: skip
    return seconds


class HttpContext(CallContext):
    """An HTTP call as the runtime sees a call (server.context.CallContext)."""

    transport = "http"

    def __init__(self, request: web.Request, timeout_s: float | None) -> None:
        self._metadata = tuple(
            (key, request.headers[key])
            for key in (AUTHORIZATION, REQUEST_ID_KEY)
            if key in request.headers
        )
        self._deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self._peer = peer_of(request)
        self._done: list[Callable[[], None]] = []
        self._request_id = ""

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def peer(self) -> str:
        return self._peer

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(self._deadline - time.monotonic(), 0.0)

    def on_done(self, callback: Callable[[], None]) -> None:
        self._done.append(callback)

    def echo_request_id(self, request_id: str) -> None:
        self._request_id = request_id

    async def fail(self, call: CallState, failure: RpcFailure) -> NoReturn:
        raise Aborted(failure.code, failure.message, failure.violations, call.request_id)

    def request_id(self) -> str:
        """The call's id, once the runtime has opened it ("" before)."""
        return self._request_id

    def done(self) -> None:
        """The call has ended (answered, failed or its client gone): run the callbacks."""
        callbacks, self._done = self._done, []
        for callback in callbacks:
            callback()


def peer_of(request: web.Request) -> str:
    """The caller's address as gRPC spells a peer ('ipv4:127.0.0.1:5555'), so the per-caller
    limits treat a caller the same on both ports."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    if not peer:
        return "unknown"
    host, port = peer[0], peer[1]
    return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"


def error_body(
    code: grpc.StatusCode, message: str, violations: list[Violation], request_id: str = ""
) -> dict[str, Any]:
    """Google's JSON error shape: {"error": {code, status, message, details}}, the details
    holding a google.rpc.BadRequest when fields are named."""
    message = shorten(message, MESSAGE_CHARS)
    error: dict[str, Any] = {"code": HTTP_STATUS[code], "status": code.name, "message": message}
    if violations:
        status = status_pb2.Status.FromString(
            dict(bad_request_status(violations, message).trailing_metadata)[DETAILS_KEY]
        )
        error["details"] = [
            json_format.MessageToDict(d, preserving_proto_field_name=True) for d in status.details
        ]
    if request_id:
        error["request_id"] = request_id
    return {"error": error}


def error_response(
    code: grpc.StatusCode, message: str, violations: list[Violation], request_id: str = ""
) -> web.Response:
    """The HTTP answer of a failed call."""
    headers = {REQUEST_ID_KEY: request_id} if request_id else {}
    return web.json_response(
        error_body(code, message, violations, request_id),
        status=HTTP_STATUS[code],
        headers=headers,
    )


def aborted_response(err: Aborted) -> web.Response:
    return error_response(err.code, err.message, err.violations, err.request_id)
