"""`meshplan serve`: flags over MESHPLAN_* environment variables over the defaults.

Every Settings field is a flag (`max_concurrent_solves` -> `--max-concurrent-solves`) and an
environment variable (`MESHPLAN_MAX_CONCURRENT_SOLVES`); a flag given wins.
"""

from __future__ import annotations

import argparse
import sys
import types
import typing
from typing import Any

from pydantic import ValidationError

from meshplan.server.settings import Settings


def _flag_type(annotation: Any) -> tuple[Any, list[str] | None]:
    """The argparse type of a field (and its choices, for a Literal)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return _flag_type(args[0])
    if typing.get_origin(annotation) is typing.Literal:
        return str, [str(a) for a in typing.get_args(annotation)]
    return annotation, None


def _metavar(name: str, kind: Any) -> str:
    if name.startswith(("tls_", "auth_")):
        return "PATH"
    if name.endswith("_s"):
        return "SECONDS"
    return "N" if kind in (int, float) else name.upper()


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per server setting (also settable as MESHPLAN_<NAME> in the environment)."""
    for name, info in Settings.model_fields.items():
        env = f"MESHPLAN_{name.upper()}"
        flag = "--" + name.replace("_", "-")
        kind, choices = _flag_type(info.annotation)
        default = info.default_factory() if info.default_factory else info.default
        shown = "" if default is None else f"; default {default}"
        help_text = f"{info.description} [env {env}{shown}]"
        if kind is bool:
            parser.add_argument(
                flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        else:
            parser.add_argument(
                flag,
                dest=name,
                type=kind,
                choices=choices,
                default=None,
                metavar=_metavar(name, kind) if choices is None else None,
                help=help_text,
            )


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings from the flags that were given, the environment and the defaults."""
    given = {
        name: getattr(args, name)
        for name in Settings.model_fields
        if getattr(args, name, None) is not None
    }
    return Settings(**given)


def _bad_settings(err: ValidationError) -> str:
    lines = []
    for e in err.errors(include_url=False):
        name = ".".join(str(p) for p in e["loc"]) or "settings"
        flag = "--" + name.replace("_", "-") if e["loc"] else name
        value = "" if e["type"] == "missing" else f" (got {str(e.get('input'))[:80]!r})"
        lines.append(f"{flag}: {e['msg'].removeprefix('Value error, ')}{value}")
    return "; ".join(lines)


def _bad_files(settings: Settings) -> str:
    """Why the token file or the certificates cannot be used ('' when they can): bad settings,
    found before the server starts."""
    from meshplan.server.auth import read_tokens
    from meshplan.server.tls import CertificateFiles

    try:
        if settings.auth_token_file:
            read_tokens(settings.auth_token_file)
    except (OSError, ValueError) as err:
        return f"--auth-token-file: {err}"
    try:
        if settings.tls_cert and settings.tls_key:
            CertificateFiles(settings.tls_cert, settings.tls_key, settings.tls_client_ca)
    except (OSError, ValueError) as err:
        return f"--tls-cert/--tls-key/--tls-client-ca: {err}"
    return ""


def run_serve(args: argparse.Namespace) -> int:
    """Run the server until SIGTERM; 0 on a clean drain, 2 on bad settings (a bad token file or
    certificate included), 1 if it cannot start (a port in use)."""
    try:
        settings = settings_from_args(args)
    except ValidationError as err:
        print(f"meshplan serve: bad settings: {_bad_settings(err)}", file=sys.stderr)
        return 2
    from meshplan.server.logs import setup_logging

    try:
        setup_logging(settings.log_level, settings.log_format)
    except ValueError as err:
        print(f"meshplan serve: bad settings: --log-level: {err}", file=sys.stderr)
        return 2
    bad = _bad_files(settings)
    if bad:
        print(f"meshplan serve: bad settings: {bad}", file=sys.stderr)
        return 2
    from meshplan.server.app import serve

    try:
        return serve(settings)
    except (OSError, ValueError) as err:  # a port in use, an unreadable certificate or token file
        print(f"meshplan serve: {err}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m meshplan.server`."""
    parser = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m meshplan.server", description="Run meshplan.v1.Planner."
    )
    add_serve_arguments(parser)
    return run_serve(parser.parse_args(argv))
