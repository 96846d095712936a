"""Shared helpers: small requests built from plain dicts, an H100 search space, and the `pki` fixture (certificates
made for each test by trustme, for the TLS tests of the gRPC and the HTTP ports)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from meshplan.solver import EvaluateRequest, PlanRequest
from meshplan.solver.planner import _resolve
from meshplan.solver.space import Space


def plan_req(**kw: object) -> PlanRequest:
    return PlanRequest.model_validate(kw)


def eval_req(**kw: object) -> EvaluateRequest:
    return EvaluateRequest.model_validate(kw)


def h100_space(model: str, n: int, seq: int, search: dict) -> Space:
    """The unpruned search space of a preset model on n H100s at this sequence length."""
    req = plan_req(
        model={"preset": model},
        cluster={"gpu": "h100-sxm-80gb", "num_gpus": n},
        training={"seq_len": seq},
        search=search,
    )
    A, H, cm = _resolve(req)
    return Space.build(A, H, req.training, req.search, cm, prune=False)


@dataclass
class Pki:
    """A CA, a server certificate for localhost/127.0.0.1, a client certificate, and a second
    CA that signed neither, all as files."""

    ca: Path
    cert: Path
    key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    other_client_cert: Path
    other_client_key: Path
    authority: trustme.CA


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _leaf(ca: trustme.CA, tmp: Path, name: str, *ids: str) -> tuple[Path, Path]:
    leaf = ca.issue_cert(*ids)
    chain = b"".join(b.bytes() for b in leaf.cert_chain_pems)
    return _write(tmp / f"{name}.pem", chain), _write(
        tmp / f"{name}.key", leaf.private_key_pem.bytes()
    )


@pytest.fixture()
def pki(tmp_path: Path) -> Pki:
    ca, other = trustme.CA(), trustme.CA()
    cert, key = _leaf(ca, tmp_path, "server", "localhost", "127.0.0.1")
    client_cert, client_key = _leaf(ca, tmp_path, "client", "client.example")
    other_cert, other_key = _leaf(other, tmp_path, "intruder", "client.example")
    return Pki(
        ca=_write(tmp_path / "ca.pem", ca.cert_pem.bytes()),
        cert=cert,
        key=key,
        client_cert=client_cert,
        client_key=client_key,
        other_ca=_write(tmp_path / "other-ca.pem", other.cert_pem.bytes()),
        other_client_cert=other_cert,
        other_client_key=other_key,
        authority=ca,
    )
