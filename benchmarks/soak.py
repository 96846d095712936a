"""Soak: the service under many clients, fuzzed calls and a hostile caller's requests, against
the service's targets, the whole process tree (the server and its solver processes) measured.

The server runs as its own process (`python -m meshplan.server`, default settings but a
plaintext health port, tokens, JSON logs). Phases:

1. load: `--clients` asyncio callers for `--seconds` (benchmarks/soak_load.py: a polite caller,
   tenants sharing three tokens with plans, batches and scheduler queries of up to ~0.9 MB with
   thousands of observations, callers with made-up tokens), backing off on RESOURCE_EXHAUSTED,
   while a process per port checks health every 50 ms. Targets: the tenants' and the polite
   caller's answers only OK / RESOURCE_EXHAUSTED / DEADLINE_EXCEEDED, the polite caller's plans
   >= 90% OK, health Check p99 <= 50 ms on both ports, the tree's peak RSS within the
   Deployment's memory limit.
2. fuzz: `--fuzz` raw calls (benchmarks/soak_fuzz.py) with deadlines of 0.05-1 s. Targets: no
   INTERNAL (status, batch item, or server log line), no call the server ended later than its
   deadline + 100 ms (the `call_s` of its log line), the tree's CPU over the next 10 s < 1%.
3. memory (benchmarks/soak_probe.py): the 78-byte Replan (precompute_nodes 1024 on 1,048,576
   GPUs) and `--curves` distinct 4,096-cell curves. Target: the tree's peak RSS within the
   Deployment's memory limit.
4. SIGTERM with a query of 12,000 observations in flight: exit 0 within the grace period.

    python -m benchmarks soak [--quick] [--clients N] [--seconds S] [--fuzz N] [--curves N]
        [--only load|fuzz|memory] [--cache-mib ANSWERS CURVES] [--server-python PATH]

`--only memory` runs the memory phase alone on a server with the answer and curve caches bounded
at `--cache-mib` MiB (default 8 and 48: full after ~9 and 2 curves), so 32 curves overflow both
in minutes, and the server's RSS over the second half shows what they leave unbounded (the default
bounds take ~256 curves, ~45 min on 2 shared cores). `--only load` runs the load phase alone
(the health and RSS targets: a minute, to compare two commits in alternating runs);
`--server-python` runs the server with another interpreter (another checkout's
.venv/bin/python: the server that checkout installs, measured by this benchmark).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.common import (
    LOOPBACK,
    arg_parser,
    fmt_s,
    header,
    table,
    verdict,
    write_json,
)
from benchmarks.soak_fuzz import FUZZ_THREADS, fuzz_phase
from benchmarks.soak_load import load_phase
from benchmarks.soak_probe import memory_phase, residual_cpu, sigterm_phase

ROOT = Path(__file__).resolve().parent.parent
HEALTH_P99_S, POLITE_OK, RESIDUAL_CPU = 0.050, 0.90, 0.01
FULL = {
    "clients": 64,
    "seconds": 60.0,
    "fuzz": 40_000,
    "curves": 256,
    "replan_s": 60.0,
    "idle_s": 10.0,
}
QUICK = {"clients": 8, "seconds": 3.0, "fuzz": 200, "curves": 1, "replan_s": 5.0, "idle_s": 2.0}
OBSERVATIONS = 12_000  # of the query in flight at SIGTERM
MEMORY_CURVES, MEMORY_CACHE_MIB = 32, [8, 48]  # `--only memory`: curves; the caches' bounds
GRACE_S = 30.0  # the server's default grace period (Settings.grace_period_s)
_SERVING = re.compile(r"on [^ ]+:(\d+) \(")
_HEALTH = re.compile(r"in plaintext, on :(\d+)")
_METRICS = re.compile(r"metrics on :(\d+)")


def deployment_limit_mb() -> float:
    """The memory limit of the shipped Deployment's container (MB)."""
    text = (ROOT / "deploy" / "kubernetes" / "deployment.yaml").read_text()
    found = re.search(r"limits:\s*\n(?:\s+cpu:.*\n)?\s+memory:\s*(\d+)(Gi|Mi)", text)
    if found is None:
        return float("nan")
    value, unit = int(found.group(1)), found.group(2)
    return value * (2**30 if unit == "Gi" else 2**20) / 1e6


