"""Server settings: defaults here, overridden by MESHPLAN_* environment variables, then by flags."""

from __future__ import annotations

import os

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_solves() -> int:
    return max(1, (os.cpu_count() or 1) // 2)


class Settings(BaseSettings):
    """How `meshplan serve` listens, how much it solves at once and for how long."""

    model_config = SettingsConfigDict(env_prefix="MESHPLAN_", extra="forbid")

    host: str = Field(default="[::]", description="Address to bind (host; [::] = every address).")
    port: int = Field(default=50051, description="Port to bind (0: any free port).", ge=0, le=65535)
    max_concurrent_solves: int = Field(
        default_factory=_default_solves,
        description="Solves running at once (count; default: half the CPUs).",
        ge=1,
        le=1024,
    )
    max_queued_solves: int = Field(
        default=32,
        description="Solves waiting for a slot before RESOURCE_EXHAUSTED (count).",
        ge=0,
        le=10_000,
    )
    workers_per_solve: int = Field(
        default=1,
        description="CP-SAT workers per solve: default and cap of options.num_workers (threads).",
        ge=1,
        le=64,
    )
    default_time_limit_s: float = Field(
        default=10.0,
        description="Solve time when a request sets no options.time_limit_s (seconds).",
        gt=0,
        le=3600,
    )
    max_time_limit_s: float = Field(
        default=60.0, description="Cap on any solve's time limit (seconds).", gt=0, le=3600
    )
    deadline_margin_s: float = Field(
        default=0.05,
        description="Time kept back from the RPC deadline to send the answer (seconds).",
        ge=0,
        le=10,
    )
    deadline_reserve: float = Field(
        default=0.1,
        description="Share of the RPC's remaining time kept back for model building (fraction).",
        ge=0,
        lt=1,
    )
    max_batch_requests: int = Field(
        default=1024, description="Cap on the requests of one PlanBatch call (count).", ge=1
    )
    max_message_bytes: int = Field(
        default=16 * 1024 * 1024,
        description="Largest request or response message (bytes).",
        ge=1024,
    )
    grace_period_s: float = Field(
        default=30.0,
        description="On SIGTERM, time calls in flight get before they are cancelled (seconds).",
        ge=0,
    )
    log_level: str = Field(default="INFO", description="Python logging level (name).")
