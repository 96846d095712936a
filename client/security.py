"""How a client reaches a server: TLS (and a client certificate for mTLS) and a bearer token.

Arguments win over the environment, which supplies the defaults:

| environment | meaning |
| --- | --- |
| `MESHPLAN_TOKEN` / `MESHPLAN_TOKEN_FILE` | the bearer token, or a file holding it |
| `MESHPLAN_TLS_CA` | CA bundle (PEM) to trust; setting it turns TLS on |
| `MESHPLAN_TLS` | `1`: TLS with the system's roots |
| `MESHPLAN_CLIENT_CERT` / `MESHPLAN_CLIENT_KEY` | client certificate and key (PEM) for mTLS |
| `MESHPLAN_TLS_SERVER_NAME` | name to expect in the server's certificate (default: the target's) |
| `MESHPLAN_ALLOW_INSECURE_TOKEN` | `1`: send the token over plaintext to a non-loopback target |

A token is never sent in plaintext to a target outside this machine unless allowed: a bearer
token on the wire is a password on the wire.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

_TRUE = {"1", "true", "yes", "on"}


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise ValueError(f"cannot read the {what} {path}: {err.strerror or err}") from None


def read_token(path: str) -> str:
    """The token in a file: its first non-blank line that is not a `#` comment."""
    for line in _read(path, "token file").decode("utf-8", "replace").splitlines():
        if line.strip() and not line.strip().startswith("#"):
            return line.strip()
    raise ValueError(f"the token file {path} holds no token")


@dataclass(frozen=True)
class Security:
    """TLS and token settings of a client; `Security.resolve(...)` fills them from the env."""

    tls: bool = False
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_server_name: str | None = None
    token: str | None = None
    allow_insecure_token: bool = False

    @classmethod
    def resolve(
        cls,
        *,
        tls: bool | None = None,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        tls_server_name: str | None = None,
        token: str | None = None,
        token_file: str | None = None,
        allow_insecure_token: bool | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Security:
        """The settings given, else the environment's; ValueError on an unreadable file or a
        certificate without its key."""
        env = os.environ if environ is None else environ
        tls_ca = tls_ca or env.get("MESHPLAN_TLS_CA") or None
        tls_cert = tls_cert or env.get("MESHPLAN_CLIENT_CERT") or None
        tls_key = tls_key or env.get("MESHPLAN_CLIENT_KEY") or None
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("a client certificate and its key go together: give both or neither")
        if token is None:
            token_file = token_file or env.get("MESHPLAN_TOKEN_FILE") or None
            token = read_token(token_file) if token_file else (env.get("MESHPLAN_TOKEN") or None)
        if tls is None:
            tls = env.get("MESHPLAN_TLS", "").lower() in _TRUE
        if allow_insecure_token is None:
            allow_insecure_token = env.get("MESHPLAN_ALLOW_INSECURE_TOKEN", "").lower() in _TRUE
        return cls(
            tls=bool(tls or tls_ca or tls_cert),
            tls_ca=tls_ca,
            tls_cert=tls_cert,
            tls_key=tls_key,
            tls_server_name=tls_server_name or env.get("MESHPLAN_TLS_SERVER_NAME") or None,
            token=token,
            allow_insecure_token=allow_insecure_token,
        )

    def check(self, target: str) -> None:
        """ValueError if a token would go in plaintext to a target outside this machine."""
        if self.token and not self.tls and not self.allow_insecure_token and not is_local(target):
            raise ValueError(
                f"refusing to send a bearer token in plaintext to {target}: use TLS (a CA "
                "bundle to trust, or MESHPLAN_TLS=1), or allow it explicitly "
                "(allow_insecure_token / --allow-insecure-token)"
            )

    def credentials(self) -> grpc.ChannelCredentials | None:
        """Channel credentials for TLS (None: plaintext)."""
        if not self.tls:
            return None
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.tls_ca, "CA bundle") if self.tls_ca else None,
            private_key=_read(self.tls_key, "client key") if self.tls_key else None,
            certificate_chain=_read(self.tls_cert, "client certificate") if self.tls_cert else None,
        )

    def options(self) -> list[tuple[str, Any]]:
        """Channel options (the expected server name, when overridden)."""
        if self.tls and self.tls_server_name:
            return [("grpc.ssl_target_name_override", self.tls_server_name)]
        return []

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """Call metadata carrying the token."""
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()


def is_local(target: str) -> bool:
    """Whether every address of a gRPC target is on this machine (loopback or a unix socket)."""
    if target.startswith(("unix:", "unix-abstract:")):
        return True
    for scheme in ("ipv4:", "ipv6:", "dns:///", "dns:"):
        if target.startswith(scheme):
            target = target[len(scheme) :]
            break
    return all(_local_host(address) for address in target.split(","))


def _local_host(address: str) -> bool:
    host = address.strip()
    if host.startswith("["):
        host = host[1 : host.index("]")] if "]" in host else host[1:]
    elif host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
