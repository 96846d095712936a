"""The thin client: `pip install meshplan` needs neither OR-Tools, numpy, pandas nor matplotlib
(they are the `planner` extra's), and importing the client in a fresh interpreter loads none of
them, nor the server."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("ortools", "numpy", "pandas", "matplotlib")
PROBE = """
import sys
import meshplan.client
from meshplan.client import PlannerClient, AsyncPlannerClient
from meshplan.solver import PlanRequest, PlanResult
from meshplan.solver.scheduler import CurveRequest, CurveResult
client = PlannerClient("127.0.0.1:1")
client.close()
heavy = ("ortools", "numpy", "pandas", "matplotlib", "meshplan.server", "meshplan.tools")
print(" ".join(m for m in heavy if m in sys.modules))
"""


def _name(requirement: str) -> str:
    return requirement.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0]


def test_the_client_install_needs_none_of_the_planner() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = {_name(r).strip().lower() for r in project["dependencies"]}
    assert not base & set(HEAVY), base
    planner = {_name(r).strip().lower() for r in project["optional-dependencies"]["planner"]}
    assert {"ortools", "numpy", "matplotlib"} <= planner


def test_the_client_imports_none_of_the_planner_in_a_fresh_interpreter() -> None:
    run = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    assert run.stdout.strip() == "", f"the client loaded {run.stdout.strip()}"


def test_the_cli_says_which_install_a_planner_command_needs() -> None:
    from meshplan.tools.cli.main import describe_error

    code, line = describe_error(ModuleNotFoundError("No module named 'ortools'", name="ortools"))
    assert code == 1 and "pip install 'meshplan[planner]'" in line
