"""The planner page: its static files (plain JS and SVG, no third-party asset) and three helpers
it calls beside the /v1 calls: its metadata (the protos' enums, the export kinds, the walls'
meaning), the export of a plan for its framework, and a Hugging Face config.json read as a
model spec. The helpers are calls like the /v1 ones (PageMeta, PageExport, PageHfConfig): through
the runtime's admission (the export and the config reader), deadline, log line and metrics."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import mimetypes
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import grpc
from aiohttp import web
from pydantic import ValidationError

from meshplan.convert import enum_prefix, to_proto
from meshplan.server.http.calls import (
    TIMEOUT,
    Aborted,
    HttpContext,
    aborted_response,
    error_response,
    parse_timeout,
)
from meshplan.server.http.extras import installed
from meshplan.server.http.messages import JsonProblem, message_from_json, message_to_json
from meshplan.server.limits import CallState, RpcFailure
from meshplan.server.requests import SINGLE_REQUEST_BYTES, bad, check_message, parse
from meshplan.server.runtime import Runtime
from meshplan.server.settings import Settings
from meshplan.server.validate import from_validation_error, shorten
from meshplan.solver.profiles import profile_of
from meshplan.solver.schema import EvaluateRequest, Framework
from meshplan.v1 import planner_pb2, spec_pb2

STATIC = Path(__file__).parent / "static"
HELPER_BYTES = 4 * SINGLE_REQUEST_BYTES  # an export request, a config.json
# the page loads nothing from elsewhere and runs no inline script
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
ENUMS = ("Framework", "Precision", "Recompute")

TokenCheck = Callable[[web.Request, str], Awaitable[web.Response | None]]
Helper = Callable[[web.Request], Awaitable[web.Response]]


@dataclass(frozen=True)
class Asset:
    """One static file, read once, with its gzip form and an ETag."""

    body: bytes
    gzipped: bytes
    content_type: str
    etag: str


def load_assets(folder: Path = STATIC) -> dict[str, Asset]:
    """Every file of the page, by name."""
    out = {}
    for path in sorted(folder.iterdir()):
        if not path.is_file():
            continue
        body = path.read_bytes()
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind in ("application/javascript", "image/svg+xml"):
            kind += "; charset=utf-8"
        etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
        out[path.name] = Asset(body, gzip.compress(body, 9, mtime=0), kind, etag)
    return out


class Page:
    """The routes of the page: `/`, `/static/<name>`, `/page/meta`, `/page/export`,
    `/page/hf-config`."""

    def __init__(self, settings: Settings, runtime: Runtime, check_token: TokenCheck) -> None:
        self.settings = settings
        self.runtime = runtime
        self.check_token = check_token
        self.assets = load_assets()

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/", self.index)
        router.add_get("/static/{name}", self.static)
        router.add_get("/page/meta", self.meta)
        router.add_post("/page/export", self.export)
        router.add_post("/page/hf-config", self.hf_config)

    # --- files ------------------------------------------------------------------------------

    async def index(self, request: web.Request) -> web.Response:
        return self._asset(request, "index.html")

    async def static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.assets or name == "index.html":
            raise web.HTTPNotFound(text=f"no file {shorten(name)!r} on this page")
        return self._asset(request, name)

    def _asset(self, request: web.Request, name: str) -> web.Response:
        asset = self.assets[name]
        headers = {**HEADERS, "ETag": asset.etag, "Vary": "Accept-Encoding"}
        if request.headers.get("If-None-Match") == asset.etag:
            return web.Response(status=304, headers=headers)
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            headers["Content-Encoding"] = "gzip"
            body = asset.gzipped
        else:
            body = asset.body
        headers["Content-Type"] = asset.content_type
        return web.Response(body=body, headers=headers)

    # --- helpers ----------------------------------------------------------------------------

    async def meta(self, request: web.Request) -> web.Response:
        """What the form offers: the enums' short names, each framework's export kind, the
        export kinds and Hugging Face model types this server can handle, the walls' words,
        and whether calls need a token (answered from memory: no admission ticket)."""
        return await self._call(request, "PageMeta", self._meta, admit=False)

    async def export(self, request: web.Request) -> web.Response:
        """POST an EvaluateRequest (model, cluster, training, the plan's config), `?kind=`
        optional: the plan as its framework's input, {"kind", "text"}."""
        return await self._call(request, "PageExport", self._export)

    async def hf_config(self, request: web.Request) -> web.Response:
        """POST a Hugging Face config.json: {"model": the ModelSpec it describes}."""
        return await self._call(request, "PageHfConfig", self._hf_config)

    async def _call(
        self, request: web.Request, name: str, helper: Helper, *, admit: bool = True
    ) -> web.Response:
        """`helper(request)` as a call: the token, the `timeout`, admission, the log line and
        the metrics as for a /v1 call; a failure is its JSON error answer."""
        refused = await self.check_token(request, name)
        if refused is not None:
            return refused
        try:
            timeout = parse_timeout(request.headers.get(TIMEOUT) or request.query.get(TIMEOUT))
        except RpcFailure as err:
            return error_response(err.code, err.message, err.violations)
        context = HttpContext(request, timeout)

        async def body(_: Any, call: CallState) -> web.Response:
            return await helper(request)

        try:
            answer: web.Response = await self.runtime.unary(name, context, None, body, admit=admit)
        except Aborted as err:
            return aborted_response(err)
        finally:
            context.done()
        return answer

    async def _meta(self, request: web.Request) -> web.Response:
        tools = installed()
        enums = {}
        for name in ENUMS:
            desc = spec_pb2.DESCRIPTOR.enum_types_by_name[name]
            prefix = enum_prefix(desc)
            enums[name] = [v.name[len(prefix) :] for v in desc.values if v.number]
        return web.json_response(
            {
                "enums": enums,
                "framework_export": {f.value: profile_of(f).export for f in Framework},
                "export_kinds": list(tools.export_kinds) if tools.export else [],
                "hf_model_types": list(tools.hf_model_types)
                if tools.model_from_hf_config
                else [],  # fmt: skip
                "walls": dict(tools.walls),
                "tokens": self.settings.auth_token_file is not None,
            }
        )

    async def _export(self, request: web.Request) -> web.Response:
        body = await _read(request)
        tools = installed()
        if tools.export is None:
            _unavailable("the export")
        kind = request.query.get("kind") or None
        if kind is not None and kind not in tools.export_kinds:
            bad("kind", f"is not one of {', '.join(tools.export_kinds)} (got {shorten(repr(kind))})")  # fmt: skip
        try:
            message = message_from_json(body, planner_pb2.EvaluateRequest)
        except JsonProblem as err:
            bad(err.field, err.description)
        req = parse(check_message(message, self.settings.max_string_chars), EvaluateRequest)
        c, t = req.config, req.training
        if not c.num_microbatches:
            bad("config.num_microbatches", "is needed to export a plan (got none)")
        tokens = c.dp * c.micro_batch_size * c.num_microbatches * t.seq_len
        try:
            text = await asyncio.to_thread(tools.export, kind, c, req.model, t, tokens, req.cluster)
        except ValueError as err:
            bad("config", shorten(str(err), 600))
        return web.json_response({"kind": kind or profile_of(t.framework).export, "text": text})

    async def _hf_config(self, request: web.Request) -> web.Response:
        body = await _read(request)
        tools = installed()
        if tools.model_from_hf_config is None:
            _unavailable("reading a config.json")
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as err:
            bad("config.json", f"is not JSON: {shorten(str(err), 200)}")
        if not isinstance(data, dict):
            bad("config.json", "must be one JSON object")
        try:
            spec = tools.model_from_hf_config(data)
        except ValidationError as err:
            v = from_validation_error(err, "config.json")
            raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, v[0].description, v) from None
        except (ValueError, KeyError, TypeError) as err:
            bad("config.json", shorten(str(err), 300))
        return web.json_response({"model": message_to_json(to_proto(spec, spec_pb2.ModelSpec))})


async def _read(request: web.Request) -> bytes:
    """The body of a helper's request, up to HELPER_BYTES (RESOURCE_EXHAUSTED past it)."""
    if request.content_length is not None and request.content_length > HELPER_BYTES:
        _too_large(request.content_length)
    body = await request.read()
    if len(body) > HELPER_BYTES:
        _too_large(len(body))
    return body


def _too_large(size: int) -> NoReturn:
    raise RpcFailure(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"the request body is {size:,} bytes, more than the {HELPER_BYTES:,} it may hold",
    )


def _unavailable(what: str) -> NoReturn:
    text = f"{what} is not available on this server: start it with `meshplan serve`"
    raise RpcFailure(grpc.StatusCode.UNIMPLEMENTED, text)
