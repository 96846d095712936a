"""JSON <-> proto for the HTTP port: the protos' JSON mapping (google.protobuf.json_format).

Requests take the field names of the .proto (snake_case, as `--request FILE` does) or their
lowerCamelCase JSON names, and an enum either by its proto name (`PRECISION_BF16`) or by the
short name a `--request` file uses (`BF16`). A field that does not exist or a value of the wrong
kind is refused with its dotted path, before anything is converted; answers are the mapping
with snake_case names, enum names, 64-bit integers as strings, and fields at their defaults
written out (so a zero reads as zero, not as a missing key).
"""

from __future__ import annotations

import json
import math
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from meshplan.convert import enum_prefix
from meshplan.server.validate import echo

F = FieldDescriptor
_INT_RANGE = {
    F.TYPE_INT32: (-(2**31), 2**31 - 1),
    F.TYPE_SINT32: (-(2**31), 2**31 - 1),
    F.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    F.TYPE_UINT32: (0, 2**32 - 1),
    F.TYPE_FIXED32: (0, 2**32 - 1),
    F.TYPE_INT64: (-(2**63), 2**63 - 1),
    F.TYPE_SINT64: (-(2**63), 2**63 - 1),
    F.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    F.TYPE_UINT64: (0, 2**64 - 1),
    F.TYPE_FIXED64: (0, 2**64 - 1),
}
_FLOATS = {F.TYPE_DOUBLE, F.TYPE_FLOAT}
_SPECIAL_FLOATS = {"NaN", "Infinity", "-Infinity"}
MAX_DEPTH = 32  # nesting a request may have (the protos nest at most 5 deep)


class JsonProblem(ValueError):
    """A JSON body that is not the message: `field` is the dotted path (or "request")."""

    def __init__(self, field: str, description: str) -> None:
        super().__init__(f"{field}: {description}")
        self.field = field
        self.description = description


def message_from_json(body: bytes, message_cls: type[Message]) -> Message:
    """The request message a JSON body spells (an empty body is the empty message)."""
    name = message_cls.DESCRIPTOR.full_name
    if not body.strip():
        return message_cls()
    try:
        data = json.loads(body)
    except UnicodeDecodeError:
        raise JsonProblem("request", "is not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise JsonProblem("request", f"is not JSON: {err}") from None
    except RecursionError:
        raise JsonProblem("request", "is nested too deeply to read") from None
    if not isinstance(data, dict):
        raise JsonProblem("request", f"must be a JSON object (a {name}), got {_kind(data)}")
    mapped = _object(data, message_cls.DESCRIPTOR, "", 0)
    try:
        return json_format.ParseDict(mapped, message_cls())
    except json_format.ParseError as err:  # left after the checks above: say it whole
        raise JsonProblem("request", str(err)[:300]) from None


def message_to_json(message: Message) -> dict[str, Any]:
    """An answer in the protos' JSON mapping (snake_case names, defaults written out)."""
    return json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string"}.get(type(value), "a number")


def _object(data: dict[str, Any], desc: Descriptor, path: str, depth: int) -> dict[str, Any]:
    if depth > MAX_DEPTH:
        raise JsonProblem(path or "request", "is nested too deeply to read")
    out: dict[str, Any] = {}
    for key, value in data.items():
        where = f"{path}.{key}" if path else str(key)
        field = desc.fields_by_name.get(key) or desc.fields_by_camelcase_name.get(key)
        if field is None:
            raise JsonProblem(where, f"{desc.full_name} has no field {echo(key)}")
        where = f"{path}.{field.name}" if path else field.name
        if value is None:  # JSON null: the field's default, as json_format reads it
            continue
        if field.is_repeated:
            if not isinstance(value, list):
                raise JsonProblem(where, f"must be a list, got {_kind(value)}")
            out[field.name] = [
                _value(field, v, f"{where}[{i}]", depth) for i, v in enumerate(value)
            ]
        else:
            out[field.name] = _value(field, value, where, depth)
    return out


def _value(field: FieldDescriptor, value: Any, where: str, depth: int) -> Any:
    if field.message_type is not None:
        if not isinstance(value, dict):
            raise JsonProblem(where, f"must be an object ({field.message_type.name}), got {_kind(value)}")  # fmt: skip
        return _object(value, field.message_type, where, depth + 1)
    if field.enum_type is not None:
        return _enum(field, value, where)
    if field.type == F.TYPE_BOOL:
        if not isinstance(value, bool):
            raise JsonProblem(where, f"must be true or false (got {echo(value)})")
        return value
    if field.type in _INT_RANGE:
        return _integer(field, value, where)
    if field.type in _FLOATS:
        if isinstance(value, str) and value in _SPECIAL_FLOATS:
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise JsonProblem(where, f"must be a number (got {echo(value)})")
        if isinstance(value, float) and not math.isfinite(value):
            return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        return value
    if field.type == F.TYPE_STRING and not isinstance(value, str):
        raise JsonProblem(where, f"must be a string (got {echo(value)})")
    return value


def _integer(field: FieldDescriptor, value: Any, where: str) -> int:
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):  # the mapping writes 64-bit integers as strings
        try:
            number = int(value.strip())
        except ValueError:
            number = None
    if number is None:
        raise JsonProblem(where, f"must be a whole number (got {echo(value)})")
    low, high = _INT_RANGE[field.type]
    if not low <= number <= high:
        raise JsonProblem(where, f"is outside the field's range {low}..{high} (got {number})")
    return number


def _enum(field: FieldDescriptor, value: Any, where: str) -> str | int:
    enum = field.enum_type
    if isinstance(value, int) and not isinstance(value, bool):
        return value  # a number the server does not know is refused as over gRPC
    if isinstance(value, str):
        if value in enum.values_by_name:
            return value
        prefixed = enum_prefix(enum) + value
        if prefixed in enum.values_by_name and not value.endswith("UNSPECIFIED"):
            return prefixed
    prefix = enum_prefix(enum)
    names = ", ".join(v.name[len(prefix) :] for v in enum.values if v.number)
    raise JsonProblem(where, f"is not one of {names} (got {echo(value)})")
