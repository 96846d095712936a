"""PlannerClient: the Planner service as a Python API that speaks the solver's pydantic objects."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pydantic import BaseModel

from meshplan.client.channel import DEFAULT_TIMEOUT_S, make_target, open_channel
from meshplan.client.exceptions import (
    REQUEST_ID_KEY,
    FieldViolation,
    InvalidRequestError,
    PlannerError,
    error_from_parts,
    error_from_rpc,
)
from meshplan.client.scheduler import SchedulerClient
from meshplan.client.security import Security
from meshplan.convert import from_proto, to_proto
from meshplan.solver.catalog import GpuSpec, ModelPreset
from meshplan.solver.results import Evaluation, PlanResult
from meshplan.solver.schema import EvaluateRequest, PlanRequest
from meshplan.v1 import planner_pb2, planner_pb2_grpc

M = TypeVar("M", bound=Message)
_PARSE_FIELD = re.compile(r"Failed to parse (\w+) field")


@dataclass(frozen=True)
class BatchItem:
    """One answer of plan_batch: the request's index and its result, or its error."""

    index: int
    result: PlanResult | None = None
    error: PlannerError | None = None


@dataclass(frozen=True)
class Catalog:
    """What ListCatalog returns: the GPUs and model presets a request can name."""

    gpus: list[GpuSpec]
    models: list[ModelPreset]


def request_message(req: BaseModel, message_cls: type[M]) -> M:
    """The proto of a request: only the fields the caller set (the server fills defaults).

    A value the proto cannot hold (e.g. a pin beyond int32) raises InvalidRequestError here.
    """
    try:
        return to_proto(req, message_cls, only_set=True)
    except json_format.ParseError as err:
        path = ".".join(_PARSE_FIELD.findall(str(err)))
        violation = FieldViolation(path, str(err))
        raise InvalidRequestError(
            grpc.StatusCode.INVALID_ARGUMENT, str(err), violations=[violation]
        ) from None


def plan_message(req: PlanRequest) -> planner_pb2.PlanRequest:
    """The proto of a plan request (see request_message)."""
    return request_message(req, planner_pb2.PlanRequest)


def batch_message(reqs: Sequence[PlanRequest]) -> planner_pb2.PlanBatchRequest:
    """The proto of a batch of plan requests."""
    return planner_pb2.PlanBatchRequest(requests=[plan_message(r) for r in reqs])


def batch_item(msg: planner_pb2.PlanBatchResponse, request_id: str = "") -> BatchItem:
    """A streamed batch answer as a BatchItem."""
    if msg.WhichOneof("outcome") == "result":
        return BatchItem(msg.index, result=from_proto(msg.result, PlanResult, with_defaults=True))
    err = msg.error
    code = getattr(grpc.StatusCode, err.code, grpc.StatusCode.UNKNOWN)
    error = error_from_parts(code, err.message, request_id=request_id)
    if isinstance(error, InvalidRequestError):
        error.violations.extend(
            FieldViolation(v.field, v.description) for v in err.field_violations
        )
    return BatchItem(msg.index, error=error)


def catalog(msg: planner_pb2.ListCatalogResponse) -> Catalog:
    """A ListCatalog answer as the solver's catalog objects."""
    return Catalog(
        gpus=[from_proto(g, GpuSpec, with_defaults=True) for g in msg.gpus],
        models=[from_proto(m, ModelPreset, with_defaults=True) for m in msg.models],
    )


def new_request_id() -> str:
    """A fresh id sent as x-request-id, logged by the server, carried by errors."""
    return os.urandom(8).hex()  # 16 hex digits, as uuid4().hex[:16] (~10 us) but cheaper


class PlannerClient(SchedulerClient):
    """Blocking client of meshplan.v1.Planner.

    `target` is one gRPC target or a list of IP:port addresses (balanced round-robin). Every call
    has a deadline (`timeout`, default `default_timeout` seconds); UNAVAILABLE is retried by the
    channel's service config; failures raise client.exceptions.PlannerError subclasses.
    TLS (`tls_ca`, or `tls=True` for the system's roots; `tls_cert` / `tls_key` for mTLS) and the
    bearer token (`token` or `token_file`) default to the MESHPLAN_* environment variables of
    client.security; a token is refused over plaintext to another machine unless
    `allow_insecure_token` (ValueError).
    """

    def __init__(
        self,
        target: str | Sequence[str],
        *,
        default_timeout: float = DEFAULT_TIMEOUT_S,
        max_attempts: int = 4,
        channel: grpc.Channel | None = None,
        tls: bool | None = None,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        token: str | None = None,
        token_file: str | None = None,
        allow_insecure_token: bool | None = None,
        security: Security | None = None,
    ) -> None:
        self.target = make_target(target)
        self.default_timeout = default_timeout
        self.security = security or Security.resolve(
            tls=tls,
            tls_ca=tls_ca,
            tls_cert=tls_cert,
            tls_key=tls_key,
            token=token,
            token_file=token_file,
            allow_insecure_token=allow_insecure_token,
        )
        self._channel = channel or open_channel(self.target, self.security, max_attempts)
        self._stub = planner_pb2_grpc.PlannerStub(self._channel)

    def plan(self, req: PlanRequest, *, timeout: float | None = None) -> PlanResult:
        """Plan(): the best layout, or an infeasible result with its explanation."""
        msg = self._unary(self._stub.Plan, plan_message(req), timeout)
        return from_proto(msg, PlanResult, with_defaults=True)

    def evaluate(self, req: EvaluateRequest, *, timeout: float | None = None) -> Evaluation:
        """Evaluate(): score one layout."""
        msg = request_message(req, planner_pb2.EvaluateRequest)
        return from_proto(
            self._unary(self._stub.Evaluate, msg, timeout), Evaluation, with_defaults=True
        )

    def plan_batch(
        self, reqs: Sequence[PlanRequest], *, timeout: float | None = None
    ) -> Iterator[BatchItem]:
        """PlanBatch(): one BatchItem per request, in the order the server finishes them."""
        request_id = new_request_id()
        stream = self._stub.PlanBatch(
            batch_message(reqs),
            timeout=timeout or self.default_timeout,
            metadata=self._metadata(request_id),
        )
        try:
            for msg in stream:
                yield batch_item(msg, request_id)
        except grpc.RpcError as err:
            raise error_from_rpc(err, request_id, self.security.tls) from None
        finally:
            stream.cancel()  # a caller that stops iterating early stops the server's solves

    def list_catalog(self, *, timeout: float | None = None) -> Catalog:
        """ListCatalog(): the GPUs and model presets."""
        msg = self._unary(self._stub.ListCatalog, planner_pb2.ListCatalogRequest(), timeout)
        return catalog(msg)

    def health(self, service: str = "", *, timeout: float | None = None) -> str:
        """The standard health status name: SERVING, NOT_SERVING, ..."""
        stub = health_pb2_grpc.HealthStub(self._channel)
        req = health_pb2.HealthCheckRequest(service=service)
        resp = self._unary(stub.Check, req, timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()

    def __enter__(self) -> PlannerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _metadata(self, request_id: str) -> tuple[tuple[str, str], ...]:
        return ((REQUEST_ID_KEY, request_id), *self.security.metadata())

    def _unary(self, method: Any, msg: object, timeout: float | None) -> Any:
        request_id = new_request_id()
        try:
            return method(
                msg, timeout=timeout or self.default_timeout, metadata=self._metadata(request_id)
            )
        except grpc.RpcError as err:
            raise error_from_rpc(err, request_id, self.security.tls) from None
