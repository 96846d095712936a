"""`meshplan serve`: flags over MESHPLAN_* environment variables over the defaults."""

from __future__ import annotations

import argparse
import logging
import sys

from pydantic import ValidationError

from meshplan.server.settings import Settings

# flag -> Settings field; every flag defaults to None so the environment applies when absent
_FLAGS: dict[str, type] = {
    "host": str,
    "port": int,
    "max_concurrent_solves": int,
    "max_queued_solves": int,
    "workers_per_solve": int,
    "default_time_limit_s": float,
    "max_time_limit_s": float,
    "deadline_margin_s": float,
    "deadline_reserve": float,
    "max_batch_requests": int,
    "max_message_bytes": int,
    "grace_period_s": float,
    "log_level": str,
}


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per server setting (also settable as MESHPLAN_<NAME> in the environment)."""
    fields = Settings.model_fields
    for name, kind in _FLAGS.items():
        env = f"MESHPLAN_{name.upper()}"
        parser.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            type=kind,
            default=None,
            help=f"{fields[name].description} [env {env}]",
        )


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings from the flags that were given, the environment and the defaults."""
    given = {name: getattr(args, name) for name in _FLAGS if getattr(args, name, None) is not None}
    return Settings(**given)


def run_serve(args: argparse.Namespace) -> int:
    """Run the server until SIGTERM; 0 on a clean drain, 2 on bad settings."""
    try:
        settings = settings_from_args(args)
    except ValidationError as err:
        print(f"meshplan serve: bad settings:\n{err}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    from meshplan.server.app import serve

    try:
        return serve(settings)
    except OSError as err:
        print(f"meshplan serve: {err}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m meshplan.server`."""
    parser = argparse.ArgumentParser(
        prog="python -m meshplan.server", description="Run meshplan.v1.Planner."
    )
    add_serve_arguments(parser)
    return run_serve(parser.parse_args(argv))
