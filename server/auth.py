"""Bearer tokens: who may call meshplan.v1, checked before anything of the request is parsed.

The token file holds one token per line (blank lines and `#` comments ignored); it is read again
when it changes and on SIGHUP, so tokens rotate without a restart. Tokens are compared in
constant time (hmac.compare_digest over SHA-256 digests, against every token, no early exit).
A caller is known by its verified token's digest ("token:1a2b3c4d"), else (no authentication)
by its peer address: the unit of the per-caller limits.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc

from meshplan.server.limits import peer_address

log = logging.getLogger("meshplan.server")

AUTHORIZATION = "authorization"
_BEARER = "bearer "
MIN_TOKEN_CHARS = 16  # a shorter token is refused when the file is read
PROTECTED_PREFIX = "/meshplan."  # every method of every meshplan service needs a token


def bearer(metadata: Any) -> str | None:
    """The token of an `authorization: Bearer <token>` header, if any."""
    for key, value in metadata or ():
        if key == AUTHORIZATION and isinstance(value, str) and value.lower().startswith(_BEARER):
            return value[len(_BEARER) :].strip()
    return None


def refusal(token: str | None) -> str:
    """Why a call without a valid token is refused, in the words both transports send."""
    return "a bearer token is required" if not token else "the bearer token is not valid"


def caller_of(metadata: Any, peer: str, verified: bool) -> str:
    """The caller's identity for fair use: its token's digest when tokens are checked
    (`verified`: the interceptor let only a valid one through), else its address. Without
    authentication a token is whatever the caller makes up, so it names nobody: a caller
    sending a new one each call would otherwise be a new caller each call."""
    token = bearer(metadata) if verified else None
    if token:
        return "token:" + hashlib.sha256(token.encode()).hexdigest()[:8]
    return peer_address(peer)


def read_tokens(path: str) -> list[bytes]:
    """SHA-256 digests of the tokens in `path`; ValueError naming the line of a bad one."""
    digests = []
    for number, raw in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if len(line) < MIN_TOKEN_CHARS or any(c.isspace() for c in line):
            raise ValueError(
                f"{path}:{number}: a token is one word of at least {MIN_TOKEN_CHARS} characters"
            )
        digests.append(hashlib.sha256(line.encode()).digest())
    if not digests:
        raise ValueError(f"{path}: holds no token")
    return digests


class TokenSet:
    """The accepted tokens, from a file, reloaded when it changes or on `reload()`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._digests = read_tokens(path)
        self._stamp = self._file_stamp()

    def _file_stamp(self) -> tuple[int, int]:
        st = os.stat(self.path)
        return st.st_mtime_ns, st.st_size

    def reload(self) -> None:
        """Read the file again; on a bad file keep the tokens in force and log why."""
        try:
            digests, stamp = read_tokens(self.path), self._file_stamp()
        except (OSError, ValueError) as err:
            log.error("keeping the tokens in force: cannot reload %s: %s", self.path, err)
            return
        self._digests, self._stamp = digests, stamp
        log.info("tokens reloaded from %s (%d tokens)", self.path, len(digests))

    def _maybe_reload(self) -> None:
        try:
            changed = self._file_stamp() != self._stamp
        except OSError:
            return  # a file being replaced: keep the tokens in force
        if changed:
            self.reload()

    def valid(self, token: str | None) -> bool:
        """Whether `token` is one of the tokens, in time independent of which and how close."""
        self._maybe_reload()
        if not token:
            return False
        digest = hashlib.sha256(token.encode()).digest()
        ok = False
        for known in self._digests:
            ok |= hmac.compare_digest(digest, known)
        return ok


# (method, peer) of a call refused for its token -> seconds its refusal waits (Runtime.refused)
Rejected = Callable[[str, str], float]


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """UNAUTHENTICATED for a meshplan call without a valid token; its request is not parsed.

    Health (grpc.health.v1) stays open for probes; reflection is governed by its own flag.
    """

    def __init__(self, tokens: TokenSet, on_reject: Rejected) -> None:
        self.tokens = tokens
        self.on_reject = on_reject

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or not details.method.startswith(PROTECTED_PREFIX):
            return handler
        metadata = details.invocation_metadata
        token = bearer(metadata)
        if self.tokens.valid(token):
            return handler
        return _refusal(handler, details.method, refusal(token), self.on_reject)


def _refusal(
    handler: grpc.RpcMethodHandler, method: str, why: str, on_reject: Rejected
) -> grpc.RpcMethodHandler:
    """A handler of the same kind that reads the request as raw bytes and refuses the call."""

    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
        delay = on_reject(method, context.peer())
        if delay:
            await asyncio.sleep(delay)
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, why)

    async def refuse_stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await refuse(request, context)
        yield  # an async generator, as a streaming handler must be  # pragma: no cover

    kinds = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }
    kind = (handler.request_streaming, handler.response_streaming)
    behaviour = refuse_stream if handler.response_streaming else refuse
    return kinds[kind](behaviour, request_deserializer=None, response_serializer=None)
