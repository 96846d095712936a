"""python -m benchmarks <name> [options]: run one benchmark, or `all` of them in turn.

    python -m benchmarks latency [--quick] [--time-limit S] [--oracle-cap S] [--repeats N]
    python -m benchmarks throughput [--quick] [-n N] [--workers W] [--pool process,thread]
    python -m benchmarks scaling [--quick] [--time-limit S]
    python -m benchmarks fidelity [...]         # benchmarks/fidelity.py, when present
    python -m benchmarks memory [--quick]       # what fits, and the printed peaks
    python -m benchmarks startup [--quick] [--runs N]   # meshplan --help/--version/catalog
    python -m benchmarks scheduler [--quick] [--repeats N]
    python -m benchmarks soak [--quick] [--clients N] [--seconds S] [--fuzz N]
    python -m benchmarks ray_sweep [-n 100000]  # a sweep on Ray, killed and resumed midway
    python -m benchmarks all [--quick]          # each of the above but ray_sweep; only --quick

`<name> --help` lists a benchmark's options. The exit status is the largest of the benchmarks';
`all` skips (with a message) a benchmark whose module does not exist yet.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

NAMES = ("latency", "throughput", "scaling", "fidelity", "memory", "startup", "scheduler", "soak")
SLOW = ("ray_sweep",)  # run by name only, not by `all`
USAGE = f"usage: python -m benchmarks {{{'|'.join((*NAMES, *SLOW, 'all'))}}} [--quick] [options]"


def load(name: str) -> Callable[[list[str]], int] | None:
    """The benchmark's main(), or None (with a message) if its module does not exist yet."""
    try:
        module = importlib.import_module(f"benchmarks.{name}")
    except ModuleNotFoundError as err:
        if err.name != f"benchmarks.{name}":
            raise  # the module exists but one of its imports is missing
        print(
            f"benchmarks: '{name}' is not available: benchmarks/{name}.py does not exist yet",
            file=sys.stderr,
        )
        return None
    return module.main


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__ if args else USAGE, file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name == "all":
        passed = [a for a in rest if a == "--quick"]
        worst = 0
        for each in NAMES:
            fn = load(each)
            if fn is None:  # not written yet: said on stderr, and skipped
                continue
            print(flush=True)
            worst = max(worst, fn(passed))
        return worst
    if name not in NAMES + SLOW:
        print(f"benchmarks: unknown benchmark {name!r}\n{USAGE}", file=sys.stderr)
        return 2
    fn = load(name)
    return 1 if fn is None else fn(rest)


if __name__ == "__main__":
    sys.exit(main())
