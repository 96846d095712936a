"""grpc.health.v1.Health and server reflection, on the event loop, with their streams bounded.

Health answers from memory, never waits for a solver, and is open to every caller (probes):
Watch streams are bounded in all and per peer address, so no one peer locks the others out.
While the server drains, Check answers NOT_SERVING and each Watch stream is sent NOT_SERVING
and then closed, so no open stream holds the shutdown. Reflection streams are bounded in number
and closed when idle.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha._async import ReflectionServicer

from meshplan.server.limits import peer_address

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


class Health(health_pb2_grpc.HealthServicer):
    """Statuses by service name ("" is the server as a whole)."""

    def __init__(self, services: list[str], max_watchers: int) -> None:
        self.statuses = {name: SERVING for name in ["", *services]}
        self.max_watchers = max_watchers
        self.per_peer = max(1, max_watchers // 4)  # anyone may watch: no one peer holds all
        self.watchers = 0
        self.by_peer: Counter[str] = Counter()
        self.draining = False
        self._changed = asyncio.Event()

    def drain(self) -> None:
        """NOT_SERVING for every service, for good; Watch streams are told and closed."""
        self.draining = True
        for name in self.statuses:
            self.statuses[name] = NOT_SERVING
        self._changed.set()

    async def Check(  # noqa: N802  (the proto's name)
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthCheckResponse:
        status = self.statuses.get(request.service)
        if status is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(  # noqa: N802
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[health_pb2.HealthCheckResponse]:
        peer = peer_address(context.peer())
        if self.watchers >= self.max_watchers:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{self.watchers} health watches open, the most this server keeps; use Check",
            )
        if self.by_peer[peer] >= self.per_peer:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{self.by_peer[peer]} health watches open from {peer}, the most one peer may "
                "hold; use Check",
            )
        self.watchers += 1
        self.by_peer[peer] += 1
        try:
            last = None
            while True:
                changed = self._changed  # the event of the next change
                status = self.statuses.get(request.service, SERVICE_UNKNOWN)
                if status != last:
                    yield health_pb2.HealthCheckResponse(status=status)
                    last = status
                if self.draining:
                    return  # told NOT_SERVING: close, so the stream does not hold the shutdown
                await changed.wait()
        finally:
            self.watchers -= 1
            self.by_peer[peer] -= 1
            if self.by_peer[peer] <= 0:
                del self.by_peer[peer]

    def set(self, service: str, status: Any) -> None:
        """Set a service's status (ignored once draining); wakes the Watch streams."""
        if self.draining:
            return
        self.statuses[service] = status
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


class BoundedReflection(ReflectionServicer):
    """Reflection with at most `max_streams` open streams, each closed after `idle_s` idle."""

    def __init__(self, service_names: list[str], max_streams: int, idle_s: float) -> None:
        super().__init__(service_names)
        self.max_streams, self.idle_s = max_streams, idle_s
        self.open = 0

    async def ServerReflectionInfo(  # noqa: N802
        self, request_iterator: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        if self.open >= self.max_streams:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{self.open} reflection streams open, the most this server keeps",
            )
        self.open += 1
        try:
            async for response in super().ServerReflectionInfo(
                self._until_idle(request_iterator), context
            ):
                yield response
        finally:
            self.open -= 1

    async def _until_idle(self, requests: Any) -> AsyncIterator[Any]:
        iterator = requests.__aiter__()
        while True:
            try:
                yield await asyncio.wait_for(iterator.__anext__(), self.idle_s)
            except (StopAsyncIteration, TimeoutError):
                return
