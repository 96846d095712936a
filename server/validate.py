"""Bad requests -> google.rpc.BadRequest field violations with proto field paths.

Three sources, one shape: pydantic's ValidationError (loc paths), the solver's ValueError or
KeyError (a message that names the field, or a KeyError carrying the unknown name), and a proto
that json_format cannot read. Each violation names the field path and its value.
"""

from __future__ import annotations

import re
import types
import typing
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from pydantic import BaseModel, ValidationError

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_PREFIXES = ("Value error, ", "Assertion failed, ")
ECHO_CHARS = 80  # longest piece of a caller's value echoed back in an error
DESCRIPTION_CHARS = 300  # longest description of one violation
MESSAGE_CHARS = 1000  # longest status message (trailers must stay well under 8 KiB)
MAX_VIOLATIONS = 8  # field violations sent in one status


def shorten(text: str, limit: int = ECHO_CHARS) -> str:
    """`text` cut to `limit` characters, saying how long it was: errors echo values truncated."""
    if len(text) <= limit:
        return text
    return f"{text[: max(limit - 24, 8)]}... ({len(text):,} characters)"


def echo(value: Any) -> str:
    """A caller's value as an error shows it: its repr, truncated (a long string is cut before
    it is quoted, so no copy of it is made)."""
    if isinstance(value, str | bytes) and len(value) > ECHO_CHARS:
        return f"{value[: ECHO_CHARS - 24]!r}... ({len(value):,} characters)"
    return shorten(repr(value))


@dataclass(frozen=True)
class Violation:
    """One bad field: its dotted proto path (e.g. model.num_layers) and what is wrong."""

    field: str
    description: str


def _path(loc: typing.Iterable[str | int]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _clean(msg: str) -> str:
    for prefix in _PREFIXES:
        if msg.startswith(prefix):
            return msg[len(prefix) :]
    return msg


def _first_named(message: str, names: typing.Iterable[str]) -> str | None:
    """The name among `names` that `message` mentions first (whole identifiers only)."""
    known = set(names)
    for match in _IDENT.finditer(message):
        token = match.group(0)
        for candidate in (token, token.split(".")[-1]):
            if candidate in known:
                return candidate
    return None


def from_validation_error(err: ValidationError, prefix: str = "") -> list[Violation]:
    """One violation per pydantic error; a model-level error goes to the first field it names."""
    out: list[Violation] = []
    for e in err.errors(include_url=False):
        loc, msg, value = list(e["loc"]), _clean(e["msg"]), e.get("input")
        if e["type"] == "value_error" and isinstance(value, dict):
            name = _first_named(msg, value)
            if name is not None:  # a rule across fields, e.g. heads vs kv heads
                loc.append(name)
                value = value[name]
            elif not loc:
                value = None
        shown = value is not None and not isinstance(value, dict) and str(value) not in msg
        if e["type"] != "missing" and shown:
            msg = f"{msg} (got {echo(value)})"
        path = _path(loc)
        field = f"{prefix}.{path}" if prefix and path else prefix or path
        out.append(Violation(field, shorten(msg, DESCRIPTION_CHARS)))
    return out


def leaf_paths(model_cls: type[BaseModel]) -> dict[str, str]:
    """Every dotted field path of a request model (path -> path), in declaration order, plus
    each bare field name mapped to the first path that ends in it (name -> path)."""
    paths = {p: p for p in _paths(model_cls, "")}
    for path in list(paths):
        paths.setdefault(path.rsplit(".", 1)[-1], path)
    return paths


def _paths(model_cls: type[BaseModel], prefix: str) -> list[str]:
    out: list[str] = []
    for name, info in model_cls.model_fields.items():
        path = f"{prefix}.{name}" if prefix else name
        out.append(path)
        sub = model_type(info.annotation)
        if sub is not None:
            out.extend(_paths(sub, path))
    return out


def model_type(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (Model, Model | None, list[Model]), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, list):
        for arg in typing.get_args(annotation):
            found = model_type(arg)
            if found is not None:
                return found
    return None


def _value_at(data: dict[str, Any], path: str) -> Any:
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _string_values(data: dict[str, Any], prefix: str = "") -> typing.Iterator[tuple[str, str]]:
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            yield from _string_values(value, path)
        elif isinstance(value, str):
            yield path, value


def _locate(message: str, key: Any, data: dict[str, Any], cls: type[BaseModel]) -> str:
    """The field a solver message is about: the field holding a KeyError's name, then the first
    leaf field the message names, then a field whose value it quotes, then a container."""
    strings = list(_string_values(data))
    found = next((p for p, v in strings if key is not None and v == key), None)
    paths = leaf_paths(cls)
    containers = {p.split(".")[0] for p in paths if "." in p}
    leaves = {k: v for k, v in paths.items() if k not in containers}
    name = _first_named(message, leaves) or _first_named(message.lower(), leaves)
    if found is None and name is not None:
        found = leaves[name]
    for quote in ("'{}'", '"{}"', "{}"):
        found = found or next((p for p, v in strings if quote.format(v) in message), None)
    name = _first_named(message, containers)
    return found or name or ""


def from_solver_error(err: Exception, request: BaseModel, prefix: str = "") -> list[Violation]:
    """The solver's ValueError / KeyError on a valid-looking request, as one violation."""
    data = request.model_dump(mode="json", exclude_none=True)
    arg = err.args[0] if err.args else ""
    message = str(arg) if isinstance(err, KeyError) else str(err)
    path = _locate(message, arg if isinstance(err, KeyError) else None, data, type(request))
    if isinstance(err, KeyError) and path and _value_at(data, path) == arg:
        message = "unknown name"  # the value is appended below
    value = _value_at(data, path) if path else None
    if value is not None and not isinstance(value, dict) and str(value) not in message:
        message = f"{message} (got {echo(value)})"
    full = f"{prefix}.{path}" if prefix and path else prefix or path
    return [Violation(full, shorten(message, DESCRIPTION_CHARS))]


def bad_request_status(violations: list[Violation], message: str = "") -> grpc.Status:
    """INVALID_ARGUMENT carrying a google.rpc.BadRequest with one entry per violation."""
    detail = error_details_pb2.BadRequest(
        field_violations=[
            error_details_pb2.BadRequest.FieldViolation(
                field=v.field, description=shorten(v.description, DESCRIPTION_CHARS)
            )
            for v in violations[:MAX_VIOLATIONS]
        ]
    )
    packed = any_pb2.Any()
    packed.Pack(detail)
    summary = message or "; ".join(f"{v.field}: {v.description}" for v in violations)
    summary = shorten(summary, MESSAGE_CHARS)
    status = status_pb2.Status(
        code=code_pb2.INVALID_ARGUMENT, message=summary or "invalid request", details=[packed]
    )
    return rpc_status.to_status(status)
