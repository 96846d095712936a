"""The two worked integrations in examples/, each run as a script against a live server on
loopback with TLS and a bearer token (the scripts take the CLI's connection flags): a SkyPilot
time estimator and an elastic-training layout table."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from test_grpc_support import running_server

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TOKEN = "examples-token-0123456789"


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    """A server with TLS and a token on loopback, and the connection flags that reach it."""
    tmp = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    leaf = ca.issue_cert("localhost")
    (tmp / "ca.pem").write_bytes(ca.cert_pem.bytes())
    (tmp / "cert.pem").write_bytes(b"".join(b.bytes() for b in leaf.cert_chain_pems))
    (tmp / "key.pem").write_bytes(leaf.private_key_pem.bytes())
    (tmp / "tokens").write_text(TOKEN + "\n")
    settings = {
        "tls_cert": str(tmp / "cert.pem"),
        "tls_key": str(tmp / "key.pem"),
        "auth_token_file": str(tmp / "tokens"),
    }
    with running_server(max_concurrent_solves=2, **settings) as (port, _):
        yield (
            f"localhost:{port}",
            ["--tls-ca", str(tmp / "ca.pem"), "--token-file", str(tmp / "tokens")],
        )


def _run(script: str, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert (out.returncode == 0) == ok, out.stderr
    return out


def _load(script: str):  # noqa: ANN202
    spec = importlib.util.spec_from_file_location(script[:-3], EXAMPLES / script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_skypilot_estimator_answers_seconds_per_candidate(
    target: tuple[str, list[str]],
) -> None:
    server, flags = target
    out = _run("skypilot_time_estimator.py", "--server", server, *flags).stdout
    lines = [json.loads(x) for x in out.splitlines()]
    by = {(x["accelerator"], x["per_node"]): x["seconds"] for x in lines}
    never = _load("skypilot_time_estimator.py").NEVER_S
    for name in ("H100", "A100-80GB"):
        times = [by[(name, k)] for k in (1, 2, 4, 8)]
        assert all(0 < t < never for t in times)
        assert times == sorted(times, reverse=True)  # the envelope: more GPUs never slower
    assert by[("H100", 8)] < by[("A100-80GB", 8)]
    assert by[("TPU-v5", 8)] == never  # not a GPU meshplan knows


def test_the_elastic_table_has_a_layout_per_world_size(
    target: tuple[str, list[str]], tmp_path: Path
) -> None:
    server, flags = target
    out = tmp_path / "layouts.json"
    args = ("--server", server, "--out", str(out), "--nodes-lost", "3")
    _run("elastic_layout_table.py", *args, *flags)
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


def test_an_example_without_the_token_is_refused(target: tuple[str, list[str]]) -> None:
    server, flags = target
    out = _run("elastic_layout_table.py", "--server", server, *flags[:2], ok=False)
    assert "UNAUTHENTICATED" in out.stderr
