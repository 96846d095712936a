"""The thin client: `pip install meshplan-client` (packaging/client) needs neither OR-Tools,
numpy, pandas nor matplotlib, its wheel holds exactly what `import meshplan.client` loads, and
importing the client in a fresh interpreter loads none of the planner. `pip install meshplan` is
the planner."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "packaging" / "client"
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


def _project(path: Path) -> dict:
    return tomllib.loads((path / "pyproject.toml").read_text())["project"]


def test_the_client_install_needs_none_of_the_planner() -> None:
    client = {_name(r).strip().lower() for r in _project(CLIENT)["dependencies"]}
    assert not client & set(HEAVY), client
    planner = _project(ROOT)
    assert set(_project(CLIENT)["dependencies"]) <= set(planner["dependencies"])  # same bounds
    plain = {_name(r).strip().lower() for r in planner["dependencies"]}
    assert {"ortools", "numpy", "matplotlib"} <= plain  # `pip install meshplan` is the planner
    assert planner["optional-dependencies"]["planner"] == []  # an old name, kept working


def test_the_client_imports_none_of_the_planner_in_a_fresh_interpreter() -> None:
    run = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    assert run.stdout.strip() == "", f"the client loaded {run.stdout.strip()}"


# Run with `python -S`: the wheel's files first, then the environment's packages without its .pth
# files (so not the checkout's editable meshplan). Every meshplan module loaded must come from
# the wheel, a request must go to its proto and back, and the planner must be absent.
INSTALLED = """
import sys
sys.path[:0] = [{site!r}]
sys.path.append({packages!r})
exec({probe!r})
import meshplan
from meshplan.convert import from_proto, to_proto
from meshplan.solver import PlanRequest
from meshplan.v1 import planner_pb2
request = PlanRequest.model_validate(
    {{"model": {{"preset": "llama3-8b"}}, "cluster": {{"num_gpus": 8}}, "training": {{"seq_len": 4096}}}}
)
assert from_proto(to_proto(request, planner_pb2.PlanRequest), PlanRequest) == request
try:
    from meshplan.solver import plan
except ModuleNotFoundError as e:
    assert e.name == "meshplan.solver.planner", e.name
else:
    raise AssertionError("the client wheel carries the planner")
loaded = sorted(
    m.__file__ for n, m in list(sys.modules.items())
    if n.startswith("meshplan") and getattr(m, "__file__", None)
)
print("\\n".join(loaded))
"""


def test_the_client_wheel_holds_exactly_what_the_client_loads(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["-w", str(tmp_path), str(CLIENT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("meshplan_client-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
        shipped = {n for n in z.namelist() if n.endswith(".py")}
    probe = INSTALLED.format(site=str(site), packages=sysconfig.get_paths()["purelib"], probe=PROBE)
    run = subprocess.run(
        [sys.executable, "-S", "-c", probe], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr[-2000:]
    first, *rest = run.stdout.split("\n")
    files = [f for f in rest if f]
    assert first == "", f"the client loaded {first}"
    assert all(f.startswith(str(site)) for f in files), files  # nothing from the checkout
    loaded = {str(Path(f).relative_to(site)) for f in files}
    assert loaded == shipped, (shipped - loaded, loaded - shipped)  # exactly the closure


def test_the_cli_says_which_install_a_planner_command_needs() -> None:
    from meshplan.tools.cli.main import describe_error

    code, line = describe_error(ModuleNotFoundError("No module named 'ortools'", name="ortools"))
    assert code == 1 and "pip install meshplan" in line
