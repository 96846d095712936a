"""Build and run the gRPC server: an asyncio server on its own event-loop thread.

Health, reflection and the catalog are answered on the event loop and never wait for a solver;
solves run on the runner's threads (server.dispatch). `PlannerServer` is driven from ordinary
threads: `start()`, `drain(grace)` (NOT_SERVING, refuse new calls, let calls in flight finish),
`stop(grace)`, `reload()` (certificates and tokens, on SIGHUP).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from grpc_health.v1 import health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

from meshplan.server.auth import AuthInterceptor, TokenSet
from meshplan.server.dispatch import SolveRunner, ThreadRunner
from meshplan.server.handlers import served, service_handler
from meshplan.server.health import BoundedReflection, Health
from meshplan.server.memory import (
    collect_when_idle,
    defer_full_passes,
    freeze_startup_heap,
    keep_freed_heap,
    trim_periodically,
)
from meshplan.server.metrics import (
    Metrics,
    serve_metrics,
    watch_collections,
    watch_loop_lag,
)
from meshplan.server.pool import ProcessRunner
from meshplan.server.runtime import Runtime
from meshplan.server.scheduler import SchedulerServicer
from meshplan.server.servicer import PlannerServicer
from meshplan.server.settings import Settings
from meshplan.server.threadnames import name_this_thread
from meshplan.server.tls import CertificateFiles
from meshplan.server.work import EvaluateFn, PlanFn
from meshplan.v1 import planner_pb2

log = logging.getLogger("meshplan.server")
T = TypeVar("T")

_TRIM_S = 5.0  # seconds between two returns of freed heap memory to the system
SWITCH_INTERVAL_S = 0.0005
PLANNER = planner_pb2.DESCRIPTOR.services_by_name["Planner"]
SERVICE_NAME = PLANNER.full_name

# The meshplan servicers this server runs: (service descriptor, factory(runtime, hooks) ->
# servicer); each serves the methods of its service that it defines, and every method of every
# service listed must be served by one of them. Another servicer registers here with one line;
# every one of them gets tokens, limits, fair solver slots, health, reflection and metrics from
# the shared Runtime.
ServiceFactory = Callable[[Runtime, dict[str, Any]], Any]
SERVICES: list[tuple[ServiceDescriptor, ServiceFactory]] = [
    (
        PLANNER,  # Plan, Evaluate, PlanBatch, ListCatalog
        lambda rt, hooks: PlannerServicer(rt, hooks.get("plan_fn"), hooks.get("evaluate_fn")),
    ),
    (PLANNER, lambda rt, hooks: SchedulerServicer(rt)),  # the scheduler queries
]


def server_options(s: Settings) -> list[tuple[str, Any]]:
    """gRPC core options: message caps, streams per connection, keepalive, connection age."""

    def ms(seconds: float) -> int:
        return int(seconds * 1000)

    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", s.max_request_bytes),
        ("grpc.max_send_message_length", s.max_message_bytes),
        ("grpc.so_reuseport", 0),
        ("grpc.max_concurrent_streams", s.max_streams_per_connection),
        ("grpc.keepalive_time_ms", ms(s.keepalive_time_s)),
        ("grpc.keepalive_timeout_ms", ms(s.keepalive_timeout_s)),
        ("grpc.keepalive_permit_without_calls", 1),
        # server side: the shortest interval it accepts between a client's pings
        ("grpc.http2.min_ping_interval_without_data_ms", ms(s.min_client_ping_interval_s)),
        ("grpc.http2.max_ping_strikes", 2),
        ("grpc.max_allowed_incoming_connections", s.max_connections),
        ("grpc.server_handshake_timeout_ms", ms(s.handshake_timeout_s)),
    ]
    if s.max_connection_idle_s:
        options.append(("grpc.max_connection_idle_ms", ms(s.max_connection_idle_s)))
    if s.max_connection_age_s:
        options.append(("grpc.max_connection_age_ms", ms(s.max_connection_age_s)))
        options.append(("grpc.max_connection_age_grace_ms", ms(s.connection_age_grace_s)))
    return options


def health_options(s: Settings) -> list[tuple[str, Any]]:
    """The plaintext health port's options: its own connection cap, short handshakes and idle
    connections closed, so neither silent connections nor the gRPC port's load lock probes out."""
    options: list[tuple[str, Any]] = [
        ("grpc.so_reuseport", 0),
        ("grpc.max_allowed_incoming_connections", s.max_connections),
        ("grpc.server_handshake_timeout_ms", int(s.handshake_timeout_s * 1000)),
        ("grpc.max_concurrent_streams", s.max_streams_per_connection),
    ]
    if s.max_connection_idle_s:
        options.append(("grpc.max_connection_idle_ms", int(s.max_connection_idle_s * 1000)))
    return options