class Server:
    """`python -m meshplan.server` on a free loopback port with JSON logs in a file."""

    def __init__(
        self,
        workdir: Path,
        tokens: list[str],
        python: str | None = None,
        settings: dict[str, str] | None = None,
    ) -> None:
        (workdir / "tokens").write_text("\n".join(tokens) + "\n")
        self.log = workdir / "server.log"
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(settings or {}))  # MESHPLAN_* settings
        if python is None:  # this checkout's server; another interpreter brings its own
            env["PYTHONPATH"] = str(ROOT)
        cmd = [python or sys.executable, "-m", "meshplan.server", "--host", LOOPBACK, "--port", "0"]
        cmd += ["--auth-token-file", str(workdir / "tokens"), "--log-format", "json"]
        cmd += ["--health-port", "0", "--metrics-port", "0", "--metrics-host", LOOPBACK]
        # A session of its own, as in a container: where Linux shares the CPUs between sessions
        # (autogroup), the server does not share one with this process's 64 callers.
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stderr=self.log.open("w"), start_new_session=True
        )
        deadline = time.monotonic() + 120
        while (found := _SERVING.search(self.log.read_text())) is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start:\n" + self.log.read_text())
            time.sleep(0.05)
        self.target = f"{LOOPBACK}:{found.group(1)}"
        health = _HEALTH.search(self.log.read_text())
        self.health_target = f"{LOOPBACK}:{health.group(1)}" if health else self.target
        found_metrics = _METRICS.search(self.log.read_text())
        self.metrics_url = (
            f"http://{LOOPBACK}:{found_metrics.group(1)}/metrics" if found_metrics else None
        )

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # gRPC core's own lines
        return out

    def stop(self) -> int:
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -9


# --- report -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = arg_parser(
        "soak", "The service under many clients and fuzzed calls (the service's targets)."
    )
    p.add_argument("--clients", type=int, help=f"concurrent clients (default {FULL['clients']})")
    p.add_argument("--seconds", type=float, help=f"load duration (default {FULL['seconds']:.0f})")
    p.add_argument("--fuzz", type=int, help=f"fuzzed calls (default {FULL['fuzz']:,})")
    p.add_argument("--curves", type=int, help=f"4,096-cell curves (default {FULL['curves']})")
    p.add_argument(
        "--only",
        choices=["load", "fuzz", "memory"],
        help="run this phase alone (memory: with the caches' bounds cut, see --cache-mib)",
    )
    p.add_argument(
        "--cache-mib",
        type=int,
        nargs=2,
        default=MEMORY_CACHE_MIB,
        metavar=("ANSWERS", "CURVES"),
        help="with --only memory: the answer cache's and the curve cache's bounds (MiB; "
        f"default {MEMORY_CACHE_MIB[0]} {MEMORY_CACHE_MIB[1]}: {MEMORY_CURVES} curves overflow "
        "both)",
    )
    p.add_argument("--server-python", metavar="PATH", help="run the server with this interpreter")
    a = p.parse_args(argv)
    base = QUICK if a.quick else FULL
    clients, seconds, fuzz = (
        a.clients or base["clients"],
        a.seconds or base["seconds"],
        a.fuzz or base["fuzz"],
    )
    curves = a.curves or (MEMORY_CURVES if a.only == "memory" else base["curves"])
    print(header("soak", clients=clients, seconds=seconds, fuzz=fuzz, curves=curves), flush=True)
    tokens = [
        f"soak-client-{i:03d}-{os.urandom(6).hex()}" for i in range(max(clients, FUZZ_THREADS))
    ]
    if a.only == "memory":
        return _memory_only(tokens, curves, a.cache_mib, a.server_python, a.json)
    with tempfile.TemporaryDirectory(prefix="meshplan-soak-") as tmp:
        server = Server(Path(tmp), tokens, a.server_python)
        try:
            if a.only == "fuzz":
                fz = fuzz_phase(server, tokens, fuzz)
                print(table(["fuzz", "value"], _fuzz_rows(fz, residual_cpu(server, 2.0))))
                write_json(a.json, {"report": {"fuzz": fz}})
                return 0
            before = os.getloadavg()
            load = load_phase(server, tokens, clients, seconds, idle_s=1.0 if a.quick else 6.0)
            load["loadavg"] = [before, os.getloadavg()]  # the machine's, as `uptime` prints it
            print(f"load done: {load['codes']}", flush=True)
            if a.only == "load":
                print(table(["load", "value"], _load_rows(load, deployment_limit_mb())))
                write_json(a.json, {"report": {"load": load}})
                return 0
            fz = fuzz_phase(server, tokens, fuzz)
            idle = residual_cpu(server, base["idle_s"])
            print(f"fuzz done: {fz['codes']}; residual CPU {idle['share']:.2%}", flush=True)
            mem = memory_phase(server, tokens[1], curves, base["replan_s"])
            print(f"memory done: {mem['codes']}", flush=True)
            term = sigterm_phase(server, tokens[2], OBSERVATIONS)
        finally:
            server.stop()
    report = {
        "load": load,
        "fuzz": fz,
        "residual_cpu": idle,
        "memory": mem,
        "sigterm": term,
        "limit_mb": deployment_limit_mb(),
    }
    _print(report)
    write_json(a.json, {"report": report})
    return 0


