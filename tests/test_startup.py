"""The command line's start: what `meshplan plan` loads as its own process, the settings it makes
before numpy and pydantic load, and the one subparser it builds."""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from benchmarks.startup import FIRST_PLAN
from meshplan.tools.cli import main as cli

ONE_THREAD = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
SETTINGS = (*ONE_THREAD, "PYDANTIC_DISABLE_PLUGINS")


def _imported(stderr: str) -> set[str]:
    """The modules `python -X importtime` reported loading."""
    lines = (line.split("|") for line in stderr.splitlines() if line.startswith("import time:"))
    return {parts[2].strip() for parts in lines if len(parts) == 3}


def test_the_first_plan_as_a_process_loads_no_cp_sat_model_and_answers() -> None:
    """`meshplan plan` (the README's first plan), run as the console script runs it: the bounds
    settle the answer, so neither OR-Tools nor pandas loads (nor gRPC, matplotlib, numpy.ma),
    and the answer is the one the solver proves."""
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS}
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "meshplan", *FIRST_PLAN],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert re.search(r"OPTIMAL\ntp=\d+ pp=\d+ dp=\d+", run.stdout), run.stdout
    assert "no CP-SAT model" in run.stdout, run.stdout
    loaded = _imported(run.stderr)
    assert "meshplan.solver.planner" in loaded and "numpy" in loaded  # the probe sees imports
    heavy = {m for m in loaded if m.split(".")[0] in {"ortools", "pandas", "matplotlib", "grpc"}}
    assert not heavy, sorted(heavy)
    assert "numpy.ma" not in loaded
    assert "meshplan.solver.cpsat.build" not in loaded  # the CP-SAT model builder
    # pydantic's plugin loader (plugins off) would bring these in
    assert not {"importlib.metadata", "email", "csv"} & loaded


def test_version_is_the_installed_metadata() -> None:
    from importlib.metadata import version

    out = subprocess.run(
        [sys.executable, "-m", "meshplan", "--version"], capture_output=True, text=True, timeout=60
    )
    assert (out.returncode, out.stdout) == (0, f"meshplan {version('meshplan')}\n")


_PLUGIN_PROBE = """
import sys
from meshplan.tools.cli.main import start_process
start_process(["plan"])
from pydantic import BaseModel
class M(BaseModel):
    x: int
M(x=1)
loader = sys.modules["pydantic.plugin._loader"]
print(getattr(loader, "__file__", None) is None, list(loader.get_plugins()),
      loader.PYDANTIC_ENTRY_POINT_GROUP, "importlib.metadata" in sys.modules)
"""


@pytest.mark.parametrize(
    ("setting", "expected"),
    [("__all__", "True [] pydantic True"), ("", "False [] pydantic True")],
)
def test_the_plugin_loaders_stand_in_answers_as_pydantics_own(setting: str, expected: str) -> None:
    """Plugins off: the stand-in (no file) says there are none, and any other name comes from
    pydantic's own module (which then, and only then, imports importlib.metadata); plugins on
    (PYDANTIC_DISABLE_PLUGINS empty): pydantic's own loader from the start."""
    env = {**os.environ, "PYDANTIC_DISABLE_PLUGINS": setting}
    run = subprocess.run(
        [sys.executable, "-c", _PLUGIN_PROBE],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    )
    assert run.stdout.strip() == expected, run.stderr


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The settings absent; whatever start_process sets is undone after the test (monkeypatch
    restores each variable it deleted, and deletes one that was absent)."""
    for key in SETTINGS:
        monkeypatch.delenv(key, raising=False)
    yield
    gc.enable()


@pytest.mark.usefixtures("clean_environment")
def test_a_plan_starts_with_one_blas_thread_no_plugins_and_the_collector_paused() -> None:
    cli.start_process(["plan", "--model", "llama3-8b"])
    try:
        assert all(os.environ[k] == "1" for k in ONE_THREAD)
        assert os.environ["PYDANTIC_DISABLE_PLUGINS"] == "__all__"
        assert not gc.isenabled()
    finally:
        cli.imports_done()
    assert gc.isenabled()
    gc.disable()
    cli.imports_done()  # once only: a collector the caller turned off stays off
    assert not gc.isenabled()


@pytest.mark.usefixtures("clean_environment")
def test_the_users_settings_win_and_the_server_keeps_its_own() -> None:
    os.environ["OPENBLAS_NUM_THREADS"] = "4"
    os.environ["PYDANTIC_DISABLE_PLUGINS"] = ""  # plugins on
    cli.start_process(["catalog"])
    assert os.environ["OPENBLAS_NUM_THREADS"] == "4"
    assert os.environ["PYDANTIC_DISABLE_PLUGINS"] == ""
    assert gc.isenabled()  # only plan and evaluate load the solver before they run
    for key in SETTINGS:
        os.environ.pop(key, None)
    cli.start_process(["serve", "--port", "0"])
    assert not any(key in os.environ for key in SETTINGS)


def test_a_chosen_command_gets_the_only_subparser(capsys: pytest.CaptureFixture[str]) -> None:
    def commands(parser: object) -> list[str]:
        (sub,) = [a for a in parser._actions if a.dest == "cmd"]  # type: ignore[attr-defined]
        return list(sub.choices)

    assert commands(cli.build_parser("plan")) == ["plan"]
    assert commands(cli.build_parser(None)) == [c.name for c in cli.COMMANDS]
    assert cli.main(["plna", "--gpus", "8"]) == cli.EXIT_BAD_INPUT  # unknown: every choice
    err = capsys.readouterr().err
    assert "invalid choice: 'plna'" in err and "'evaluate'" in err


_BLAS_PROBE = """
import os, sys
from meshplan.solver import blas
for key in blas.ONE_THREAD_VARIABLES:
    os.environ[key] = "1"
if sys.argv[1] == "late":
    import numpy
print(blas.started_on_one_thread())
import numpy
from threadpoolctl import threadpool_info
with blas.one_blas_thread():
    print([x["num_threads"] for x in threadpool_info() if x["user_api"] == "blas"])
"""


@pytest.mark.parametrize(
    ("when", "first", "threads"), [("early", "True", "[1]"), ("late", "False", "[1]")]
)
def test_blas_set_to_one_thread_before_numpy_loads_needs_no_limit(
    when: str, first: str, threads: str
) -> None:
    """Set before numpy loads, the variables start BLAS on one thread and one_blas_thread has
    nothing to do; set after, they do not count, and one_blas_thread limits the pool itself."""
    env = {k: v for k, v in os.environ.items() if k not in ONE_THREAD}
    run = subprocess.run(
        [sys.executable, "-c", _BLAS_PROBE, when],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    )
    assert run.stdout.split("\n")[:2] == [first, threads], run.stdout


@pytest.mark.parametrize("extra", [(), ("--top-k", "2")])
def test_the_plan_answer_made_without_validation_is_what_validation_makes(
    extra: tuple[str, ...],
) -> None:
    """planner.plan makes its PlanResult with model_construct: validating what it holds gives
    the same answer, field by field and as JSON (with alternatives too)."""
    from meshplan.solver.planner import plan
    from meshplan.solver.results import PlanResult
    from meshplan.solver.schema import PlanRequest
    from meshplan.tools.cli.inputs import request_from_flags

    args = cli.build_parser("plan").parse_args([*FIRST_PLAN, *extra])
    res = plan(PlanRequest.model_validate(request_from_flags(args, evaluate=False)))
    assert res.config is not None and len(res.alternatives) == (2 if extra else 0)
    again = PlanResult.model_validate(res.model_dump())
    assert again == res
    assert again.model_dump_json() == res.model_dump_json()