class PlannerServer:
    """The service on its event-loop thread; every method may be called from any thread."""

    def __init__(self, settings: Settings, hooks: dict[str, Any] | None = None) -> None:
        self.settings = settings
        self.hooks = hooks or {}
        self.metrics = Metrics()
        self.tokens = TokenSet(settings.auth_token_file) if settings.auth_token_file else None
        self.certificates = (
            CertificateFiles(settings.tls_cert, settings.tls_key, settings.tls_client_ca)
            if settings.tls_cert and settings.tls_key
            else None
        )
        self.metrics_port: int | None = None
        self.health_server: grpc.aio.Server | None = None
        self.health_port: int | None = None
        self.http: Any = None  # server.http.site.HttpSite with settings.http_port
        self.http_port: int | None = None
        self._trim: Any = None  # the periodic malloc_trim task, once started
        self._collect: Any = None  # the owed full collection, run when idle, once started
        self._lag: Any = None  # the event loop's lag, sampled for the metrics, once started
        self._unwatch_gc: Callable[[], None] | None = None  # collections timed, once started
        self._close_metrics: Callable[[], None] | None = None
        self._stopped = threading.Event()
        self._stopping = False
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="meshplan-loop", daemon=True)
        self._thread.start()
        try:
            self.port = self._call(self._build())
        except BaseException:
            runtime = getattr(self, "runtime", None)
            if runtime is not None:
                runtime.runner.close()
            self._stop_loop()
            raise

    # --- from any thread --------------------------------------------------------------------

    def start(self) -> None:
        """Start serving (and the health port and the metrics endpoint, if configured)."""
        self._call(self.server.start())
        self._trim = asyncio.run_coroutine_threadsafe(trim_periodically(_TRIM_S), self.loop)
        admission = self.runtime.admission
        self._collect = asyncio.run_coroutine_threadsafe(
            collect_when_idle(lambda: admission.in_progress == 0), self.loop
        )
        self._lag = asyncio.run_coroutine_threadsafe(watch_loop_lag(self.metrics), self.loop)
        self._unwatch_gc = watch_collections(self.metrics)
        if self.health_server is not None:
            self._call(self.health_server.start())
        if self.http is not None:
            self._call(self.http.start())
        s = self.settings
        if s.metrics_port is not None:
            host = s.metrics_host or s.host
            self.metrics_port, self._close_metrics = serve_metrics(
                self.metrics, host, s.metrics_port
            )

    def wait_ready(self, timeout: float = 300.0) -> int:
        """Wait for the solver's worker processes to start and warm up; how many are ready
        (0 when solves run on threads)."""
        wait = getattr(self.runtime.runner, "wait_ready", None)
        return wait(timeout) if wait is not None else 0

    def drain(self, grace_s: float) -> bool:
        """NOT_SERVING; refuse new calls (UNAVAILABLE) while health still answers; wait up to
        `grace_s` for the calls in flight; then stop. True if every call finished in time."""
        finished = self._call(self._drain(grace_s), timeout=grace_s + 30)
        self.stop(0).wait(30)
        return finished

    def stop(self, grace: float | None) -> threading.Event:
        """Stop the server (calls still running get `grace` seconds); the event is set once
        it has stopped and its threads are released."""
        if self._stopping:
            return self._stopped
        self._stopping = True
        if self.loop.is_running():
            future = asyncio.run_coroutine_threadsafe(self._shutdown(grace), self.loop)
            future.add_done_callback(lambda _: self._stop_loop())
        else:
            self._stopped.set()
        return self._stopped

    def reload(self) -> None:
        """Read the certificates (at the next handshake, on both ports) and the token file
        again."""
        if self.certificates is not None:
            self.certificates.reload()
        if self.tokens is not None:
            self.tokens.reload()

    # --- on the event loop ------------------------------------------------------------------

    async def _build(self) -> int:
        s = self.settings
        self.runtime = Runtime(s, self.metrics, self._runner())
        interceptors = [AuthInterceptor(self.tokens, self.runtime.refused)] if self.tokens else []
        self.server = grpc.aio.server(interceptors=interceptors, options=server_options(s))
        names = list(dict.fromkeys(descriptor.full_name for descriptor, _ in SERVICES))
        unserved = {(d.full_name, m.name) for d, _ in SERVICES for m in d.methods}
        servicers = []
        for descriptor, factory in SERVICES:
            servicer = factory(self.runtime, self.hooks)
            servicers.append(servicer)
            handler = service_handler(descriptor, servicer, s.max_request_bytes)
            self.server.add_generic_rpc_handlers((handler,))
            unserved -= {(descriptor.full_name, m) for m in served(descriptor, servicer)}
        if unserved:  # a method no servicer defines would answer UNIMPLEMENTED: refuse to start
            raise RuntimeError(f"no servicer for {sorted(f'{d}/{m}' for d, m in unserved)}")
        self.health = Health(names, s.max_open_streams)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        if s.reflection:
            listed = [*names, "grpc.health.v1.Health", reflection.SERVICE_NAME]
            reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
                BoundedReflection(listed, s.max_open_streams, s.stream_idle_timeout_s), self.server
            )
        address = f"{s.host}:{s.port}"
        try:
            if self.certificates is not None:
                port = self.server.add_secure_port(address, self.certificates.credentials())
            else:
                port = self.server.add_insecure_port(address)
        except RuntimeError as err:
            raise OSError(f"cannot listen on {address}: {err}") from err
        if port == 0:
            raise OSError(f"cannot listen on {address}")
        if s.health_port is not None:  # health alone, plaintext: for probes without TLS
            self.health_server = grpc.aio.server(options=health_options(s))
            health_pb2_grpc.add_HealthServicer_to_server(self.health, self.health_server)
            where = f"{s.host}:{s.health_port}"
            self.health_port = self.health_server.add_insecure_port(where)
            if self.health_port == 0:
                raise OSError(f"cannot listen on {where}")
        if s.http_port is not None:  # the same servicers, as JSON over HTTP, and the page
            from meshplan.server.http.site import HttpSite

            self.http = HttpSite(s, self.runtime, servicers, self.tokens, self.certificates)
            self.http_port = self.http.bind()
        return port

    def _runner(self) -> SolveRunner:
        """Worker processes (settings.solver_processes), or threads when there are none or the
        solver is replaced by hooks (tests, benchmarks: in-process functions)."""
        s = self.settings
        hooked = any(self.hooks.get(k) is not None for k in ("plan_fn", "evaluate_fn"))
        if not hooked:  # this process's own solver caches (solves on threads, queries' checks)
            from meshplan.solver import cache

            cache.configure(s.solver_cache_bytes)
        if s.solver_processes and not hooked:
            return ProcessRunner(s.solver_processes, cache_bytes=s.solver_cache_bytes)
        return ThreadRunner(s.max_concurrent_solves or 1)

    async def _drain(self, grace_s: float) -> bool:
        self.health.drain()
        return await self.runtime.drain(grace_s)

    async def _shutdown(self, grace: float | None) -> None:
        for task in (self._trim, self._collect):
            if task is not None:
                task.cancel()
        if self._lag is not None:
            self._lag.cancel()
        if self._unwatch_gc is not None:
            self._unwatch_gc()
        self.health.drain()
        self.runtime.draining = True
        await self.server.stop(grace)
        if self.http is not None:
            await self.http.stop()
        if self.health_server is not None:
            await self.health_server.stop(0)
        self.runtime.runner.close()
        join = getattr(self.runtime.runner, "join", None)
        if join is not None:  # the worker processes end after their solves stop
            await asyncio.to_thread(join)

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        name_this_thread("meshplan-loop")  # for top -H, and the soak's run-queue figures
        self.loop.run_forever()

    def _stop_loop(self) -> None:
        if self._close_metrics is not None:
            self._close_metrics()
            self._close_metrics = None
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._stopped.set()