def _memory_only(
    tokens: list[str],
    curves: int,
    cache_mib: list[int],
    python: str | None,
    json_path: str | None,
) -> int:
    """The memory phase alone, on a server whose answer and curve caches are bounded at
    `cache_mib` MiB: `curves` distinct 4,096-cell curves (~0.9 MB of answer and ~20 MB of
    curve each, by the caches' weights) overflow both in minutes, where the default bounds (64
    and 96 MiB) take ~256 curves and ~45 min here. Reported: the server process's growth
    against the two bounds, and the tree's peak."""
    bounds = {
        "MESHPLAN_ANSWER_CACHE_BYTES": str(cache_mib[0] * 2**20),
        "MESHPLAN_CURVE_CACHE_BYTES": str(cache_mib[1] * 2**20),
    }
    with tempfile.TemporaryDirectory(prefix="meshplan-soak-") as tmp:
        server = Server(Path(tmp), tokens, python, bounds)
        try:
            own_before = server.rss_mb()
            mem = memory_phase(server, tokens[1], curves, FULL["replan_s"])
            mem["server_rss_before_mb"] = own_before
            time.sleep(6.0)  # the server returns freed heap every 5 s
            mem["server_rss_end_mb"] = server.rss_mb()
        finally:
            server.stop()
    mem["cache_bounds_mb"] = sum(cache_mib) * 2**20 / 1e6
    # past the first half the caches are full: what the server grows by then is what they do
    # not bound (the first calls' fixed costs, threads and heaps, come before)
    half = mem["server_rss_half_mb"] or mem["server_rss_before_mb"]
    late = mem["server_rss_end_mb"] - half
    grown = mem["server_rss_end_mb"] - mem["server_rss_before_mb"]
    limit = deployment_limit_mb()
    print(table(["memory (caches bounded)", "value"], [
        ["answer and curve cache bounds", f"{cache_mib[0]} and {cache_mib[1]} MiB ({mem['cache_bounds_mb']:.0f} MB in all)"],
        ["78-byte Replan", f"{_codes({k: v for k, v in mem['codes'].items() if k.startswith('replan')})} in {mem['replan_s']:.1f} s; tree peak {mem['replan_peak_mb']:.0f} MB"],
        [f"{curves} 4,096-cell curves", f"{_codes({k: v for k, v in mem['codes'].items() if k.startswith('curve')})} in {mem['curves_s']:.1f} s"],
        ["server process RSS", f"{mem['server_rss_before_mb']:.0f} MB -> {half:.0f} MB at half the curves -> {mem['server_rss_end_mb']:.0f} MB (grew {grown:.0f} MB, {late:+.0f} MB over the second half; caches bounded at {mem['cache_bounds_mb']:.0f} MB)"],
        ["tree RSS", f"{mem['rss_before_mb']:.0f} MB -> peak {mem['peak_mb']:.0f} MB -> {mem['rss_after_mb']:.0f} MB (limit {limit:.0f} MB)"],
        ["each process (server, solvers)", f"{_each(mem.get('processes_before_mb'))} MB at the start; {_each(mem.get('processes_at_peak_mb'))} MB at the peak"],
    ]))  # fmt: skip
    within = mem["peak_mb"] <= limit
    print(f"\nsummary: the tree's peak within the Deployment's limit: "
          f"{'met' if within else 'MISSED'} ({mem['peak_mb']:.0f} of {limit:.0f} MB); the server "
          f"{late:+.0f} MB over the second half (caches full; a curve in flight weighs ~20 MB)")  # fmt: skip
    write_json(json_path, {"report": {"memory": mem, "limit_mb": limit}})
    return 0


