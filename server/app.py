"""Build and run the gRPC server: Planner, standard health, reflection, limits, SIGTERM drain."""

from __future__ import annotations

import logging
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from meshplan.server.servicer import EvaluateFn, PlanFn, PlannerServicer
from meshplan.server.settings import Settings
from meshplan.v1 import planner_pb2, planner_pb2_grpc

log = logging.getLogger("meshplan.server")

SERVICE_NAME = planner_pb2.DESCRIPTOR.services_by_name["Planner"].full_name
_SPARE_THREADS = 8  # health, reflection and catalog calls always find a thread


def create_server(
    settings: Settings,
    *,
    health_servicer: health.HealthServicer | None = None,
    plan_fn: PlanFn | None = None,
    evaluate_fn: EvaluateFn | None = None,
) -> tuple[grpc.Server, int]:
    """A configured, not yet started server and the port it bound (settings.port 0: any free).

    Planner calls beyond solver slots + queue are refused (RESOURCE_EXHAUSTED) before they take
    a thread for long, so the spare threads keep health and reflection answering at once.
    Pass `health_servicer` to flip it to NOT_SERVING when draining; `plan_fn` / `evaluate_fn`
    replace the solver (tests).
    """
    tickets = settings.max_concurrent_solves + settings.max_queued_solves
    threads = tickets + _SPARE_THREADS
    server = grpc.server(
        ThreadPoolExecutor(max_workers=threads, thread_name_prefix="meshplan-rpc"),
        options=[
            ("grpc.max_receive_message_length", settings.max_message_bytes),
            ("grpc.max_send_message_length", settings.max_message_bytes),
            ("grpc.so_reuseport", 0),
        ],
        maximum_concurrent_rpcs=2 * threads,  # beyond: RESOURCE_EXHAUSTED from gRPC itself
    )
    servicer = PlannerServicer(settings, plan_fn=plan_fn, evaluate_fn=evaluate_fn)
    planner_pb2_grpc.add_PlannerServicer_to_server(servicer, server)
    health_servicer = health_servicer or health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    address = f"{settings.host}:{settings.port}"
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as err:
        raise OSError(f"cannot listen on {address}: {err}") from err
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    return server, port


def serve(settings: Settings, ready: threading.Event | None = None) -> int:
    """Serve until SIGTERM or SIGINT, then drain: NOT_SERVING, no new calls, grace, exit 0."""
    health_servicer = health.HealthServicer()
    server, port = create_server(settings, health_servicer=health_servicer)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in _SIGNALS}
    try:
        server.start()
        log.info(
            "serving %s on %s:%d (solves=%d, queue=%d, workers/solve=%d)",
            SERVICE_NAME,
            settings.host,
            port,
            settings.max_concurrent_solves,
            settings.max_queued_solves,
            settings.workers_per_solve,
        )
        if ready is not None:
            ready.set()
        while not stop.wait(0.5):
            pass
        log.info("draining: finishing calls in flight for up to %.1f s", settings.grace_period_s)
        stopped = server.stop(settings.grace_period_s)  # refuses new calls from here on
        health_servicer.enter_graceful_shutdown()  # NOT_SERVING to open Watch streams
        stopped.wait()
        log.info("stopped")
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


_SIGNALS = (signal.SIGTERM, signal.SIGINT)
