"""Connection flags of the commands that call a server (`--server`): TLS, mTLS and the token.

`add_connection_flags(parser)` adds them next to `--server`; `connect(args)` opens a
PlannerClient with them. The flags are also exported to this command's environment as the
client's MESHPLAN_* variables (meshplan.client.security) as they are parsed, so every client the
command opens (a sweep's, a ladder's) uses them; a flag wins over the same variable already set.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the client (and grpc) load only when a command connects
    from meshplan.client.security import Security
    from meshplan.client.sync import PlannerClient

# flag -> (environment variable of the client, help)
_FLAGS: dict[str, tuple[str, str]] = {
    "--tls-ca": (
        "MESHPLAN_TLS_CA",
        "CA bundle (PEM) to trust: connect with TLS (default: plaintext)",
    ),
    "--tls-cert": (
        "MESHPLAN_CLIENT_CERT",
        "client certificate (PEM) for mTLS, with --tls-key (default: none)",
    ),
    "--tls-key": ("MESHPLAN_CLIENT_KEY", "client private key (PEM) for mTLS (default: none)"),
    "--tls-server-name": (
        "MESHPLAN_TLS_SERVER_NAME",
        "name to expect in the server certificate (default: the target's host)",
    ),
    "--token-file": (
        "MESHPLAN_TOKEN_FILE",
        "file holding the bearer token (default: env MESHPLAN_TOKEN, else no token)",
    ),
}
_SWITCHES: dict[str, tuple[str, str]] = {
    "--tls": ("MESHPLAN_TLS", "connect with TLS, trusting the system's CA roots (default: off)"),
    "--allow-insecure-token": (
        "MESHPLAN_ALLOW_INSECURE_TOKEN",
        "send the token even over plaintext to another machine (not recommended; default: off)",
    ),
}


class _Export(argparse.Action):
    """Stores the value and exports it as the client's environment variable."""

    def __init__(self, *args: Any, env: str, switch: bool = False, **kwargs: Any) -> None:
        self.env, self.switch = env, switch
        super().__init__(*args, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        value = "1" if self.switch else str(values)
        setattr(namespace, self.dest, True if self.switch else value)
        os.environ[self.env] = value


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    """Add --tls, --tls-ca, --tls-cert, --tls-key, --tls-server-name, --token-file and
    --allow-insecure-token (each also settable as its MESHPLAN_* variable)."""
    group = parser.add_argument_group("connection to the server (with --server)")
    for flag, (env, text) in _FLAGS.items():
        metavar = "NAME" if flag == "--tls-server-name" else "PATH"
        group.add_argument(
            flag, action=_Export, env=env, metavar=metavar, help=f"{text} [env {env}]"
        )
    for flag, (env, text) in _SWITCHES.items():
        group.add_argument(
            flag, action=_Export, env=env, switch=True, nargs=0, help=f"{text} [env {env}=1]"
        )


def security(args: argparse.Namespace) -> Security:
    """The connection settings: the flags given, then the environment."""
    from meshplan.client.security import Security

    return Security.resolve(
        tls=getattr(args, "tls", None) or None,
        tls_ca=getattr(args, "tls_ca", None),
        tls_cert=getattr(args, "tls_cert", None),
        tls_key=getattr(args, "tls_key", None),
        tls_server_name=getattr(args, "tls_server_name", None),
        token_file=getattr(args, "token_file", None),
        allow_insecure_token=getattr(args, "allow_insecure_token", None) or None,
    )


def connect(args: argparse.Namespace, target: str | Sequence[str] | None = None) -> PlannerClient:
    """A PlannerClient to `target` (default: `--server`, comma-separated) with the connection
    flags; ValueError on an unreadable file or a token that would go in plaintext."""
    from meshplan.client.sync import PlannerClient

    where = target if target is not None else [s for s in str(args.server).split(",") if s]
    return PlannerClient(where, security=security(args))