def create_server(
    settings: Settings, *, plan_fn: PlanFn | None = None, evaluate_fn: EvaluateFn | None = None
) -> tuple[PlannerServer, int]:
    """A configured, not yet started server and the port it bound (settings.port 0: any free).

    `plan_fn` / `evaluate_fn` replace the solver (tests, benchmarks); solves then run on threads
    of this process, whatever `settings.solver_processes` says (the hooks need not pickle).
    """
    server = PlannerServer(settings, {"plan_fn": plan_fn, "evaluate_fn": evaluate_fn})
    return server, server.port


def serve(settings: Settings, ready: threading.Event | None = None) -> int:
    """Serve until SIGTERM or SIGINT, then drain: NOT_SERVING, no new calls, grace, exit 0.
    SIGHUP reloads the TLS certificates and the tokens."""
    server, port = create_server(settings)
    # A thread converting a large request holds the GIL; the event loop asks for it back after
    # this long (CPython's default is 5 ms: health checks then waited tens of ms behind it).
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    frozen = freeze_startup_heap()  # shorter and fewer full GC passes: the loop stalls less
    defer_full_passes()  # settle_heap's full passes wait until no call is in progress
    keep_freed_heap()  # solves on this process's threads (--solver-processes 0) reuse the heap
    log.debug("%d start-up objects frozen out of the garbage collector's passes", frozen)
    stop = threading.Event()
    handlers: dict[int, Callable[..., Any]] = {sig: lambda *_: stop.set() for sig in _STOP}
    handlers[signal.SIGHUP] = lambda *_: server.reload()
    previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    try:
        started = time.monotonic()
        warmed = server.wait_ready()  # the workers warm up before health says SERVING
        server.start()
        log.info(
            "serving %s on %s:%d (processes=%d ready in %.1f s, solves=%d, queue=%d, "
            "workers/solve=%d, tls=%s, tokens=%s%s)",
            SERVICE_NAME,
            settings.host,
            port,
            warmed,
            time.monotonic() - started,
            settings.max_concurrent_solves,
            settings.max_queued_solves,
            settings.workers_per_solve,
            "mtls" if settings.tls_client_ca else ("on" if settings.tls_cert else "off"),
            "on" if settings.auth_token_file else "off",
            f", metrics on :{server.metrics_port}" if server.metrics_port is not None else "",
        )
        if server.http_port is not None:
            log.info("serving JSON over HTTP and the planner page on :%d", server.http_port)
        if server.health_port is not None:
            log.info("serving grpc.health.v1 alone, in plaintext, on :%d", server.health_port)
        if ready is not None:
            ready.set()
        while not stop.wait(0.5):
            pass
        log.info("draining: finishing calls in flight for up to %.1f s", settings.grace_period_s)
        finished = server.drain(settings.grace_period_s)
        log.info("stopped" if finished else "stopped: calls still running were cancelled")
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


_STOP = (signal.SIGTERM, signal.SIGINT)
