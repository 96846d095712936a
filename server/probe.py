"""`python -m meshplan.server.probe`: exit 0 if the local server's health is SERVING, else 1.

The container's HEALTHCHECK. It asks 127.0.0.1 on MESHPLAN_HEALTH_PORT (the plaintext health
listener) if set, else on MESHPLAN_PORT; `--tls-ca` for a probe of a TLS port.
"""

from __future__ import annotations

import argparse
import os
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m meshplan.server.probe", description=__doc__
    )
    default_port = (
        os.environ.get("MESHPLAN_HEALTH_PORT") or os.environ.get("MESHPLAN_PORT") or "50051"
    )
    parser.add_argument("--address", default=f"127.0.0.1:{default_port}", help="HOST:PORT to ask")
    parser.add_argument("--service", default="", help="service name ('' = the server)")
    parser.add_argument("--timeout", type=float, default=2.0, help="deadline (seconds)")
    parser.add_argument("--tls-ca", help="CA bundle (PEM): the port speaks TLS")
    args = parser.parse_args(argv)
    if args.tls_ca:
        with open(args.tls_ca, "rb") as f:
            channel = grpc.secure_channel(args.address, grpc.ssl_channel_credentials(f.read()))
    else:
        channel = grpc.insecure_channel(args.address)
    with channel:
        try:
            answer = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout
            )
        except grpc.RpcError as err:
            print(f"probe: {args.address}: {err.code().name}: {err.details()}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
    print(f"probe: {args.address}: {status}", file=sys.stderr)
    return 0 if answer.status == health_pb2.HealthCheckResponse.SERVING else 1


if __name__ == "__main__":
    sys.exit(main())
