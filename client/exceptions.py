"""Typed errors of the Planner client, built from a grpc.RpcError (sync or asyncio)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2

REQUEST_ID_KEY = "x-request-id"
_DETAILS_KEY = "grpc-status-details-bin"


@dataclass(frozen=True)
class FieldViolation:
    """One bad field of a request: its dotted path (e.g. model.num_layers) and what is wrong."""

    field: str
    description: str


class PlannerError(Exception):
    """A call to meshplan.v1.Planner failed; `code` is the gRPC status code."""

    def __init__(self, code: grpc.StatusCode, message: str, request_id: str = "") -> None:
        super().__init__(
            f"{code.name}: {message}" + (f" [request {request_id}]" if request_id else "")
        )
        self.code = code
        self.message = message
        self.request_id = request_id


class InvalidRequestError(PlannerError):
    """INVALID_ARGUMENT: the request is malformed; `violations` names each bad field."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        request_id: str = "",
        violations: list[FieldViolation] | None = None,
    ) -> None:
        super().__init__(code, message, request_id)
        self.violations = violations or []


class DeadlineExceededError(PlannerError):
    """DEADLINE_EXCEEDED: no plan was found before the call's deadline."""


class OverloadedError(PlannerError):
    """RESOURCE_EXHAUSTED: every solver slot and queue place is taken; retry later."""


class UnavailableError(PlannerError):
    """UNAVAILABLE: no server could be reached (after the retries of the service config)."""


class CancelledError(PlannerError):
    """CANCELLED: the call was cancelled."""


class UnauthenticatedError(PlannerError):
    """UNAUTHENTICATED: the server wants a valid bearer token (token= / token_file=)."""


_BY_CODE: dict[grpc.StatusCode, type[PlannerError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidRequestError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: OverloadedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.CANCELLED: CancelledError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
}


def violations_from_status(status: status_pb2.Status) -> list[FieldViolation]:
    """The field violations of every google.rpc.BadRequest detail of a status."""
    out: list[FieldViolation] = []
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            out.extend(FieldViolation(v.field, v.description) for v in bad.field_violations)
    return out


def error_from_parts(
    code: grpc.StatusCode, message: str, metadata: Any = (), request_id: str = ""
) -> PlannerError:
    """A typed error from a status code, its message and the trailing metadata."""
    violations: list[FieldViolation] = []
    for key, value in metadata or ():
        if key == _DETAILS_KEY:
            violations = violations_from_status(status_pb2.Status.FromString(value))
        elif key == REQUEST_ID_KEY and not request_id:
            request_id = str(value)
    cls = _BY_CODE.get(code, PlannerError)
    if cls is InvalidRequestError:
        return InvalidRequestError(code, message, request_id, violations)
    return cls(code, message, request_id)


# What gRPC says when a plaintext client meets a TLS port, or a TLS handshake fails.
_PLAINTEXT_AT_TLS = ("Socket closed", "Connection reset", "Broken pipe")
_HANDSHAKE = ("handshake", "SSL", "certificate", "CERTIFICATE")


def connection_hint(message: str, tls: bool | None) -> str:
    """Words that say what an UNAVAILABLE connection failure most likely means ('' if none)."""
    if tls is False and any(x in message for x in _PLAINTEXT_AT_TLS):
        return (
            "; the server may expect TLS: connect with tls_ca= (or tls=True for the system's "
            "roots), --tls-ca or --tls"
        )
    if tls and any(x in message for x in _HANDSHAKE + _PLAINTEXT_AT_TLS):
        return (
            "; the TLS handshake failed: check the CA (tls_ca=, --tls-ca) and the name the "
            "certificate must carry (tls_server_name=, --tls-server-name), or the server may "
            "run plaintext"
        )
    return ""


def error_from_rpc(
    err: grpc.RpcError, request_id: str = "", tls: bool | None = None
) -> PlannerError:
    """A typed error from what grpc raised (a grpc.Call or a grpc.aio.AioRpcError); `tls` (the
    channel's) lets a connection failure say what it most likely means."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    message = (err.details() if hasattr(err, "details") else str(err)) or ""
    metadata = err.trailing_metadata() if hasattr(err, "trailing_metadata") else ()
    if code == grpc.StatusCode.UNAVAILABLE:
        message += connection_hint(message, tls)
    return error_from_parts(code or grpc.StatusCode.UNKNOWN, message, metadata, request_id)
