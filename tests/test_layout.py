"""The package layout: one import namespace, a core that imports none of the tools, no cycles."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Repository folder -> the installed package it becomes (pyproject.toml's package-dir).
FOLDERS = {
    "solver": "meshplan.solver",
    "server": "meshplan.server",
    "client": "meshplan.client",
    "tools": "meshplan.tools",
}


def _module(path: Path) -> str:
    folder, *rest = path.relative_to(ROOT).with_suffix("").parts
    name = ".".join([FOLDERS[folder], *rest])
    return name.removesuffix(".__init__")


def _imports(path: Path, module: str) -> set[str]:
    """Every meshplan module a file imports, at any depth (lazy imports count too)."""
    out: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in out if m.startswith("meshplan.")}


def _graph() -> dict[str, set[str]]:
    files = [p for f in FOLDERS for p in (ROOT / f).rglob("*.py")]
    modules = {_module(p): p for p in files}
    graph = {}
    for name, path in modules.items():
        deps = set()
        for imp in _imports(path, name):
            while imp and imp not in modules:  # `from pkg import name`: name may be an attribute
                imp = imp.rpartition(".")[0]
            if imp and imp != name:
                deps.add(imp)
        graph[name] = deps
    return graph


def test_the_core_imports_no_server_client_or_tool() -> None:
    graph = _graph()
    bad = {
        (m, d)
        for m, deps in graph.items()
        if m.startswith("meshplan.solver")
        for d in deps
        if not d.startswith(("meshplan.solver", "meshplan.v1"))
    }
    assert not bad, f"the core imports outside itself: {sorted(bad)}"


def test_the_server_and_client_import_no_tool() -> None:
    graph = _graph()
    bad = {
        (m, d)
        for m, deps in graph.items()
        if m.startswith(("meshplan.server", "meshplan.client"))
        for d in deps
        if d.startswith("meshplan.tools")
    }
    assert not bad, f"the service imports the tools: {sorted(bad)}"


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (a list of modules, first = last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            # A package's __init__ importing its own submodules is not a cycle of design.
            if d.startswith(m + "."):
                continue
            if state.get(d) == 1:
                return stack[stack.index(d) :] + [d]
            if d not in state and (found := visit(d)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_cycles() -> None:
    assert _cycle(_graph()) is None, f"import cycle: {' -> '.join(_cycle(_graph()) or [])}"


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_wheel_has_one_top_level_name(tmp_path: Path) -> None:
    """`pip install` adds only `meshplan` (and its dist-info) to site-packages."""
    src = tmp_path / "src"  # a copy, so the in-tree build leaves the checkout clean
    junk = (".venv", ".git", "build", "*.egg-info", ".hypothesis", "__pycache__", "*.png")
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*junk))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(src)],
        check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "absent from the `packages` configuration" not in built.stderr  # every folder listed
    (wheel,) = tmp_path.glob("meshplan-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"meshplan"}
    for want in (
        "meshplan/solver/planner.py",
        "meshplan/solver/catalog/models.json",
        "meshplan/solver/costmodel/fitted.json",
        "meshplan/server/app.py",
        "meshplan/client/sync.py",
        "meshplan/tools/cli/main.py",
        "meshplan/tools/calibration/published/kempnerforge_runs.json",
        "meshplan/tools/calibration/published/published_runs.json",  # what `calibrate` refits to
        "meshplan/tools/calibration/published/megatron_h100_runs.json",
        "meshplan/tools/calibration/published/moezoo_dropless.json",
        "meshplan/v1/planner_pb2.py",
        "meshplan/__main__.py",
        "meshplan/py.typed",  # PEP 561: the package's type hints are for its users too
    ):
        assert want in names, want
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in meta


def test_python_dash_m_meshplan_answers() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "meshplan", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and "plan" in out.stdout
