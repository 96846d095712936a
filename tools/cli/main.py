"""meshplan: plans how a transformer training step is cut across GPUs (tensor, pipeline, data /
FSDP, context and expert parallelism, micro-batches, recomputation), as an integer program over
one cost model. Tables for people, --json for machines, --emit for launchers."""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import os
import sys
import types
from collections.abc import Callable, Mapping, Sequence

from meshplan.solver.record import record

EXIT_OK = 0  # a plan was found / the layout fits / every row was answered
EXIT_ERROR = 1  # anything else: a solve stopped before any plan, a server down, a failed row
EXIT_BAD_INPUT = 2  # a flag, a request field or a file is wrong; one line names it
EXIT_INFEASIBLE = 3  # no layout fits / the evaluated layout does not fit or breaks a rule
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)
EXIT_TERMINATED = 143  # SIGTERM during a sweep or a ladder (128 + SIGTERM)

EXIT_CODES = """\
exit status:
  0    a plan was found; the evaluated layout fits; every row of a sweep, ladder or batch
       was answered (an infeasible row is an answer)
  1    anything else: a solve stopped before it found any plan, a server that does not
       answer, a sweep, ladder or batch row that failed (ERROR)
  2    bad input: a flag, a request field or a file; one line on stderr names it
  3    no layout fits (plan: INFEASIBLE, with the reason and the smallest cluster that fits),
       or the evaluated layout does not fit in memory or breaks a rule
  130  interrupted (Ctrl-C)
  143  terminated (SIGTERM) during a sweep or a ladder, its worker processes stopped
"""


@record(frozen=True)
class Command:
    """A subcommand: its name, its one-line help, and where its flags and its body live.

    The module is imported only when the command runs (or its --help is asked), so
    `meshplan --help` and `meshplan catalog` do not load the solver, OR-Tools or gRPC."""

    name: str
    help: str
    module: str
    add_arguments: str  # function(parser) adding the command's flags
    run: str  # function(args) -> exit status


COMMANDS: tuple[Command, ...] = (
    Command(
        "plan",
        "choose the best layout for a model on a cluster",
        "meshplan.tools.cli.plan",
        "add_plan_arguments",
        "cmd_plan",
    ),
    Command(
        "evaluate",
        "score one given layout: memory, time, MFU, the rules it breaks",
        "meshplan.tools.cli.plan",
        "add_evaluate_arguments",
        "cmd_evaluate",
    ),
    Command(
        "catalog",
        "list the GPUs and model presets",
        "meshplan.tools.cli.catalog",
        "add_catalog_arguments",
        "cmd_catalog",
    ),
    Command(
        "serve",
        "run the gRPC server (and with --http-port, JSON over HTTP and the planner page)",
        "meshplan.tools.cli.serve",
        "add_serve_arguments",
        "run_serve",
    ),
    Command(
        "batch",
        "send many plan requests to a server (PlanBatch)",
        "meshplan.tools.cli.batch",
        "add_batch_arguments",
        "run_batch",
    ),
    Command(
        "sweep",
        "plan a grid of models x GPU counts x sequence lengths, resumable",
        "meshplan.tools.cli.sweep",
        "add_sweep_arguments",
        "cmd_sweep",
    ),
    Command(
        "ladder",
        "the scaling ladder: the wall each rung hits and the axis it adds",
        "meshplan.tools.cli.sweep",
        "add_ladder_arguments",
        "cmd_ladder",
    ),
    Command(
        "curve",
        "throughput over (GPU type, count): the envelope, knee and bands a scheduler reads",
        "meshplan.tools.cli.scheduler",
        "add_curve_arguments",
        "run_curve",
    ),
    Command(
        "replan",
        "the layout after losing or gaining nodes, at a compatibility level",
        "meshplan.tools.cli.scheduler",
        "add_replan_arguments",
        "run_replan",
    ),
    Command(
        "admit",
        "the fewest (or cheapest) GPUs per type that finish the work by a deadline",
        "meshplan.tools.cli.scheduler",
        "add_admit_arguments",
        "run_admit",
    ),
    Command(
        "front",
        "days against GPU-hours and cost for a token budget (the Pareto front)",
        "meshplan.tools.cli.scheduler",
        "add_front_arguments",
        "run_front",
    ),
)


class Parser(argparse.ArgumentParser):
    """argparse with a one-line, bounded error (exit 2), help that keeps its line breaks, and no
    abbreviated flags (`--gpus` must never be read as `--gpus-per-node`)."""

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        from meshplan.tools.cli.messages import shorten

        self.exit(EXIT_BAD_INPUT, f"{self.prog}: {shorten(message)} (see {self.prog} --help)\n")