def _each(mbs: list[float] | None) -> str:
    """Each process's RSS, the server's first ("-" when not measured)."""
    return " / ".join(f"{x:.0f}" for x in mbs) if mbs else "-"


def _print(r: dict[str, Any]) -> None:
    load, fz, mem, term, idle = r["load"], r["fuzz"], r["memory"], r["sigterm"], r["residual_cpu"]
    limit = r["limit_mb"]
    h, hp = load["health"], load["health_port"]
    polite = load["polite"]
    polite_ok = polite.get("OK", 0) / max(sum(polite.values()), 1)

    def codes(c: dict[str, int]) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(c.items()))

    print(table(["load", "value"], _load_rows(load, limit)))
    print()
    print(table(["fuzz", "value"], _fuzz_rows(fz, idle)))
    print()
    print(table(["memory and SIGTERM", "value"], [
        ["78-byte Replan", f"{codes({k: v for k, v in mem['codes'].items() if k.startswith('replan')})} in {mem['replan_s']:.1f} s; tree peak {mem['replan_peak_mb']:.0f} MB"],
        [f"{mem['curves']} 4,096-cell curves", f"{codes({k: v for k, v in mem['codes'].items() if k.startswith('curve')})} in {mem['curves_s']:.1f} s"],
        ["tree RSS", f"{mem['rss_before_mb']:.0f} MB -> peak {mem['peak_mb']:.0f} MB -> {mem['rss_after_mb']:.0f} MB"],
        ["each process (server, solvers)", f"{_each(mem.get('processes_before_mb'))} MB at the start; {_each(mem.get('processes_at_peak_mb'))} MB at the peak"],
        [f"SIGTERM, {term['observations']:,} observations in flight", f"exit {term['exit_code']} after {term['exit_s']:.1f} s (call: {term['call']})"],
    ]))  # fmt: skip
    allowed = {"OK", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED"}
    only = set(load["codes"]) | set(polite)
    internal = fz["internal"] + fz["internal_items"] + fz["internal_log_lines"]
    peak = max(load["rss_peak_mb"], mem["peak_mb"])
    exited = term["exit_code"] == 0 and term["exit_s"] <= GRACE_S
    exit_text = f"exit {term['exit_code']} in {term['exit_s']:.1f} s"

    def met(ok: bool, text: str) -> str:
        return f"{'met' if ok else 'MISSED'} ({text})"

    parts = [
        f"answers only OK/RE/DE {met(only <= allowed, ', '.join(sorted(only)))}",
        f"polite plans >= 90% OK {met(polite_ok >= POLITE_OK, f'{polite_ok:.0%}')}",
        f"health p99 {verdict(h['p99'], HEALTH_P99_S)} / health port {verdict(hp['p99'], HEALTH_P99_S)}",
        f"tree peak RSS within the limit {met(peak <= limit, f'{peak:.0f} of {limit:.0f} MB')}",
        f"fuzz INTERNAL {met(internal == 0, str(internal))}",
        f"fuzz past deadline+100ms {met(fz['late_count'] == 0, str(fz['late_count']))}",
        f"residual CPU {met(idle['share'] < RESIDUAL_CPU, format(idle['share'], '.2%'))}",
        f"SIGTERM exit within {GRACE_S:.0f} s {met(exited, exit_text)}",
    ]
    print("\nsummary: " + "; ".join(parts))


def _codes(c: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items()))


