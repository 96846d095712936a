"""Helpers of the HTTP tests: a server with its HTTP port and the page's tools, and a small
JSON client over urllib (nothing the server uses)."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from test_grpc_support import LOOPBACK, running_server

from meshplan.server.app import PlannerServer
from meshplan.server.http.extras import PageTools, install, installed
from meshplan.tools.cli.serve import page_tools


@dataclass
class Answer:
    status: int
    body: Any  # parsed JSON (a list of objects for JSON lines), or the text
    headers: dict[str, str]

    @property
    def violations(self) -> list[tuple[str, str]]:
        error = self.body.get("error", {}) if isinstance(self.body, dict) else {}
        return [
            (v["field"], v["description"])
            for d in error.get("details", [])
            for v in d.get("field_violations", [])
        ]


def send(
    url: str,
    body: Any = None,
    *,
    headers: dict[str, str] | None = None,
    method: str | None = None,
    context: ssl.SSLContext | None = None,
    timeout: float = 120,
) -> Answer:
    """One call; `body` a JSON value, or bytes sent as they are."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, method=method or ("GET" if data is None else "POST"), headers=headers or {}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
            status, raw, head = r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        status, raw, head = e.code, e.read(), dict(e.headers)
    text = raw.decode()
    if head.get("Content-Type", "").startswith("application/x-ndjson"):
        return Answer(status, [json.loads(line) for line in text.splitlines() if line], head)
    try:
        return Answer(status, json.loads(text), head)
    except ValueError:
        return Answer(status, text, head)


@contextmanager
def page_tools_installed() -> Iterator[PageTools]:
    before = installed()
    install(page_tools())
    try:
        yield installed()
    finally:
        install(before)


@contextmanager
def http_server(**overrides: object) -> Iterator[tuple[str, int, PlannerServer]]:
    """A started server with an HTTP port (and the page's tools): (base URL, gRPC port, server)."""
    scheme = "https" if overrides.get("tls_cert") else "http"
    host = "localhost" if scheme == "https" else LOOPBACK
    with page_tools_installed(), running_server(http_port=0, **overrides) as (port, server):
        yield f"{scheme}://{host}:{server.http_port}", port, server