def _version() -> str:
    import meshplan

    return f"meshplan {meshplan.__version__}"


class _Version(argparse.Action):
    """--version, reading the installed version only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs) -> None:  # noqa: ANN003
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # noqa: ANN001
        print(_version())
        parser.exit(EXIT_OK)


ALL = "*"


def build_parser(chosen: str | None = ALL) -> argparse.ArgumentParser:
    """The parser; only the `chosen` command's flags are added (ALL: every command's; None:
    none, enough for `meshplan --help`). A chosen command gets the only subparser: the others
    serve the top level's help and its "invalid choice" error, which then cannot show."""
    ap = Parser(prog="meshplan", description=__doc__, epilog=EXIT_CODES)
    ap.add_argument("--version", action=_Version)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND", parser_class=Parser)
    for c in COMMANDS:
        if chosen not in (ALL, None, c.name):
            continue  # each parser costs argparse's message look-ups (gettext) and -h
        p = sub.add_parser(
            c.name, help=c.help, description=c.help + ".", epilog=EXIT_CODES, allow_abbrev=False
        )
        if chosen in (ALL, c.name):
            module = importlib.import_module(c.module)
            getattr(module, c.add_arguments)(p)
            p.set_defaults(fn=_lazy(c.module, c.run))
    return ap


def _lazy(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(module), name)(args)

    return run


def _chosen(argv: Sequence[str]) -> str | None:
    """The subcommand: the first word that is not an option (the top level's options take no
    value)."""
    names = {c.name for c in COMMANDS}
    for word in argv:
        if not word.startswith("-"):
            return word if word in names else None
    return None


# The commands whose run calls imports_done() once their modules are loaded (the others: before
# they run).
LOAD_THEN_RUN = frozenset({"plan", "evaluate"})
_collector_paused = False


def start_process(argv: Sequence[str]) -> None:
    """Settings for a command run as its own process (meshplan/__main__.py), made before numpy
    or pydantic loads. The user's own environment wins."""
    global _collector_paused
    chosen = _chosen(argv)
    if chosen == "serve":  # the server sets its workers' threads itself (server/tasks.py)
        return
    # OpenBLAS starts no thread pool: a plan runs BLAS on one thread anyway (solver/blas.py),
    # and the pool's threads, spinning while they wait for work, take a core from the start.
    from meshplan.solver.blas import ONE_THREAD_VARIABLES, started_on_one_thread

    for key in ONE_THREAD_VARIABLES:
        os.environ.setdefault(key, "1")
    started_on_one_thread()
    # pydantic reads every installed distribution's entry points to find its plugins when it
    # builds its first validator (pydantic/plugin/_loader.py); a command has none to feed.
    # PYDANTIC_DISABLE_PLUGINS= (empty) lets them load.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    if os.environ["PYDANTIC_DISABLE_PLUGINS"] in PLUGINS_OFF:
        skip_plugin_loader()
    if chosen in LOAD_THEN_RUN:
        # Loading the solver makes ~10^5 objects and no garbage; the collector's passes over
        # them were 8% of the first plan's instructions (callgrind). On again in imports_done.
        gc.disable()
        _collector_paused = True


# The values of PYDANTIC_DISABLE_PLUGINS that turn every plugin off (pydantic/plugin/_loader.py,
# pydantic 2.14.4 get_plugins)
PLUGINS_OFF = frozenset({"__all__", "1", "true"})
_PLUGIN_LOADER = "pydantic.plugin._loader"


def skip_plugin_loader() -> None:
    """With plugins off, pydantic's loader finds none, but its module imports importlib.metadata
    (email, zipfile, csv, ...: 56 M instructions, 5% of the first plan) before it reads the
    setting. Its one function pydantic calls (`get_plugins`, pydantic/plugin/_schema_validator.py)
    is given here instead, answering as the real one does with plugins off: none. Any other name
    loads the real module. Nothing changes once pydantic has loaded it."""
    if _PLUGIN_LOADER in sys.modules:
        return
    loader = types.ModuleType(_PLUGIN_LOADER, "pydantic's plugin loader, with plugins off")

    def get_plugins() -> tuple[()]:
        return ()

    def __getattr__(name: str) -> object:  # noqa: N807  the module's own attribute hook
        if name.startswith("__"):  # what the import system asks of a module (__path__, ...)
            raise AttributeError(name)
        return getattr(_real_plugin_loader(), name)

    loader.get_plugins = get_plugins  # type: ignore[attr-defined]
    loader.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules[_PLUGIN_LOADER] = loader


