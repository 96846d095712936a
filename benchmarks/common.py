"""Helpers the benchmarks share: percentiles, timing, tables, the machine, a loopback server and
the exhaustive oracle run in a worker process under a time cap."""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, TypeVar

T = TypeVar("T")

LOOPBACK = "127.0.0.1"


# --- statistics ------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0 <= q <= 100), linear between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be within 0..100, got {q}")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass(frozen=True)
class Summary:
    """p50 / p99 / max (and count, mean) of a set of timings in seconds."""

    n: int
    p50: float
    p99: float
    max: float
    mean: float

    @staticmethod
    def of(values: Sequence[float]) -> Summary:
        return Summary(
            n=len(values),
            p50=percentile(values, 50),
            p99=percentile(values, 99),
            max=max(values),
            mean=sum(values) / len(values),
        )

    def line(self, unit: Callable[[float], str] | None = None) -> str:
        f = unit or fmt_s
        return f"p50 {f(self.p50)}  p99 {f(self.p99)}  max {f(self.max)}  (n={self.n})"


def timed(fn: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[T, float]:
    """fn(*args, **kwargs) and its wall time in seconds (time.perf_counter)."""
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


# --- formatting ------------------------------------------------------------------------------


def fmt_s(seconds: float | None) -> str:
    """A duration with a unit that keeps three significant figures: 0.412 ms, 41.2 ms, 4.12 s."""
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s" if seconds < 100 else f"{seconds:.0f} s"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table: left-aligned text, right-aligned numbers, a rule under the header."""
    cells = [[str(c) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in cells:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
    numeric = [
        all(_looks_numeric(r[i]) for r in cells) if cells else False for i in range(len(headers))
    ]

    def fmt(row: Sequence[str]) -> str:
        parts = [
            c.rjust(widths[i]) if numeric[i] else c.ljust(widths[i]) for i, c in enumerate(row)
        ]
        return "  ".join(parts).rstrip()

    lines = [fmt(list(headers)), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in cells]
    return "\n".join(lines)


def _looks_numeric(s: str) -> bool:
    s = s.lstrip(">≥<~").replace(",", "").split(" ")[0]
    if s in ("-", ""):
        return True
    try:
        float(s.rstrip("x%"))
    except ValueError:
        return False
    return True


# --- the machine -----------------------------------------------------------------------------


def machine() -> dict[str, str]:
    """CPU count, CPU model, RAM, Python and OR-Tools versions: what a result depends on."""
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    ram = "unknown"
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    ram = f"{int(line.split()[1]) / 2**20:.1f} GiB"
                    break
    except OSError:
        pass
    try:
        from importlib.metadata import version

        ortools = version("ortools")
    except Exception:  # noqa: BLE001  (reporting only)
        ortools = "unknown"
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = "/".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return {
        "cpus": str(usable),
        "load": load,
        "cpu_model": cpu,
        "ram": ram,
        "python": platform.python_version(),
        "ortools": ortools,
    }


def verdict(value: float, target: float, unit: Callable[[float], str] | None = None) -> str:
    """'met' or how far a figure misses its upper-bound target."""
    f = unit or fmt_s
    if value <= target:
        return f"met ({f(value)} <= {f(target)})"
    ratio = value / target
    return f"MISSED: {f(value)} is {ratio:.1f}x the target {f(target)} ({f(value - target)} over)"


def source_state() -> str:
    """The commit and whether solver/ has uncommitted changes (figures depend on both)."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "solver"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if not head:
        return "unknown"
    return f"{head}" + (" + uncommitted changes in solver/" if dirty else "")


def source_fingerprint() -> str:
    """A hash of the solver's sources (solver/**/*.py and *.json): what the figures measure.

    Compared at the start and the end of a run (and in the oracle's worker) to tell when
    solver/ changed under a running benchmark, so that a run mixing two versions says so.
    """
    import hashlib
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "solver"
    h = hashlib.sha256()
    for f in sorted([*root.rglob("*.py"), *root.rglob("*.json")]):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


class SourceWatch:
    """The solver's fingerprint when a run starts, and whether it has changed since."""

    def __init__(self) -> None:
        self.start = source_fingerprint()
        self.seen: set[str] = {self.start}

    def note(self, fingerprint: str) -> None:
        self.seen.add(fingerprint)

    def changed(self) -> bool:
        self.seen.add(source_fingerprint())
        return len(self.seen) > 1

    def warning(self) -> str:
        """'' or a line saying the run mixed versions of solver/."""
        if not self.changed():
            return ""
        return (
            f"WARNING: solver/ changed during this run (fingerprints {', '.join(sorted(self.seen))}"
            f"; started at {self.start}): the figures mix versions; re-run on a quiet tree"
        )


def header(title: str, **params: object) -> str:
    """The first lines every benchmark prints: what ran, when, on what."""
    m = machine()
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    shown = "  ".join(f"{k}={v}" for k, v in params.items())
    return (
        f"== {title} ==  {when}\n"
        f"machine: {m['cpus']} CPUs ({m['cpu_model']}), {m['ram']} RAM, "
        f"Python {m['python']}, OR-Tools {m['ortools']}, load average {m['load']}\n"
        f"source: {source_state()}, solver fingerprint {source_fingerprint()}\n"
        f"{shown}"
    )


def arg_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The options every benchmark takes."""
    p = argparse.ArgumentParser(
        allow_abbrev=False, prog=f"python -m benchmarks {prog}", description=description
    )
    p.add_argument("--quick", action="store_true", help="a small subset (the smoke test's mode)")
    p.add_argument(
        "--time-limit",
        type=float,
        default=None,
        metavar="S",
        help="options.time_limit_s of every plan (seconds); a plan that reaches it is FEASIBLE",
    )
    p.add_argument("--json", metavar="PATH", help="also write the raw measurements as JSON")
    return p


# --- a loopback gRPC server ------------------------------------------------------------------


class TimedPlan:
    """A server `plan_fn`: solver.plan, with the wall time of the last call kept in `last_s`.

    The latency benchmark calls one plan at a time, so the round trip less `last_s` is what gRPC
    (transport, proto and pydantic conversion on both sides, the servicer) adds.
    """

    def __init__(self) -> None:
        self.last_s = 0.0

    def __call__(self, req: Any, stop_event: Any = None) -> Any:
        from meshplan import solver

        t0 = time.perf_counter()
        try:
            return solver.plan(req, stop_event=stop_event)
        finally:
            self.last_s = time.perf_counter() - t0


@contextmanager
def loopback_server(
    max_concurrent_solves: int = 1,
    max_time_limit_s: float = 3600.0,
    plan_fn: Callable[..., Any] | None = None,
) -> Iterator[str]:
    """A started in-process meshplan server on 127.0.0.1 (a free port); yields its target.

    `plan_fn` replaces solver.plan (e.g. a TimedPlan); by default the server's own.
    """
    from meshplan.server.app import create_server
    from meshplan.server.settings import Settings

    settings = Settings(
        host=LOOPBACK,
        port=0,
        grace_period_s=0.0,
        max_concurrent_solves=max_concurrent_solves,
        max_time_limit_s=max_time_limit_s,
        workers_per_solve=1,
    )
    server, port = create_server(settings, plan_fn=plan_fn)
    server.start()
    try:
        yield f"{LOOPBACK}:{port}"
    finally:
        server.stop(0).wait(10)


# --- the exhaustive oracle, in a worker process, under a time cap ----------------------------


@dataclass(frozen=True)
class OracleTiming:
    """One oracle run: its time, or the cap it hit (then `seconds` is the cap, a lower bound)."""

    seconds: float
    capped: bool
    objective: int | None = None  # least integer objective; None when nothing fits or capped
    evaluated: int = 0  # legal points scored


def _oracle_worker(conn: Connection) -> None:
    from meshplan.solver.oracle import oracle
    from meshplan.solver.schema import PlanRequest

    conn.send(("ready", source_fingerprint()))
    while True:
        msg = conn.recv()
        if msg is None:
            return
        req = PlanRequest.model_validate_json(msg)
        t0 = time.perf_counter()
        res = oracle(req)
        conn.send((time.perf_counter() - t0, res.objective, res.evaluated))


class OracleRunner:
    """Runs solver.oracle in a separate process so a slow instance can be cut off at `cap_s`.

    The worker is started (and its imports paid) before any timing; the reported time is measured
    inside the worker around `oracle(req)` alone. A capped run kills the worker; the next run
    starts a fresh one. Use as a context manager.
    """

    def __init__(self) -> None:
        self._ctx = mp.get_context("spawn")  # no fork: the parent may run gRPC and CP-SAT threads
        self._proc: Any = None
        self._conn: Connection | None = None
        self.fingerprints: set[str] = set()  # of the solver sources each worker loaded

    def _start(self) -> Connection:
        if self._conn is None:
            parent, child = self._ctx.Pipe()
            self._proc = self._ctx.Process(target=_oracle_worker, args=(child,), daemon=True)
            self._proc.start()
            child.close()
            if not parent.poll(120):
                raise RuntimeError("the oracle worker did not start")
            _, fingerprint = parent.recv()
            self.fingerprints.add(fingerprint)
            self._conn = parent
        return self._conn

    def run(self, request_json: str, cap_s: float) -> OracleTiming:
        """The oracle's time on one request (JSON of a PlanRequest), or `cap_s` if it hits it."""
        conn = self._start()
        conn.send(request_json)
        if conn.poll(cap_s):
            seconds, objective, evaluated = conn.recv()
            return OracleTiming(seconds, False, objective, evaluated)
        self._kill()
        return OracleTiming(cap_s, True)

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(10)
        if self._conn is not None:
            self._conn.close()
        self._proc, self._conn = None, None

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.send(None)
                self._proc.join(5)
            except (BrokenPipeError, OSError):
                pass
        self._kill()

    def __enter__(self) -> OracleRunner:
        return self  # the worker starts with the first run

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_json(path: str | None, payload: dict[str, Any]) -> None:
    """Write `payload` (plus the machine) to `path` when one was given."""
    if not path:
        return
    import json

    with open(path, "w") as f:
        json.dump({"machine": machine(), **payload}, f, indent=2, default=str)
        f.write("\n")
