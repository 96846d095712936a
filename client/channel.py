"""Targets, channel options and the service config shared by the sync and asyncio clients."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Sequence
from typing import Any

import grpc
from grpc.experimental import ChannelOptions

from meshplan.client.security import Security

SERVICE = "meshplan.v1.Planner"
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024


def service_config(max_attempts: int = 4) -> str:
    """Round-robin over every resolved address; retry UNAVAILABLE (idempotent calls).

    `max_attempts` counts the first try; below 2 there is no retry policy (gRPC's minimum).
    """
    method: dict[str, object] = {"name": [{"service": SERVICE}]}
    if max_attempts >= 2:
        method["retryPolicy"] = {
            "maxAttempts": max_attempts,
            "initialBackoff": "0.05s",
            "maxBackoff": "1s",
            "backoffMultiplier": 2,
            "retryableStatusCodes": ["UNAVAILABLE"],
        }
    config = {"loadBalancingConfig": [{"round_robin": {}}], "methodConfig": [method]}
    return json.dumps(config)


def channel_options(
    max_attempts: int = 4, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
) -> list[tuple[str, object]]:
    """Options for grpc.insecure_channel / grpc.aio.insecure_channel."""
    return [
        ("grpc.service_config", service_config(max_attempts)),
        ("grpc.service_config_disable_resolution", 1),  # ours, not one from DNS TXT records
        ("grpc.enable_retries", 1),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
    ]


def make_target(target: str | Sequence[str]) -> str:
    """One gRPC target from a target or a list of host:port addresses.

    A single string passes through (e.g. "localhost:50051", or "dns:///planner.ns.svc:50051"
    for a Kubernetes headless Service: DNS returns every replica, round-robin spreads calls).
    A list of IP:port addresses (or one comma-separated string of them) becomes one "ipv4:" /
    "ipv6:" target, balanced the same way.
    """
    if isinstance(target, str):
        if "," not in target or ":/" in target or target.startswith(("ipv4:", "ipv6:")):
            return target
        target = [t.strip() for t in target.split(",") if t.strip()]
    addresses = list(dict.fromkeys(t.strip() for t in target))  # a repeated address once
    if len(addresses) == 1:
        return addresses[0]
    if not addresses:
        raise ValueError("no target given")
    families = {_family(a) for a in addresses}
    if len(families) != 1 or None in families:
        raise ValueError(
            "a list of targets must be IP:port addresses of one family; for host names use one "
            f"DNS name that resolves to every replica (dns:///name:port), got {addresses}"
        )
    return f"{families.pop()}:{','.join(addresses)}"


def _family(address: str) -> str | None:
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        return None
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    return "ipv4" if ip.version == 4 else "ipv6"


def open_channel(
    target: str, security: Security, max_attempts: int = 4, *, aio: bool = False
) -> Any:
    """A sync (or asyncio) channel to `target`, TLS if `security` says so; ValueError if a token
    would go in plaintext to another machine."""
    security.check(target)
    options = channel_options(max_attempts) + security.options()
    if not aio:  # a PlanBatch stream read on the caller's thread, no hand-off per answer
        options.append((ChannelOptions.SingleThreadedUnaryStream, 1))
    creds = security.credentials()
    grpc_ = grpc.aio if aio else grpc
    if creds is None:
        return grpc_.insecure_channel(target, options=options)
    return grpc_.secure_channel(target, creds, options=options)