@functools.cache
def _real_plugin_loader() -> types.ModuleType:
    """pydantic's own plugin loader module, loaded once beside the stand-in."""
    import importlib.util
    from importlib.machinery import PathFinder

    import pydantic.plugin

    spec = PathFinder.find_spec(_PLUGIN_LOADER, pydantic.plugin.__path__)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot find {_PLUGIN_LOADER}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ends_without_finalisation(argv: Sequence[str]) -> bool:
    """True for the commands whose process may end at os._exit once their answer is flushed and
    the exit functions ran (meshplan/__main__.py): plan and evaluate, which leave no thread,
    child process or open file behind."""
    return _chosen(argv) in LOAD_THEN_RUN


def imports_done() -> None:
    """The command's modules are loaded: what they made is frozen out of the collector's
    passes (gc.freeze), and the collector runs again (paused by start_process)."""
    global _collector_paused
    if _collector_paused:
        _collector_paused = False
        gc.freeze()
        gc.enable()


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the exit status is one of EXIT_CODES."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if _chosen(args_list) != "serve":
        # gRPC's own log lines off before it loads (a failed TLS handshake prints a raw one);
        # the command's one line says what happened. GRPC_VERBOSITY set by the user wins.
        os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    try:
        try:
            args = build_parser(_chosen(args_list)).parse_args(args_list)
        except SystemExit as e:  # --help, --version, or a bad flag (argparse said why)
            sys.stdout.flush()
            return e.code if isinstance(e.code, int) else EXIT_BAD_INPUT
        except Exception as e:  # noqa: BLE001  e.g. a command module that fails to import
            print(f"meshplan: {describe_error(e)[1]}", file=sys.stderr)
            return EXIT_ERROR
        status = _run(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below
        return status
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except KeyboardInterrupt as e:
        if type(e).__name__ == "Terminated":  # tools/cli/interrupt.py: SIGTERM
            print("meshplan: terminated", file=sys.stderr)
            return EXIT_TERMINATED
        print("meshplan: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _run(args: argparse.Namespace) -> int:
    """The command, with every error it raises turned into one line on stderr and its status."""
    if args.cmd not in LOAD_THEN_RUN:
        imports_done()
    try:
        return args.fn(args)
    except (BrokenPipeError, KeyboardInterrupt):
        raise
    except Exception as e:  # noqa: BLE001  one line and a status, never a traceback
        status, line = describe_error(e, getattr(args, "origins", None))
        print(f"meshplan {args.cmd}: {line}", file=sys.stderr)
        return status


def describe_error(e: Exception, flags: Mapping[str, str] | None = None) -> tuple[int, str]:
    """The exit status and the one line for an error a command raised; `flags` maps the request
    fields the flags set to the flags, so the line names the flag the user typed."""
    from meshplan.tools.cli.messages import one_line, shorten

    code = getattr(getattr(e, "code", None), "name", None)  # a client error's gRPC status
    if code is not None:
        said = getattr(e, "message", None) or str(e)
        if code == "INVALID_ARGUMENT":
            from meshplan.tools.cli.messages import name_flag

            fields = "; ".join(
                f"{name_flag(v.field, flags)}: {v.description}"
                for v in getattr(e, "violations", ())
            )
            return EXIT_BAD_INPUT, shorten(f"the server refused the request: {fields or said}")
        return EXIT_ERROR, shorten(f"the server call failed ({code}): {said}")
    if isinstance(e, ModuleNotFoundError) and (e.name or "").split(".")[0] in _PLANNER:
        return EXIT_ERROR, (
            f"this command needs the planner ({e.name} is not installed): pip install meshplan"
        )
    if isinstance(e, TimeoutError):  # an OSError, but not a bad input
        return EXIT_ERROR, shorten(f"{e}; give the solver more time (--time-limit)")
    if isinstance(e, ValueError | KeyError | OSError):  # pydantic's ValidationError is one too
        return EXIT_BAD_INPUT, one_line(e, flags)
    if isinstance(e, RecursionError):
        return EXIT_BAD_INPUT, "invalid request: nested too deeply"
    return EXIT_ERROR, shorten(f"internal error: {type(e).__name__}: {e}")


# What the planner (`pip install meshplan`) adds to the client's install (packaging/client).
_PLANNER = frozenset(
    {"ortools", "numpy", "matplotlib", "pydantic_settings", "prometheus_client", "tomli_w", "rich"}
)


def _quiet_broken_pipe() -> int:
    """The reader went away (`meshplan catalog | head -2`): stop quietly. stdout is pointed at
    /dev/null so that the interpreter's last flush at exit has nowhere to fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (e.g. captured in a test)
        pass
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
