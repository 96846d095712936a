"""AsyncPlannerClient: the asyncio twin of PlannerClient (same arguments, same results)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from meshplan.client.channel import DEFAULT_TIMEOUT_S, make_target, open_channel
from meshplan.client.exceptions import REQUEST_ID_KEY, error_from_rpc
from meshplan.client.scheduler import AsyncSchedulerClient
from meshplan.client.security import Security
from meshplan.client.sync import (
    BatchItem,
    Catalog,
    batch_item,
    batch_message,
    catalog,
    new_request_id,
    plan_message,
    request_message,
)
from meshplan.convert import from_proto
from meshplan.solver.results import Evaluation, PlanResult
from meshplan.solver.schema import EvaluateRequest, PlanRequest
from meshplan.v1 import planner_pb2, planner_pb2_grpc


class AsyncPlannerClient(AsyncSchedulerClient):
    """Asyncio client of meshplan.v1.Planner; use `async with AsyncPlannerClient(...) as c`.

    Takes the same TLS and token arguments as PlannerClient (defaults from the environment)."""

    def __init__(
        self,
        target: str | Sequence[str],
        *,
        default_timeout: float = DEFAULT_TIMEOUT_S,
        max_attempts: int = 4,
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
        self._channel = open_channel(self.target, self.security, max_attempts, aio=True)
        self._stub = planner_pb2_grpc.PlannerStub(self._channel)

    async def plan(self, req: PlanRequest, *, timeout: float | None = None) -> PlanResult:
        """Plan(): the best layout, or an infeasible result with its explanation."""
        msg = await self._unary(self._stub.Plan, plan_message(req), timeout)
        return from_proto(msg, PlanResult, with_defaults=True)

    async def evaluate(self, req: EvaluateRequest, *, timeout: float | None = None) -> Evaluation:
        """Evaluate(): score one layout."""
        msg = request_message(req, planner_pb2.EvaluateRequest)
        return from_proto(
            await self._unary(self._stub.Evaluate, msg, timeout), Evaluation, with_defaults=True
        )

    async def plan_batch(
        self, reqs: Sequence[PlanRequest], *, timeout: float | None = None
    ) -> AsyncIterator[BatchItem]:
        """PlanBatch(): one BatchItem per request, in the order the server finishes them."""
        request_id = new_request_id()
        call = self._stub.PlanBatch(
            batch_message(reqs),
            timeout=timeout or self.default_timeout,
            metadata=self._metadata(request_id),
        )
        try:
            async for msg in call:
                yield batch_item(msg, request_id)
        except grpc.RpcError as err:
            raise error_from_rpc(err, request_id, self.security.tls) from None
        finally:
            call.cancel()

    async def list_catalog(self, *, timeout: float | None = None) -> Catalog:
        """ListCatalog(): the GPUs and model presets."""
        req = planner_pb2.ListCatalogRequest()
        return catalog(await self._unary(self._stub.ListCatalog, req, timeout))

    async def health(self, service: str = "", *, timeout: float | None = None) -> str:
        """The standard health status name: SERVING, NOT_SERVING, ..."""
        stub = health_pb2_grpc.HealthStub(self._channel)
        req = health_pb2.HealthCheckRequest(service=service)
        resp = await self._unary(stub.Check, req, timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)

    async def close(self) -> None:
        """Close the channel."""
        await self._channel.close()

    async def __aenter__(self) -> AsyncPlannerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _metadata(self, request_id: str) -> tuple[tuple[str, str], ...]:
        return ((REQUEST_ID_KEY, request_id), *self.security.metadata())

    async def _unary(self, method: Any, msg: object, timeout: float | None) -> Any:
        request_id = new_request_id()
        try:
            return await method(
                msg, timeout=timeout or self.default_timeout, metadata=self._metadata(request_id)
            )
        except grpc.RpcError as err:
            raise error_from_rpc(err, request_id, self.security.tls) from None
