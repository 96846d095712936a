"""Prometheus metrics of one server (its own registry, so several servers can share a process).

Served over HTTP by `serve_metrics` when `--metrics-port` is set; names follow Prometheus'
conventions (https://prometheus.io/docs/practices/naming/): base units, `_total` counters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    start_http_server,
)

# Seconds: health checks and catalog calls (ms) up to long solves and batches (minutes).
_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)


class Metrics:
    """The counters, histograms and gauges the servicer updates."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)  # process_cpu_seconds_total, RSS, open fds
        r = self.registry
        self.calls = Counter(
            "meshplan_calls",
            "Calls finished, by method and gRPC status code.",
            ["method", "code"],
            registry=r,
        )
        self.call_seconds = Histogram(
            "meshplan_call_duration_seconds",
            "Wall time of a call, from arrival to answer, by method.",
            ["method"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.solve_seconds = Histogram(
            "meshplan_solve_duration_seconds",
            "Wall time of one solve (a plan, an evaluation, a batch request or a scheduler "
            "query's cell) on a solver slot.",
            ["method"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.plans = Counter(
            "meshplan_plans",
            "Plans answered, by plan status (OPTIMAL, FEASIBLE, INFEASIBLE).",
            ["status"],
            registry=r,
        )
        self.rejected = Counter(
            "meshplan_rejected_calls",
            "Calls refused with RESOURCE_EXHAUSTED (overload or a per-caller limit), by method.",
            ["method"],
            registry=r,
        )
        self.solves_in_flight = Gauge(
            "meshplan_solves_in_flight", "Solves running on a solver slot.", registry=r
        )
        self.solves_queued = Gauge(
            "meshplan_solves_queued", "Solves waiting for a solver slot.", registry=r
        )
        self.calls_in_progress = Gauge(
            "meshplan_calls_in_progress", "Planner calls admitted and not yet answered.", registry=r
        )
        self.calls_waiting = Gauge(
            "meshplan_calls_waiting",
            "Planner calls waiting their turn for admission.",
            registry=r,
        )
        self._children: dict[tuple[object, ...], Any] = {}

    def child(self, metric: Any, *labels: str) -> Any:
        """metric.labels(*labels), kept: a labelled child found again in a dict lookup (the
        client library's labels() takes a lock and checks its arguments on every call)."""
        key = (id(metric), *labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found


def serve_metrics(metrics: Metrics, host: str, port: int) -> tuple[int, Callable[[], None]]:
    """Serve `metrics` on http://host:port/metrics; returns the bound port and a closer."""
    addr = host.strip("[]") or "::"
    server, thread = start_http_server(port, addr=addr, registry=metrics.registry)

    def close() -> None:
        server.shutdown()
        server.server_close()
        thread.join(5)

    return server.server_port, close
