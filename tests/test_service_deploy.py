"""Packaging for operators: the Kubernetes manifests against the API's schemas (offline, with
kubernetes-validate's vendored schemas) and against each other and the server's settings; the
Dockerfile read instruction by instruction; the health probe; the image built if a container
engine is there."""

from __future__ import annotations

import copy
import fnmatch
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import ValidationError, validate
from test_grpc_support import LOOPBACK, running_server, small_request

from meshplan.server.probe import main as probe
from meshplan.server.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSIONS = ("1.29", "1.37")  # native gRPC probes are GA from 1.27


def _docs() -> dict[str, list[dict[str, Any]]]:
    return {
        p.name: [d for d in yaml.safe_load_all(p.read_text()) if d]
        for p in sorted(K8S.glob("*.yaml"))
        if p.name != "kustomization.yaml"
    }


def _by_kind() -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for docs in _docs().values():
        for d in docs:
            out.setdefault(d["kind"], []).append(d)
    return out


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_manifests_validate_against_the_kubernetes_schemas(version: str) -> None:
    docs = _docs()
    assert set(docs) == {"deployment.yaml", "service.yaml", "pdb.yaml", "hpa.yaml"}
    for resources in docs.values():
        for resource in resources:  # strict: an unknown or misspelt field is an error
            validate(resource, version, strict=True)
    broken = copy.deepcopy(docs["deployment.yaml"][0])
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {"grpc": {"port": 1}}
    with pytest.raises(ValidationError):
        validate(broken, version, strict=True)


def test_kustomization_lists_the_manifests() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == ["deployment.yaml", "pdb.yaml", "service.yaml"]


