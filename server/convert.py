"""Proto <-> domain (pydantic) conversion, generic over the message descriptors.

Field names are shared, so a message becomes a dict (json_format) and the dict a pydantic model.
Only two things differ and are mapped here, guided by the descriptors:
- enums: domain "BF16" <-> proto "PRECISION_BF16" (Buf prefix); *_UNSPECIFIED <-> unset (None);
- int64 fields, which json_format renders as strings, become ints again.
This module imports no grpc and no solver code, so the client can use it too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message
from pydantic import BaseModel

M = TypeVar("M", bound=Message)
D = TypeVar("D", bound=BaseModel)

_UNSPECIFIED = "UNSPECIFIED"
_INT64 = {
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED64,
}
_FLOATS = {FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT}


def enum_prefix(enum: EnumDescriptor) -> str:
    """The Buf prefix of an enum's values, from its zero value, e.g. PRECISION_."""
    zero = enum.values_by_number[0].name
    if not zero.endswith("_" + _UNSPECIFIED):
        raise ValueError(f"{enum.full_name}: zero value {zero} does not end in _{_UNSPECIFIED}")
    return zero[: -len(_UNSPECIFIED)]


def enum_to_proto(enum: EnumDescriptor, value: str | Enum | None) -> str | None:
    """Domain enum value ("BF16") -> proto value name ("PRECISION_BF16"); None -> None (unset)."""
    if value is None:
        return None
    raw = value.value if isinstance(value, Enum) else value
    name = enum_prefix(enum) + str(raw)
    if name not in enum.values_by_name or str(raw) == _UNSPECIFIED:
        raise ValueError(f"{enum.full_name} has no value for {raw!r}")
    return name


def enum_from_proto(enum: EnumDescriptor, name: str | int) -> str | None:
    """Proto value name (or number) -> domain enum value; *_UNSPECIFIED -> None (unset)."""
    if isinstance(name, int):
        number = enum.values_by_number.get(name)
        if number is None:
            raise ValueError(f"{enum.full_name} has no value numbered {name}")
        name = number.name
    prefix = enum_prefix(enum)
    if name not in enum.values_by_name:
        raise ValueError(f"{enum.full_name} has no value {name!r}")
    return None if name == prefix + _UNSPECIFIED else name[len(prefix) :]


class FieldValueError(ValueError):
    """A value with no counterpart on the other side (e.g. an unknown enum number); `path` is
    the dotted field path."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


@dataclass(frozen=True)
class _Field:
    """What the conversion needs of one field, read once from its descriptor (descriptor
    attribute reads are slow next to a dict lookup)."""

    field: FieldDescriptor
    name: str
    presence: bool
    repeated: bool
    message: Descriptor | None
    enum: EnumDescriptor | None
    int64: bool
    double: bool


@cache
def _fields(desc: Descriptor) -> dict[str, _Field]:
    return {
        f.name: _Field(
            f,
            f.name,
            f.has_presence,
            f.is_repeated,
            f.message_type,
            f.enum_type,
            f.type in _INT64,
            f.type in _FLOATS,
        )
        for f in desc.fields
    }


def _walk(data: dict[str, Any], desc: Descriptor, to_proto: bool) -> dict[str, Any]:
    fields = _fields(desc)
    out: dict[str, Any] = {}
    for key, value in data.items():
        field = fields.get(key)
        if field is None:
            raise FieldValueError(key, f"{desc.full_name} has no such field")
        if value is None and not to_proto:  # absent with presence (_read): stays None
            out[key] = None
            continue
        try:
            if isinstance(value, list):
                items = [_scalar(field, v, to_proto) for v in value]
                out[key] = [v for v in items if v is not None]
            else:
                mapped = _scalar(field, value, to_proto)
                if mapped is not None:
                    out[key] = mapped
        except FieldValueError as err:
            raise FieldValueError(f"{key}.{err.path}", err.message) from None
        except ValueError as err:
            raise FieldValueError(key, str(err)) from None
    return out


def _scalar(field: _Field, value: Any, to_proto: bool) -> Any:
    if value is None:
        return None
    if field.message is not None:
        return _walk(value, field.message, to_proto)
    if field.enum is not None:
        if to_proto:
            return enum_to_proto(field.enum, value)
        return enum_from_proto(field.enum, value)
    if not to_proto and field.int64:
        return int(value)
    if field.double:
        if not to_proto and isinstance(value, str):
            return float(value)  # json_format writes "NaN", "Infinity", "-Infinity"
        if to_proto and isinstance(value, float) and not math.isfinite(value):
            return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def message_to_dict(message: Message, *, with_defaults: bool = False) -> dict[str, Any]:
    """A proto message as a domain dict (snake_case names, domain enum values, ints).

    `with_defaults` (for responses, whose pydantic models require every field) gives zero
    scalars, and absent fields with presence (sub-messages, `optional` scalars) as None (an
    UNSPECIFIED enum stays absent, so it takes the pydantic default); without it (requests,
    whose scalars are all `optional`) an unset field stays absent and takes the pydantic
    default.
    """
    return _walk(_read(message, with_defaults), message.DESCRIPTOR, to_proto=False)


def _read(message: Message, with_defaults: bool) -> dict[str, Any]:
    """The fields of a message as plain values (enums as numbers), as json_format's
    MessageToDict lists them (with `always_print_fields_with_no_presence` when
    `with_defaults`), read straight off the message: several times faster. The protos have no
    maps, bytes, 32-bit floats or well-known types, whose JSON forms would differ."""
    fields = _fields(message.DESCRIPTOR)
    out: dict[str, Any] = {}
    if with_defaults:
        listed = []
        for f in fields.values():
            if not f.presence or message.HasField(f.name):
                listed.append((f, getattr(message, f.name)))
            elif f.enum is None:
                out[f.name] = None  # absent: None, not the pydantic default
    else:
        listed = [(fields[fd.name], value) for fd, value in message.ListFields()]
    for f, value in listed:
        if f.message is None:
            out[f.name] = list(value) if f.repeated else value
        elif f.repeated:
            out[f.name] = [_read(v, with_defaults) for v in value]
        else:
            out[f.name] = _read(value, with_defaults)
    return out


def dict_to_message(data: dict[str, Any], message_cls: type[M]) -> M:
    """A domain dict as a proto message; raises json_format.ParseError on a bad value."""
    mapped = _walk(data, message_cls.DESCRIPTOR, to_proto=True)
    try:  # the constructor takes nested dicts and enum names: several times faster
        return message_cls(**mapped)
    except (ValueError, TypeError):  # e.g. NaN as "NaN", an int64 overflow: json_format says
        return json_format.ParseDict(mapped, message_cls())  # which field, or takes the value


def to_proto(model: BaseModel, message_cls: type[M], *, only_set: bool = False) -> M:
    """A pydantic domain object as its proto message.

    `only_set` sends only the fields the caller set (requests: the server then applies the
    same defaults as the solver, and can tell an unset time limit from an explicit one).
    """
    data = model.model_dump(mode="python", exclude_none=True, exclude_unset=only_set)
    return dict_to_message(data, message_cls)


def from_proto(message: Message, model_cls: type[D], *, with_defaults: bool = False) -> D:
    """A proto message as its pydantic domain object (raises pydantic.ValidationError)."""
    return model_cls.model_validate(message_to_dict(message, with_defaults=with_defaults))
