"""Soak: the service under many clients and under fuzzed calls, against the service's targets.

The server runs as its own process (`python -m meshplan.server`, default settings, a token per
client, JSON logs) so that its RSS is its own. Two phases:

1. load: `--clients` asyncio clients (each with its own token) call Plan, Evaluate, PlanBatch
   and ListCatalog for `--seconds`, backing off exponentially on RESOURCE_EXHAUSTED, while a
   separate process checks health every 50 ms. Targets: only OK and RESOURCE_EXHAUSTED, health
   Check p99 <= 50 ms, RSS growth <= 50 MB (after the load and a few seconds idle).
2. fuzz: `--fuzz` raw calls (benchmarks/soak_fuzz.py: the property tests' generated requests,
   the same with extreme fields, random layouts, batches, garbage bytes) with deadlines of
   0.05-1 s. Targets: no INTERNAL (status, batch item, or server log line) and no call the
   server ended later than its deadline + 100 ms (the `call_s` of its log line).

Then SIGTERM: the server must drain and exit 0.

    python -m benchmarks soak [--quick] [--clients N] [--seconds S] [--fuzz N] [--json PATH]
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

ROOT = Path(__file__).resolve().parent.parent
HEALTH_P99_S, RSS_GROWTH_MB = 0.050, 50.0
FULL = {"clients": 64, "seconds": 60.0, "fuzz": 20_000}
QUICK = {"clients": 8, "seconds": 3.0, "fuzz": 200}
_SERVING = re.compile(r"on [^ ]+:(\d+) \(")


class Server:
    """`python -m meshplan.server` on a free loopback port with JSON logs in a file."""

    def __init__(self, workdir: Path, tokens: list[str]) -> None:
        (workdir / "tokens").write_text("\n".join(tokens) + "\n")
        self.log = workdir / "server.log"
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        cmd = [sys.executable, "-m", "meshplan.server", "--host", LOOPBACK, "--port", "0"]
        cmd += ["--auth-token-file", str(workdir / "tokens"), "--log-format", "json"]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=self.log.open("w"))
        deadline = time.monotonic() + 120
        while (found := _SERVING.search(self.log.read_text())) is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start:\n" + self.log.read_text())
            time.sleep(0.05)
        self.target = f"{LOOPBACK}:{found.group(1)}"

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
    a = p.parse_args(argv)
    base = QUICK if a.quick else FULL
    clients, seconds, fuzz = (
        a.clients or base["clients"],
        a.seconds or base["seconds"],
        a.fuzz or base["fuzz"],
    )
    print(header("soak", clients=clients, seconds=seconds, fuzz=fuzz), flush=True)
    tokens = [
        f"soak-client-{i:03d}-{os.urandom(6).hex()}" for i in range(max(clients, FUZZ_THREADS))
    ]
    with tempfile.TemporaryDirectory(prefix="meshplan-soak-") as tmp:
        server = Server(Path(tmp), tokens)
        try:
            load = load_phase(server, tokens[:clients], seconds, idle_s=1.0 if a.quick else 6.0)
            fz = fuzz_phase(server, tokens, fuzz)
        finally:
            exit_code = server.stop()
    report = {"load": load, "fuzz": fz, "exit_code": exit_code}
    _print(report)
    write_json(a.json, {"report": report})
    return 0


def _print(r: dict[str, Any]) -> None:
    load, fz = r["load"], r["fuzz"]
    growth = load["rss_after_mb"] - load["rss_before_mb"]
    h = load["health"]
    print(table(["load", "value"], [
        ["clients x seconds", f"{load['clients']} x {load['seconds']:.1f} s"],
        ["answers", ", ".join(f"{k} {v}" for k, v in sorted(load["codes"].items()))],
        ["health Check", f"p50 {fmt_s(h['p50'])}  p99 {fmt_s(h['p99'])}  max {fmt_s(h['max'])}  (n={h['n']}, failed {load['health_failures']})"],
        ["server RSS", f"{load['rss_before_mb']:.0f} MB -> {load['rss_after_mb']:.0f} MB"],
    ]))  # fmt: skip
    print()
    print(table(["fuzz", "value"], [
        ["calls", f"{fz['calls']:,} in {fz['seconds']:.1f} s ({', '.join(f'{k} {v}' for k, v in sorted(fz['kinds'].items()))})"],
        ["answers", ", ".join(f"{k} {v}" for k, v in sorted(fz["codes"].items()))],
        ["INTERNAL", f"{fz['internal']} calls, {fz['internal_items']} batch items, {fz['internal_log_lines']} log lines"],
        ["past deadline + 100 ms", f"{fz['late_count']} of {fz['logged']} logged calls"],
    ]))  # fmt: skip
    only = set(load["codes"]) <= {"OK", "RESOURCE_EXHAUSTED"}
    internal = fz["internal"] + fz["internal_items"] + fz["internal_log_lines"]
    parts = [
        f"load answers only OK/RESOURCE_EXHAUSTED {'met' if only else 'MISSED: ' + str(sorted(load['codes']))}",
        f"health p99 {verdict(h['p99'], HEALTH_P99_S)}",
        f"RSS growth {verdict(max(growth, 0.0), RSS_GROWTH_MB, lambda x: f'{x:.0f} MB')}",
        f"fuzz INTERNAL {'met (0)' if internal == 0 else f'MISSED: {internal}'}",
        f"fuzz past deadline+100ms {'met (0)' if fz['late_count'] == 0 else 'MISSED: ' + str(fz['late_count'])}",
        f"drain {'met (exit 0)' if r['exit_code'] == 0 else 'MISSED: exit ' + str(r['exit_code'])}",
    ]
    print("\nsummary: " + "; ".join(parts))


if __name__ == "__main__":
    sys.exit(main())
