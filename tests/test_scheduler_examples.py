"""The two worked integrations in examples/, each run as a script against a live server on
loopback: a SkyPilot time estimator and an elastic-training layout table."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_grpc_support import LOOPBACK, running_server

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    with running_server(max_concurrent_solves=2) as (port, _):
        yield f"{LOOPBACK}:{port}"


def _run(script: str, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout


def _load(script: str):  # noqa: ANN202
    spec = importlib.util.spec_from_file_location(script[:-3], EXAMPLES / script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_skypilot_estimator_answers_seconds_per_candidate(target: str) -> None:
    lines = [
        json.loads(x) for x in _run("skypilot_time_estimator.py", "--server", target).splitlines()
    ]
    by = {(x["accelerator"], x["per_node"]): x["seconds"] for x in lines}
    never = _load("skypilot_time_estimator.py").NEVER_S
    for name in ("H100", "A100-80GB"):
        times = [by[(name, k)] for k in (1, 2, 4, 8)]
        assert all(0 < t < never for t in times)
        assert times == sorted(times, reverse=True)  # the envelope: more GPUs never slower
    assert by[("H100", 8)] < by[("A100-80GB", 8)]
    assert by[("TPU-v5", 8)] == never  # not a GPU meshplan knows


def test_the_elastic_table_has_a_layout_per_world_size(target: str, tmp_path: Path) -> None:
    out = tmp_path / "layouts.json"
    _run("elastic_layout_table.py", "--server", target, "--out", str(out), "--nodes-lost", "3")
    table = json.loads(out.read_text())
    sizes = sorted(map(int, table))
    assert sizes[-1] == 64 and set(sizes) <= {40, 48, 56, 64} and len(sizes) >= 2
    for size, row in table.items():
        used = row["tp"] * row["pp"] * row["cp"] * row["dp"]
        assert used == row["num_gpus_used"] <= int(size)
        assert row["tp"] == 2 and row["pp"] == 1  # SAME_MODEL_PARALLEL
        tokens = row["dp"] * row["micro_batch_size"] * row["num_microbatches"] * 4096
        assert tokens == row["global_batch_tokens"] == 4096 * 256  # the global batch kept
    layout_for = _load("elastic_layout_table.py").layout_for
    assert layout_for(table, 64) is table["64"]
    assert layout_for(table, 63) is table[str(max(s for s in sizes if s <= 63))]
    with pytest.raises(LookupError):
        layout_for(table, 8)
