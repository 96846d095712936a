"""Server settings: defaults here, overridden by MESHPLAN_* environment variables, then by flags."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask, capped by a cgroup v2 CPU quota (a
    container's `limits.cpu`), at least one."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):  # no cgroup v2 quota
        pass
    return max(1, cpus)


class Settings(BaseSettings):
    """How `meshplan serve` listens, whom it serves, how much it solves at once and for how long."""

    model_config = SettingsConfigDict(env_prefix="MESHPLAN_", extra="forbid")

    # --- listening --------------------------------------------------------------------------
    host: str = Field(default="[::]", description="Address to bind (host; [::] = every address).")
    port: int = Field(default=50051, description="Port to bind (0: any free port).", ge=0, le=65535)

    # --- solver capacity --------------------------------------------------------------------
    solver_processes: int | None = Field(
        default=None,
        description="Worker processes that run the solves, one solve each at a time (count; "
        "unset: max_concurrent_solves if set, else one per usable CPU; 0: no worker processes, "
        "solves run on threads of the server process).",
        ge=0,
        le=1024,
    )
    max_concurrent_solves: int | None = Field(
        default=None,
        description="Solves running at once (count; unset: solver_processes, or half the CPUs "
        "when solves run on threads).",
        ge=1,
        le=1024,
    )
    max_queued_solves: int = Field(
        default=32,
        description="Calls admitted beyond the solver slots, waiting inside the server for a "
        "slot (count); more wait their turn for admission (max_waiting_calls).",
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
    max_deadline_s: float = Field(
        default=3600.0,
        description="Deadline of a call that sets none, and cap on any call's deadline (seconds).",
        gt=0,
        le=7 * 86400,
    )

    # --- fair use ---------------------------------------------------------------------------
    max_calls_per_caller: int = Field(
        default=16,
        description="Planner calls one caller (its verified token, else its peer address) may "
        "have in progress or waiting (count).",
        ge=1,
        le=10_000,
    )
    max_waiting_calls: int = Field(
        default=128,
        description="Calls waiting their turn for admission, all callers together, before "
        "RESOURCE_EXHAUSTED (count; each waits at most until its deadline).",
        ge=0,
        le=100_000,
    )
    max_solves_per_caller: int = Field(
        default=0,
        description="Solves one caller may run at once (count; 0: half the solver slots, >= 1; "
        "a single-tenant server sets it to max_concurrent_solves so one batch uses every slot).",
        ge=0,
        le=1024,
    )
    max_batch_requests: int = Field(
        default=1024, description="Cap on the requests of one PlanBatch call (count).", ge=1
    )
    max_batch_requests_per_caller: int = Field(
        default=1024,
        description="Cap on the batch requests one caller may have pending at once (count).",
        ge=1,
    )

    # --- memory ---------------------------------------------------------------------------
    answer_cache_bytes: int = Field(
        default=64 * 2**20,
        description="Scheduler answers kept for repeated requests, as their wire bytes (bytes).",
        ge=1,
    )
    curve_cache_bytes: int = Field(
        default=96 * 2**20,
        description="Scaling curves kept for SmallestAllocation and TrainingFront to walk again "
        "(bytes; ~4.8 KB a cell in memory).",
        ge=1,
    )
    solver_cache_bytes: int = Field(
        default=512 * 2**20,
        description="What each solver process (and the server process, for what its own "
        "threads compute) keeps across requests to answer similar ones faster: its layout rows "
        "with their start tables, its spaces' tables, its search spaces and grids, together "
        "(bytes; a quarter, a quarter, 3/8 and 1/8 of it).",
        ge=2**20,
    )

    # --- message bounds ---------------------------------------------------------------------
    max_request_bytes: int = Field(
        default=1024 * 1024,
        description="Largest PlanBatch request, beyond it RESOURCE_EXHAUSTED; any other request "
        "is refused past 64 KiB (bytes).",
        ge=1024,
    )
    max_message_bytes: int = Field(
        default=16 * 1024 * 1024,
        description="Largest response message (bytes).",
        ge=1024,
    )
    max_string_chars: int = Field(
        default=256,
        description="Longest string field of a request (characters); echoed truncated.",
        ge=16,
        le=65536,
    )
    max_open_streams: int = Field(
        default=64,
        description="Open reflection streams, and open health Watch streams, each (count; "
        "one peer address holds at most a quarter of them).",
        ge=1,
        le=100_000,
    )
    stream_idle_timeout_s: float = Field(
        default=120.0,
        description="A reflection stream idle this long is closed (seconds).",
        gt=0,
    )

    # --- connections ------------------------------------------------------------------------
    max_streams_per_connection: int = Field(
        default=100,
        description="Concurrent calls on one HTTP/2 connection (count).",
        ge=1,
        le=10_000,
    )
    keepalive_time_s: float = Field(
        default=60.0,
        description="Ping an idle connection this often to detect dead peers (seconds).",
        gt=0,
    )
    keepalive_timeout_s: float = Field(
        default=20.0, description="Close a connection whose ping is not answered (seconds).", gt=0
    )
    min_client_ping_interval_s: float = Field(
        default=10.0,
        description="Shortest interval between a client's keepalive pings (seconds).",
        gt=0,
    )
    max_connections: int = Field(
        default=4096,
        description="Open connections the gRPC port accepts, and as many again the health "
        "port; more are refused at once, before a file descriptor runs out (count).",
        ge=1,
        le=1_000_000,
    )
    handshake_timeout_s: float = Field(
        default=10.0,
        description="Close a new connection that has not finished its TLS and HTTP/2 "
        "handshake by then (seconds): silent connections do not pile up.",
        gt=0,
    )
    max_connection_idle_s: float = Field(
        default=120.0,
        description="Close a connection with no call for this long (seconds; 0: never).",
        ge=0,
    )
    max_connection_age_s: float = Field(
        default=1800.0,
        description="Ask clients to reconnect after this long, spreading load on new "
        "replicas (seconds; 0: never).",
        ge=0,
    )
    max_connection_age_grace_s: float | None = Field(
        default=None,
        description="Time calls in flight get after max_connection_age (seconds; default: "
        "max_deadline_s, so no call is cut short).",
        ge=0,
    )

    # --- security ---------------------------------------------------------------------------
    tls_cert: str | None = Field(
        default=None, description="Server certificate chain, PEM (path; with tls_key: TLS)."
    )
    tls_key: str | None = Field(default=None, description="Server private key, PEM (path).")
    tls_client_ca: str | None = Field(
        default=None,
        description="CA bundle that client certificates must chain to, PEM (path; mTLS).",
    )
    auth_token_file: str | None = Field(
        default=None,
        description="Bearer tokens, one per line (path); set: every meshplan.v1 call needs one.",
    )
    reflection: bool = Field(default=True, description="Serve gRPC server reflection.")
    http_port: int | None = Field(
        default=None,
        description="Also answer JSON over HTTP (the same calls, limits, TLS and tokens) and "
        "serve the planner page at / on this port (unset: off; 0: any free port).",
        ge=0,
        le=65535,
    )
    health_port: int | None = Field(
        default=None,
        description="Also serve grpc.health.v1 alone, in plaintext, on this port (unset: off; "
        "for probes that speak neither TLS nor tokens, e.g. Kubernetes').",
        ge=0,
        le=65535,
    )

    # --- observability and shutdown ---------------------------------------------------------
    metrics_port: int | None = Field(
        default=None,
        description="Serve Prometheus metrics over HTTP on this port (unset: off; 0: any).",
        ge=0,
        le=65535,
    )
    metrics_host: str | None = Field(
        default=None, description="Address of the metrics endpoint (default: host)."
    )
    grace_period_s: float = Field(
        default=30.0,
        description="On SIGTERM, time calls in flight get before they are cancelled (seconds).",
        ge=0,
    )
    log_level: str = Field(default="INFO", description="Python logging level (name).")
    log_format: Literal["text", "json"] = Field(
        default="text", description="Log lines as text or as JSON objects (one per line)."
    )

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.solver_processes is None:
            self.solver_processes = self.max_concurrent_solves or usable_cpus()
        if self.max_concurrent_solves is None:
            self.max_concurrent_solves = self.solver_processes or max(1, usable_cpus() // 2)
        if self.solver_processes and self.max_concurrent_solves > self.solver_processes:
            raise ValueError(
                f"max_concurrent_solves ({self.max_concurrent_solves}) exceeds solver_processes "
                f"({self.solver_processes}): each solve runs in its own process"
            )
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together: give both or neither")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ValueError("tls_client_ca (mTLS) needs tls_cert and tls_key")
        return self

    @property
    def solves_per_caller(self) -> int:
        """max_solves_per_caller, with 0 read as half the solver slots (at least one)."""
        slots = self.max_concurrent_solves or 1
        if self.max_solves_per_caller:
            return min(self.max_solves_per_caller, slots)
        return max(1, math.ceil(slots / 2))

    @property
    def connection_age_grace_s(self) -> float:
        """max_connection_age_grace_s, defaulting to max_deadline_s."""
        if self.max_connection_age_grace_s is None:
            return self.max_deadline_s
        return self.max_connection_age_grace_s
