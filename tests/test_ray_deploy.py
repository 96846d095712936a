"""deploy/kuberay: the RayJob of a sweep, validated offline against KubeRay's RayJob CRD
(vendored in deploy/kuberay/crd, with its source and version), strictly; its entrypoint is a
`meshplan sweep --ray` command this CLI accepts; the volume it writes to is the PVC's."""

from __future__ import annotations

import copy
import gzip
import hashlib
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import validate

from meshplan.tools.cli.main import build_parser
from meshplan.tools.sweep.grid import expand_models, parse_gpus

jsonschema = pytest.importorskip("jsonschema")  # with the ray extra (a dependency of Ray)

KUBERAY = Path(__file__).resolve().parent.parent / "deploy" / "kuberay"
CRD = KUBERAY / "crd" / "ray.io_rayjobs.yaml.gz"
CRD_SHA256 = "01a5cf3b17c1769fda44af7e82debcd98722f0c27b9ab84d084681c6649121f5"  # crd/README.md


def _strict(schema: Any) -> Any:
    """The schema with no property besides those listed, wherever properties are listed and
    unknown fields are not kept (the API server's strict field validation)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def _validator() -> Any:
    raw = gzip.decompress(CRD.read_bytes())
    assert hashlib.sha256(raw).hexdigest() == CRD_SHA256  # the file crd/README.md names
    crd = yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # 1.4 MB
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    assert v1["served"] and v1["storage"]
    schema = _strict(v1["schema"]["openAPIV3Schema"])
    return jsonschema.Draft4Validator(schema)  # OpenAPI v3's schema objects are draft 4's


def _job() -> dict[str, Any]:
    return yaml.safe_load((KUBERAY / "rayjob-sweep.yaml").read_text())


def test_the_rayjob_validates_against_the_vendored_crd() -> None:
    check = _validator()
    job = _job()
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    assert not list(check.iter_errors(job)), [e.message for e in check.iter_errors(job)]
    for path, value in (
        (
            (
                "spec",
                "rayClusterSpec",
                "headGroupSpec",
                "template",
                "spec",
                "containers",
                0,
                "imagePullPolicy",
            ),
            3,
        ),  # fmt: skip  a wrong type
        (("spec", "backofLimit"), 3),  # a misspelt field
        (
            (
                "spec",
                "rayClusterSpec",
                "workerGroupSpecs",
                0,
                "template",
                "spec",
                "containers",
                0,
                "resource",
            ),
            {},
        ),  # fmt: skip
    ):
        broken = copy.deepcopy(job)
        node = broken
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        assert list(check.iter_errors(broken)), path


def test_the_entrypoint_is_a_sweep_on_ray_writing_to_the_volume() -> None:
    job = _job()
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[:2] == ["meshplan", "sweep"]
    a = build_parser("sweep").parse_args(argv[1:])
    assert a.ray == ""  # --ray without an address: RAY_ADDRESS, set by `ray job submit`
    assert all(m.error is None for m in expand_models(a.models)) and parse_gpus(a.gpus)
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    (mount,) = head["containers"][0]["volumeMounts"]
    assert a.out.startswith(mount["mountPath"] + "/")
    (volume,) = [v for v in head["volumes"] if v["name"] == mount["name"]]
    pvc = yaml.safe_load((KUBERAY / "pvc.yaml").read_text())
    assert volume["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    validate(pvc, "1.29", strict=True)
    images = {
        c["image"]
        for group in (
            head,
            *(g["template"]["spec"] for g in job["spec"]["rayClusterSpec"]["workerGroupSpecs"]),
        )  # fmt: skip
        for c in group["containers"]
    }
    assert len(images) == 1  # the driver's Ray and meshplan are the workers'


def test_the_clusters_ray_is_the_extras() -> None:
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    version = _job()["spec"]["rayClusterSpec"]["rayVersion"]
    (ray,) = [Requirement(r) for r in requires("meshplan") or [] if r.startswith("ray")]
    assert ray.marker is not None and "ray" in str(ray.marker)  # the extra, not a dependency
    assert ray.specifier.contains(version), (version, str(ray.specifier))