def _load_rows(load: dict[str, Any], limit: float) -> list[list[str]]:
    h, hp, polite = load["health"], load["health_port"], load["polite"]
    polite_ok = polite.get("OK", 0) / max(sum(polite.values()), 1)
    codes = _codes
    return [
        ["clients x seconds", f"{load['clients']} x {load['seconds']:.1f} s"],
        ["tenants' answers", codes(load["codes"])],
        ["polite caller", f"{codes(polite)} ({polite_ok:.0%} OK)"],
        ["made-up tokens", codes(load["made_up"])],
        ["health Check, gRPC port", f"p50 {fmt_s(h['p50'])}  p99 {fmt_s(h['p99'])}  max {fmt_s(h['max'])}  (n={h['n']}, failed {load['health_failures']})"],
        ["health Check, health port", f"p50 {fmt_s(hp['p50'])}  p99 {fmt_s(hp['p99'])}  max {fmt_s(hp['max'])}  (n={hp['n']}, failed {load['health_port_failures']})"],
        ["tree RSS", f"{load['rss_before_mb']:.0f} MB -> peak {load['rss_peak_mb']:.0f} MB -> {load['rss_after_mb']:.0f} MB (limit {limit:.0f} MB)"],
        ["health Check, no caller (the machine's floor)", _quiet_text(load)],
        ["server's event-loop lag (every 0.1 s)", _lag_text(load.get("loop_lag"))],
        ["event-loop thread: CPU, wait for a CPU", _sched_text(load.get("loop_sched"))],
        ["machine load average (1, 5, 15 min)", " -> ".join(", ".join(f"{x:.1f}" for x in avg) for avg in load.get("loadavg", []))],
    ]  # fmt: skip


def _sched_text(sched: dict[str, Any] | None) -> str:
    if not sched:
        return "n/a (no /proc/PID/task/TID/schedstat)"
    per = sched["run_queue_s"] / max(sched["slices"], 1)
    return (
        f"CPU {sched['cpu_s']:.1f} s, waited {sched['run_queue_s']:.1f} s on the run queue over "
        f"{sched['slices']:,} time slices ({fmt_s(per)} a slice)"
    )


def _quiet_text(load: dict[str, Any]) -> str:
    q, qp = load.get("health_quiet"), load.get("health_port_quiet")
    if not q or not qp:
        return "n/a"
    return f"gRPC port p99 {fmt_s(q['p99'])}, health port p99 {fmt_s(qp['p99'])} (n={q['n']})"


def _lag_text(lag: dict[str, Any] | None) -> str:
    if not lag:
        return "n/a (none, or the server does not measure it)"
    return (
        f"p50 <= {fmt_s(lag['p50'])}  p99 <= {fmt_s(lag['p99'])}  max <= {fmt_s(lag['max'])}  "
        f"over 50 ms {lag['over_50ms']} of {lag['n']}"
    )


def _replaced_text(replaced: list[Any]) -> str:
    """Distinct processes replaced (a stuck one is warned of twice: its stop and its ping),
    and the calls that held them, by method and kind."""
    pids = {m.group(1) for r in replaced if (m := re.search(r"\(pid (\d+)\)", str(r)))}
    calls = {
        (r["method"], r["kind"], r["shape"])
        for r in replaced
        if isinstance(r, dict) and "kind" in r
    }
    kinds = _codes(dict(Counter(f"{method} {kind}" for method, kind, _ in calls)))
    return f"{len(pids)} ({kinds or 'no call named'})" if pids else "0"


def _fuzz_rows(fz: dict[str, Any], idle: dict[str, Any]) -> list[list[str]]:
    codes = _codes
    return [
        ["calls", f"{fz['calls']:,} in {fz['seconds']:.1f} s ({codes(fz['kinds'])})"],
        ["answers", codes(fz["codes"])],
        ["INTERNAL", f"{fz['internal']} calls, {fz['internal_items']} batch items, {fz['internal_log_lines']} log lines"],
        ["past deadline + 100 ms", f"{fz['late_count']} of {fz['logged']} logged calls"],
        ["solver processes replaced", _replaced_text(fz.get("replaced", []))],
        ["server's event-loop lag", _lag_text(fz.get("loop_lag"))],
        ["server's full collections (generation 2)", _lag_text(fz.get("full_gc"))],
        [f"tree CPU over the next {idle['seconds']:.0f} s", f"{idle['cpu_s']:.2f} s ({idle['share']:.2%})"],
    ]  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
