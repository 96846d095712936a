"""Layouts bounded before any work: a parallel degree of a given layout (an Evaluate's or a
Replan's config, an observation's) beyond the most GPUs a cluster may hold is INVALID_ARGUMENT
naming the field, so no valid request makes a solver process allocate or loop in proportion to
it (an Evaluate of nanotron's cost-balanced stages with `config.pp` 2^31-1 built a list of 2^31
stage counts, in native code that neither heeds a stop nor answers a ping)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from meshplan.server.requests import bad
from meshplan.solver.schema import ClusterSpec, ParallelConfig

# A rank of each degree is a GPU: none can exceed the largest cluster a request may describe.
MAX_GPUS: int = next(
    m.le for m in ClusterSpec.model_fields["num_gpus"].metadata if getattr(m, "le", None)
)
DEGREES = ("tp", "pp", "dp", "cp", "ep", "etp")


def check_layouts(req: BaseModel, prefix: str = "") -> None:
    """INVALID_ARGUMENT for the first ParallelConfig in `req` (at any depth, in lists too) with
    a degree over MAX_GPUS."""
    for path, config in _configs(req, prefix):
        for name in DEGREES:
            value = getattr(config, name, None)
            if isinstance(value, int) and value > MAX_GPUS:
                where = f"{path}.{name}" if path else name
                bad(
                    where,
                    f"is {value:,}, more than the {MAX_GPUS:,} GPUs a cluster may hold "
                    "(cluster.num_gpus's bound): each of its ranks needs a GPU of its own",
                )


def _configs(value: Any, path: str) -> list[tuple[str, ParallelConfig]]:
    if isinstance(value, ParallelConfig):
        return [(path, value)]
    out: list[tuple[str, ParallelConfig]] = []
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            if _may_hold(type(value), name):
                out += _configs(getattr(value, name), f"{path}.{name}" if path else name)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            if not isinstance(item, BaseModel):
                break  # a list of numbers or names
            out += _configs(item, f"{path}[{i}]")
    return out


_HOLDS: dict[tuple[type, str], bool] = {}


def _may_hold(cls: type[BaseModel], name: str) -> bool:
    """Whether field `name` of `cls` can hold a ParallelConfig (its annotation names one, or a
    model that does): remembered per field, so a 16,000-observation query walks only its
    configs."""
    key = (cls, name)
    if key not in _HOLDS:
        _HOLDS[key] = False  # a model that refers to itself holds none through that field
        _HOLDS[key] = _annotation_holds(cls.model_fields[name].annotation, set())
    return _HOLDS[key]


def _annotation_holds(annotation: Any, seen: set[type]) -> bool:
    if annotation is ParallelConfig:
        return True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in seen:
            return False
        seen.add(annotation)
        return any(_annotation_holds(f.annotation, seen) for f in annotation.model_fields.values())
    return any(_annotation_holds(arg, seen) for arg in getattr(annotation, "__args__", ()) or ())