def test_manifests_agree_with_each_other_and_with_the_server() -> None:
    kinds = _by_kind()
    (deployment,) = kinds["Deployment"]
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    fields = {f"MESHPLAN_{n.upper()}": n for n in Settings.model_fields}
    assert set(env) <= set(fields), set(env) - set(fields)
    settings = Settings(**{fields[k]: v for k, v in env.items()})  # valid settings, as typed
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {
        "grpc": settings.port,
        "health": settings.health_port,
        "http": settings.http_port,
        "metrics": settings.metrics_port,
    }
    for probe_name in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe_name]["grpc"]["port"] == settings.health_port, probe_name
    assert container["readinessProbe"]["grpc"]["service"] == "meshplan.v1.Planner"
    assert pod["spec"]["terminationGracePeriodSeconds"] > settings.grace_period_s
    requests, limits = container["resources"]["requests"], container["resources"]["limits"]
    assert {"cpu", "memory"} <= requests.keys() and {"cpu", "memory"} <= limits.keys()
    assert settings.max_concurrent_solves <= int(requests["cpu"])  # a solver slot per CPU
    assert settings.solver_processes == int(limits["cpu"])  # a solver process per CPU
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    secrets = {
        v["name"]: v["secret"]["secretName"] for v in pod["spec"]["volumes"] if "secret" in v
    }
    assert secrets == {"tls": "meshplan-tls", "tokens": "meshplan-tokens"}
    assert (
        settings.tls_cert == f"{mounts['tls']}/tls.crt"
        and settings.tls_key == f"{mounts['tls']}/tls.key"
    )
    assert settings.auth_token_file == f"{mounts['tokens']}/tokens"
    security = pod["spec"]["securityContext"]
    assert security["runAsNonRoot"] and security["runAsUser"] == _dockerfile_uid()
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    services = {s["metadata"]["name"]: s["spec"] for s in kinds["Service"]}
    assert services["meshplan-headless"]["clusterIP"] == "None"
    for spec in services.values():
        assert spec["selector"].items() <= labels.items()
        assert all(p["targetPort"] in ports for p in spec["ports"])
    assert any(p["targetPort"] == "http" for p in services["meshplan"]["ports"])
    (pdb,) = kinds["PodDisruptionBudget"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (hpa,) = kinds["HorizontalPodAutoscaler"]
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert hpa["spec"]["minReplicas"] >= 2  # with the PDB, a drain never takes the last one


# --- the Dockerfile ---------------------------------------------------------------------------


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = (ROOT / "Dockerfile").read_text()
    joined, out = "", []
    for line in text.splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        joined += line.rstrip("\\").strip() + " "
        if not line.rstrip().endswith("\\"):
            word, _, rest = joined.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            joined = ""
    return out


def _dockerfile_uid() -> int:
    final = _final_stage()
    (user,) = [rest for word, rest in final if word == "USER"]
    return int(user.split(":")[0])


def _final_stage() -> list[tuple[str, str]]:
    instructions = _instructions()
    starts = [i for i, (word, _) in enumerate(instructions) if word == "FROM"]
    return instructions[starts[-1] :]


def _ignored(path: str) -> bool:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return any(fnmatch.fnmatch(path, p) or path.startswith(p.rstrip("/") + "/") for p in patterns)


def test_dockerfile_is_multi_stage_slim_non_root_with_a_health_probe() -> None:
    instructions = _instructions()
    args = {
        rest.split("=")[0]: rest.split("=", 1)[1] for word, rest in instructions if word == "ARG"
    }
    stages = [rest for word, rest in instructions if word == "FROM"]
    assert len(stages) >= 2 and stages[0].endswith(" AS build")
    assert "slim" in args["PYTHON_IMAGE"]
    final = _final_stage()
    assert _dockerfile_uid() != 0
    assert any(word == "COPY" and rest.startswith("--from=build") for word, rest in final)
    (check,) = [rest for word, rest in final if word == "HEALTHCHECK"]
    assert '"-m", "meshplan.server.probe"' in check
    (entry,) = [rest for word, rest in final if word == "ENTRYPOINT"]
    assert entry == '["meshplan", "serve"]'
    env: dict[str, str] = {}
    for word, rest in final:
        if word == "ENV":
            env |= dict(item.split("=", 1) for item in rest.split())
    fields = {f"MESHPLAN_{n.upper()}": n for n in Settings.model_fields}
    settings = Settings(**{fields[k]: v for k, v in env.items() if k.startswith("MESHPLAN_")})
    assert settings.host == "0.0.0.0"
    (exposed,) = [rest for word, rest in final if word == "EXPOSE"]
    assert {int(p) for p in exposed.split()} == {
        settings.port,
        settings.health_port,
        settings.http_port,
        settings.metrics_port,
    }


def test_dockerfile_copies_only_what_exists_and_is_not_ignored() -> None:
    for word, rest in _instructions():
        if word != "COPY" or rest.startswith("--from="):
            continue
        *sources, _ = rest.split()
        for source in sources:
            assert (ROOT / source).exists(), source
            assert not _ignored(source), f"{source} is excluded by .dockerignore"
    for needed in ("solver/catalog/models.json", "solver/costmodel/fitted.json", "server/probe.py"):
        assert not _ignored(needed)
    assert _ignored("tests/test_layout.py") and _ignored(".venv/bin/python")


# --- the probe, and the image -----------------------------------------------------------------


def test_the_probe_says_serving_then_not(capsys: pytest.CaptureFixture[str]) -> None:
    with running_server(health_port=0) as (port, server):
        assert server.health_port
        assert probe(["--address", f"{LOOPBACK}:{server.health_port}"]) == 0
        assert probe(["--address", f"{LOOPBACK}:{port}", "--service", "meshplan.v1.Planner"]) == 0
        server._call(server._drain(0.1))  # NOT_SERVING, as during a SIGTERM drain
        assert probe(["--address", f"{LOOPBACK}:{server.health_port}"]) == 1
    assert probe(["--address", f"{LOOPBACK}:1", "--timeout", "0.5"]) == 1
    assert "NOT_SERVING" in capsys.readouterr().err


def _engine() -> str | None:
    docker = shutil.which("docker")
    if docker is None:
        return None
    ok = subprocess.run([docker, "info"], capture_output=True, timeout=30).returncode == 0
    return docker if ok else None


@pytest.mark.skipif(_engine() is None, reason="no container engine (docker) on this machine")
def test_the_image_builds_starts_and_answers_plan() -> None:
    docker = _engine()
    assert docker is not None
    tag = "meshplan:test"
    subprocess.run([docker, "build", "-t", tag, str(ROOT)], check=True, timeout=1800)
    started = subprocess.run(
        [docker, "run", "-d", "--rm", "-p", "127.0.0.1::50051", tag],
        check=True,
        capture_output=True,
        text=True,
    )
    container = started.stdout.strip()
    try:
        mapped = subprocess.run(
            [docker, "port", container, "50051"], check=True, capture_output=True, text=True
        ).stdout.split()[0]
        from meshplan.client import PlannerClient

        deadline = time.monotonic() + 60
        with PlannerClient(mapped) as client:
            while True:
                try:
                    assert client.health(timeout=2) == "SERVING"
                    break
                except Exception:
                    assert time.monotonic() < deadline, "the container did not start"
                    time.sleep(1)
            assert client.plan(small_request(time_limit_s=10), timeout=60).config is not None
    finally:
        subprocess.run([docker, "stop", container], capture_output=True, timeout=60)


def test_every_setting_is_documented() -> None:
    """The settings table moved from the README to docs/settings.md, which the README links."""
    page = (ROOT / "docs" / "settings.md").read_text()
    assert "docs/settings.md" in (ROOT / "README.md").read_text()
    for name in Settings.model_fields:
        assert f"`MESHPLAN_{name.upper()}`" in page, name
        assert f"`--{name.replace('_', '-')}`" in page, name
