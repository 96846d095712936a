"""Prometheus metrics of one server (its own registry, so several servers can share a process).

Served over HTTP by `serve_metrics` when `--metrics-port` is set; names follow Prometheus'
conventions (https://prometheus.io/docs/practices/naming/): base units, `_total` counters.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

# Seconds: health checks and catalog calls (ms) up to long solves and batches (minutes).
_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)
_LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
LAG_EVERY_S = 0.1  # the event loop's lag is sampled this often


def watch_collections(metrics: Metrics) -> Callable[[], None]:
    """Observe every garbage collection's wall time in `metrics.gc_pause` (gc.callbacks);
    returns the function that stops it."""
    started: dict[str, float] = {}
    children = [metrics.gc_pause.labels(str(g)) for g in range(3)]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started["t"] = time.perf_counter()
        elif "t" in started:
            children[info["generation"]].observe(time.perf_counter() - started.pop("t"))

    gc.callbacks.append(callback)
    return lambda: gc.callbacks.remove(callback) if callback in gc.callbacks else None


async def watch_loop_lag(metrics: Metrics, every_s: float = LAG_EVERY_S) -> None:
    """Observe, until cancelled, how late a sleep of `every_s` on the running loop wakes."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + every_s
        await asyncio.sleep(every_s)
        metrics.loop_lag.observe(max(loop.time() - due, 0.0))


class Metrics:
    """The counters, histograms and gauges the servicer updates."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)  # process_cpu_seconds_total, RSS, open fds
        self.registry.register(TreeCollector())  # the server and its solver processes
        r = self.registry
        self.calls = Counter(
            "meshplan_calls",
            "Calls finished, by method, gRPC status code and transport (grpc, http).",
            ["method", "code", "transport"],
            registry=r,
        )
        self.call_seconds = Histogram(
            "meshplan_call_duration_seconds",
            "Wall time of a call, from arrival to answer, by method and transport.",
            ["method", "transport"],
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
            "Calls refused with RESOURCE_EXHAUSTED (overload or a per-caller limit), by method "
            "and transport.",
            ["method", "transport"],
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
        self.loop_lag = Histogram(
            "meshplan_event_loop_lag_seconds",
            f"How late the event loop ran a callback due every {LAG_EVERY_S:g} s (seconds): what "
            "a health check or an answer waits behind the loop's other work, the GIL or the CPU.",
            buckets=_LAG_BUCKETS,
            registry=r,
        )
        self.gc_pause = Histogram(
            "meshplan_gc_pause_seconds",
            "Wall time of one garbage collection in the server process, by generation "
            "(seconds): it holds the GIL, so the event loop waits it out.",
            ["generation"],
            buckets=_LAG_BUCKETS,
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


class TreeCollector(Collector):
    """The server process and every process under it (the solver workers): their resident
    memory, CPU time and count, read with psutil at each scrape. What a container's memory
    limit counts is the tree, not the server process alone (process_resident_memory_bytes)."""

    def __init__(self, pid: int | None = None) -> None:
        self.root = psutil.Process(pid or os.getpid())

    def _tree(self) -> list[psutil.Process]:
        try:
            return [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return [self.root]

    def collect(self) -> Iterator[Any]:
        rss = cpu = 0.0
        count = 0
        for proc in self._tree():
            try:
                with proc.oneshot():
                    rss += proc.memory_info().rss
                    times = proc.cpu_times()
                    cpu += times.user + times.system
                count += 1
            except psutil.Error:  # ended between the listing and the read
                continue
        yield GaugeMetricFamily(
            "meshplan_tree_resident_memory_bytes",
            "Resident memory of the server process and its solver processes, summed (bytes).",
            value=rss,
        )
        yield CounterMetricFamily(
            "meshplan_tree_cpu_seconds",
            "CPU time (user + system) of the server process and its living solver processes "
            "(seconds; a replaced process's time leaves the sum).",
            value=cpu,
        )
        yield GaugeMetricFamily(
            "meshplan_tree_processes",
            "The server process and its solver processes (count).",
            value=count,
        )
