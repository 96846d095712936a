"""Start-up time of the command line: `meshplan --help`, `--version`, `catalog` and the README's
first plan (`meshplan plan --model llama3-70b ... --gpus 256`, answered from the bounds without
a CP-SAT model), each run as a fresh process (what a person or a script waits for), against the
target of 0.3 s.

Each command runs `--runs` times (after one warm-up run that fills the OS file cache); the table
gives the best and the median wall time, the best CPU time (user + system: on a shared machine
it moves less than the wall time), and the modules each command imported that a fast start must
not need: for --help, --version and catalog, OR-Tools, numpy, pandas, matplotlib, gRPC and
pydantic; for the plan, which needs numpy and pydantic, the others.

meshplan's own modules are timed from their bytecode, as an installed package runs: pip
compiles it when it installs a wheel, and Python writes it at a checkout's first run (unless
PYTHONDONTWRITEBYTECODE is set). The benchmark compiles what is missing first (compileall, into
the package's __pycache__ folders) and says how many modules that was; --no-compile times
whatever is there (from a checkout under PYTHONDONTWRITEBYTECODE: every module compiled from
source at every start).
"""

from __future__ import annotations

import compileall
import importlib.util
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.common import arg_parser, fmt_s, header, table, verdict, write_json

TARGET_S = 0.3
FIRST_PLAN = (  # the README's first command, after its install
    "plan", "--model", "llama3-70b", "--gpu", "h100-sxm-80gb", "--gpus", "256",
    "--seq-len", "8192", "--critical-batch-tokens", "2097152",
)  # fmt: skip
COMMANDS: tuple[tuple[str, ...], ...] = (("--help",), ("--version",), ("catalog",), FIRST_PLAN)
HEAVY = ("ortools", "numpy", "pandas", "matplotlib", "grpc", "pydantic")
PLAN_NEEDS = ("numpy", "pydantic")  # the cost model's arrays and the request's schema
PACKAGES = ("meshplan", "meshplan.solver", "meshplan.tools", "meshplan.client", "meshplan.server")
_PROBE = (  # runs the CLI in-process as `meshplan` does, then names the heavy modules it loaded
    "import sys, contextlib, io\n"
    "from meshplan.tools.cli.main import main, start_process\n"
    "start_process(sys.argv[1:])\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n"
    "    main(sys.argv[1:])\n"
    f"heavy = {HEAVY!r}\n"
    "print(' '.join(m for m in heavy if m in sys.modules))\n"
)


@dataclass
class Measured:
    """One command's start-up times (seconds) and the heavy modules it loaded."""

    command: str
    runs: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # user + system seconds of each run
    heavy_imports: list[str] = field(default_factory=list)
    exit_status: int = 0

    @property
    def best(self) -> float:
        return min(self.runs)

    @property
    def median(self) -> float:
        return statistics.median(self.runs)


def compile_bytecode() -> int:
    """Compile meshplan's modules that have no up-to-date bytecode (what pip does when it
    installs a wheel); the number compiled."""
    before = stale_modules()
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            compileall.compile_dir(folder, quiet=2)
    return before


def stale_modules() -> int:
    """meshplan's modules whose bytecode is missing or older than their source."""
    n = 0
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            for src in Path(folder).rglob("*.py"):
                pyc = Path(importlib.util.cache_from_source(str(src)))
                n += not pyc.exists() or pyc.stat().st_mtime < src.stat().st_mtime
    return n


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def measure(args: tuple[str, ...], runs: int) -> Measured:
    """Wall and CPU time of `python -m meshplan ARGS` as a new process, `runs` times after a
    warm-up."""
    argv = [sys.executable, "-m", "meshplan", *args]
    m = Measured(" ".join(["meshplan", *args]))
    subprocess.run(argv, capture_output=True, timeout=60, check=False)  # warm the file cache
    for _ in range(runs):
        cpu, t0 = _children_cpu(), time.perf_counter()
        done = subprocess.run(argv, capture_output=True, timeout=60, check=False)
        m.runs.append(time.perf_counter() - t0)
        m.cpu.append(_children_cpu() - cpu)
        m.exit_status = max(m.exit_status, done.returncode)
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=60
    )
    needed = PLAN_NEEDS if args[:1] == ("plan",) else ()
    m.heavy_imports = [x for x in probe.stdout.split() if x not in needed]
    return m


def render(results: list[Measured]) -> str:
    rows = [
        [
            r.command,
            fmt_s(r.best),
            fmt_s(r.median),
            fmt_s(min(r.cpu)),
            len(r.runs),
            r.exit_status,
            " ".join(r.heavy_imports) or "-",
        ]
        for r in results
    ]
    head = ["command", "best", "median", "cpu best", "runs", "exit", "heavy imports"]
    return table(head, rows) + "\n" + summary_line(results)


def summary_line(results: list[Measured]) -> str:
    worst = max(results, key=lambda r: r.median)
    return (
        f"summary: start-up, the slowest median of {len(results)} commands is {worst.command}: "
        f"{verdict(worst.median, TARGET_S)}; best {fmt_s(max(r.best for r in results))}"
    )


def main(argv: list[str] | None = None) -> int:
    p = arg_parser("startup", __doc__.split("\n\n")[0])
    p.add_argument(
        "--runs", type=int, default=0, metavar="N", help="runs per command (default 10; quick 3)"
    )
    p.add_argument(
        "--no-compile",
        action="store_true",
        help="time meshplan's modules as they are, without compiling missing bytecode first",
    )
    a = p.parse_args(argv)
    runs = a.runs or (3 if a.quick else 10)
    compiled = 0 if a.no_compile else compile_bytecode()
    stale = stale_modules()
    print(
        header("startup", quick=a.quick, runs=runs, target_s=TARGET_S)
        + f"\nbytecode: {compiled} modules compiled first; {stale} run from source",
        flush=True,
    )
    results = [measure(args, runs) for args in COMMANDS]
    print(render(results))
    write_json(
        a.json,
        {
            "benchmark": "startup",
            "report": {
                "target_s": TARGET_S,
                "bytecode": {"compiled_first": compiled, "from_source": stale},
                "commands": [asdict(r) | {"best": r.best, "median": r.median} for r in results],
            },
        },
    )
    return 0 if all(r.exit_status == 0 for r in results) else 1
