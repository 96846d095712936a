"""`python -m meshplan` and the `meshplan` command: run the command line, exit with its status."""

from __future__ import annotations

import contextlib
import os
import sys

INTERRUPTED = 130  # tools/cli/main.py EXIT_INTERRUPTED (128 + SIGINT)


def run() -> None:
    """The console script. Ctrl-C at any moment ends with one line and status 130: during the
    first imports too, and without the interpreter's finalisation, which an extension's import
    cut short by Ctrl-C can turn into death by SIGINT. `plan` and `evaluate` end without it too:
    their answer is written and flushed, and tearing down the modules and objects they loaded
    (numpy, pydantic, the solver's tables) was 2% of the first plan's instructions."""
    quick = False
    try:
        from meshplan.tools.cli.main import ends_without_finalisation, main, start_process

        start_process(sys.argv[1:])  # before numpy or pydantic loads
        quick = ends_without_finalisation(sys.argv[1:])
        status = main()
    except KeyboardInterrupt:
        print("meshplan: interrupted", file=sys.stderr)
        status = INTERRUPTED
    if status == INTERRUPTED or quick:
        import atexit

        atexit._run_exitfuncs()  # the clean-ups (worker processes, semaphores) still run
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":
    run()
