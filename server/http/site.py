"""The HTTP site: an aiohttp application on the gRPC server's event loop.

aiohttp (https://docs.aiohttp.org) is an asyncio server, so the site shares the loop, the
Runtime and the servicers of server.app.PlannerServer: no second thread, no second copy of any
limit. Routes come from the Planner service's descriptor (`POST /v1/<method-in-kebab-case>`,
`GET /v1/catalog`), so a new RPC answers over HTTP without a line here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
from collections.abc import Sequence
from typing import Any

import grpc
from aiohttp import web
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor

from meshplan.server.auth import TokenSet, bearer, refusal
from meshplan.server.handlers import served
from meshplan.server.http.calls import (
    TIMEOUT,
    Aborted,
    HttpContext,
    aborted_response,
    error_body,
    error_response,
    parse_timeout,
    peer_of,
)
from meshplan.server.http.messages import JsonProblem, message_from_json, message_to_json
from meshplan.server.http.page import Page
from meshplan.server.limits import REQUEST_ID_KEY, CallState, RpcFailure
from meshplan.server.requests import SINGLE_REQUEST_BYTES, bad, request_cap, tolerant
from meshplan.server.runtime import Runtime
from meshplan.server.settings import Settings
from meshplan.server.tls import CertificateFiles
from meshplan.v1 import planner_pb2

log = logging.getLogger("meshplan.server")

PLANNER = planner_pb2.DESCRIPTOR.services_by_name["Planner"]
JSON_PER_WIRE_BYTE = 4  # a JSON body may be this many times the binary request's cap
GET_METHODS = {"ListCatalog": "/v1/catalog"}
NDJSON = "application/x-ndjson"


def route_of(method: MethodDescriptor) -> str:
    """The HTTP path of an RPC: PlanBatch -> /v1/plan-batch (ListCatalog: /v1/catalog)."""
    return GET_METHODS.get(method.name) or "/v1/" + re.sub(r"(?<!^)([A-Z])", r"-\1", method.name).lower()  # fmt: skip


class HttpSite:
    """JSON over HTTP for every servicer method, and the planner page, on settings.http_port."""

    def __init__(
        self,
        settings: Settings,
        runtime: Runtime,
        servicers: Sequence[Any],
        tokens: TokenSet | None,
        certificates: CertificateFiles | None = None,
    ) -> None:
        self.settings, self.runtime, self.tokens = settings, runtime, tokens
        self.certificates = certificates  # the gRPC port's, reloaded once for both ports
        self.page = Page(settings, runtime, self.check_token)
        self.methods: dict[str, tuple[MethodDescriptor, Any]] = {}
        for method in PLANNER.methods:
            owner = next((s for s in servicers if method.name in served(PLANNER, s)), None)
            if owner is not None:
                self.methods[method.name] = (method, getattr(owner, method.name))
        largest = max(settings.max_request_bytes, SINGLE_REQUEST_BYTES)
        self.app = web.Application(client_max_size=JSON_PER_WIRE_BYTE * largest)
        for name, (method, _) in self.methods.items():
            verb = "GET" if name in GET_METHODS else "POST"
            self.app.router.add_route(verb, route_of(method), self._handler(name))
        self.page.add_routes(self.app.router)
        self._sock: socket.socket | None = None
        self._runner: web.AppRunner | None = None

    # --- lifecycle (on the server's event loop, but bind) -----------------------------------

    def bind(self) -> int:
        """Bind the listening socket now (so the port is known before start); its port."""
        self._sock = _bind(self.settings.host, self.settings.http_port or 0)
        return int(self._sock.getsockname()[1])

    async def start(self) -> None:
        """Serve on the bound socket."""
        # handler_cancellation: a client that goes away cancels its call, as over gRPC
        self._runner = web.AppRunner(
            self.app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0
        )
        await self._runner.setup()
        context = self.certificates.ssl_context() if self.certificates is not None else None
        assert self._sock is not None
        await web.SockSite(self._runner, self._sock, ssl_context=context).start()

    async def stop(self) -> None:
        """Close the site (calls in flight have been drained by the runtime already)."""
        if self._runner is not None:
            await self._runner.cleanup()
        elif self._sock is not None:
            self._sock.close()

    # --- calls ------------------------------------------------------------------------------

    async def check_token(self, request: web.Request, name: str) -> web.Response | None:
        """None if the call may go on; else the 401 answer (the request is not read), after
        the wait Runtime.refused asks of a caller refused many times a second."""
        if self.tokens is None:
            return None
        token = bearer(((k.lower(), v) for k, v in request.headers.items()))
        if self.tokens.valid(token):
            return None
        delay = self.runtime.refused(f"/{PLANNER.full_name}/{name}", peer_of(request), "http")
        if delay:
            await asyncio.sleep(delay)
        return error_response(grpc.StatusCode.UNAUTHENTICATED, refusal(token), [])

    def _handler(self, name: str) -> Any:
        method, call = self.methods[name]
        request_cls = message_factory.GetMessageClass(method.input_type)
        wire_cap = request_cap(request_cls, self.settings.max_request_bytes)
        wire = tolerant(request_cls, wire_cap)
        streaming = method.server_streaming

        async def handle(request: web.Request) -> web.StreamResponse:
            refused = await self.check_token(request, name)
            if refused is not None:
                return refused
            try:
                timeout = parse_timeout(request.headers.get(TIMEOUT) or request.query.get(TIMEOUT))  # fmt: skip
            except RpcFailure as err:
                return error_response(err.code, err.message, err.violations)
            context = HttpContext(request, timeout)
            try:
                try:
                    body = await request.read()
                except web.HTTPRequestEntityTooLarge:  # past every call's cap: not read whole
                    return _too_large(request.content_length, JSON_PER_WIRE_BYTE * wire_cap)
                if len(body) > JSON_PER_WIRE_BYTE * wire_cap:
                    return _too_large(len(body), JSON_PER_WIRE_BYTE * wire_cap)
                try:
                    message = wire(message_from_json(body, request_cls).SerializeToString())
                except JsonProblem as problem:  # refused as the servicer refuses bad bytes
                    return await self._refuse(name, context, problem)
                if streaming:
                    return await self._stream(request, context, call(message, context))
                answer = await call(message, context)
            except Aborted as err:
                return aborted_response(err)
            finally:
                context.done()
            return _json(message_to_json(answer), context.request_id())

        return handle

    async def _refuse(self, name: str, context: HttpContext, problem: JsonProblem) -> web.Response:
        """A body that is not the method's message: INVALID_ARGUMENT naming the field, through
        the runtime like any call (admitted, logged, counted)."""

        async def body(request: Any, call: CallState) -> None:
            bad(problem.field, problem.description)

        try:
            await self.runtime.unary(name, context, problem, body)  # type: ignore[arg-type]
        except Aborted as err:
            return aborted_response(err)
        raise AssertionError("a refused call returned")  # pragma: no cover

    async def _stream(
        self, request: web.Request, context: HttpContext, answers: Any
    ) -> web.StreamResponse:
        """A server stream as JSON lines; the status waits for the first answer, so a call
        refused before any answer gets its own status; one refused later ends with an
        {"error": ...} line."""
        try:
            try:
                first = await answers.__anext__()
            except StopAsyncIteration:
                first = None
            response = web.StreamResponse(
                headers={"Content-Type": NDJSON, REQUEST_ID_KEY: context.request_id()}
            )
            await response.prepare(request)
            if first is not None:
                await response.write(_line(message_to_json(first)))
                try:
                    async for answer in answers:
                        await response.write(_line(message_to_json(answer)))
                except Aborted as err:
                    body = error_body(err.code, err.message, err.violations, err.request_id)
                    await response.write(_line(body))
            await response.write_eof()
            return response
        finally:
            await answers.aclose()


def _json(data: Any, request_id: str) -> web.Response:
    headers = {REQUEST_ID_KEY: request_id} if request_id else {}
    return web.Response(
        body=json.dumps(data, separators=(",", ":")).encode(),
        content_type="application/json",
        headers=headers,
    )


def _line(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode() + b"\n"


def _too_large(size: int | None, cap: int) -> web.Response:
    held = f"is {size:,} bytes, more than" if size else "is more than"
    return error_response(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"the request body {held} the {cap:,} bytes this call may hold",
        [],
    )


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port ('[::]': every address, IPv4 too where it can)."""
    name = host.strip("[]") or "::"
    try:
        if name == "::":
            return socket.create_server(
                ("::", port), family=socket.AF_INET6, dualstack_ipv6=socket.has_dualstack_ipv6()
            )
        family, _, _, _, address = socket.getaddrinfo(
            name, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        return socket.create_server(address, family=family)
    except OSError as err:
        raise OSError(f"cannot listen on {host}:{port} for HTTP: {err}") from err
