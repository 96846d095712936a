"""Proto <-> domain (pydantic) conversion, generic over the message descriptors.

Field names are shared, so a message becomes a dict (read straight off the message) and the dict
a pydantic model; the other way, a model's dict becomes the message's constructor arguments. Only
enums differ and are mapped here, guided by the descriptors: domain "BF16" <-> proto
"PRECISION_BF16" (Buf prefix); *_UNSPECIFIED <-> unset (None).
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
            f.type in _FLOATS,
        )
        for f in desc.fields
    }


def _walk(data: dict[str, Any], desc: Descriptor) -> dict[str, Any]:
    """A domain dict as the dict the message's constructor takes (enum names, JSON floats)."""
    fields = _fields(desc)
    out: dict[str, Any] = {}
    for key, value in data.items():
        field = fields.get(key)
        if field is None:
            raise FieldValueError(key, f"{desc.full_name} has no such field")
        try:
            if isinstance(value, list):
                items = [_scalar(field, v) for v in value]
                out[key] = [v for v in items if v is not None]
            else:
                mapped = _scalar(field, value)
                if mapped is not None:
                    out[key] = mapped
        except FieldValueError as err:
            raise FieldValueError(f"{key}.{err.path}", err.message) from None
        except ValueError as err:
            raise FieldValueError(key, str(err)) from None
    return out


def _scalar(field: _Field, value: Any) -> Any:
    if value is None:
        return None
    if field.message is not None:
        return _walk(value, field.message)
    if field.enum is not None:
        return enum_to_proto(field.enum, value)
    if field.double and isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def message_to_dict(message: Message, *, with_defaults: bool = False) -> dict[str, Any]:
    """A proto message as a domain dict (snake_case names, domain enum values, ints).

    `with_defaults` (for responses, whose pydantic models require every field) gives zero
    scalars, and absent fields with presence (sub-messages, `optional` scalars) as None (an
    UNSPECIFIED enum stays absent, so it takes the pydantic default); without it (requests,
    whose scalars are all `optional`) an unset field stays absent and takes the pydantic
    default. Read in one pass off the message (`ListFields`, one call): the same dict as
    json_format's MessageToDict (with `always_print_fields_with_no_presence` when
    `with_defaults`) mapped field by field, several times faster. The protos have no maps,
    bytes, 32-bit floats or well-known types, whose JSON forms would differ.
    """
    shape = _shape(message.DESCRIPTOR)
    out: dict[str, Any] = dict(shape.absent) if with_defaults else {}
    for fd, value in message.ListFields():
        f = shape.fields[fd.name]
        try:
            if f.message is not None:
                if f.repeated:
                    out[f.name] = [message_to_dict(v, with_defaults=with_defaults) for v in value]
                else:
                    out[f.name] = message_to_dict(value, with_defaults=with_defaults)
            elif f.enum is not None:
                names = _enum_names(f.enum)
                if f.repeated:
                    got = [_enum_name(f.enum, names, v) for v in value]
                    out[f.name] = [v for v in got if v is not None]
                elif (name := _enum_name(f.enum, names, value)) is not None:
                    out[f.name] = name
            else:
                out[f.name] = list(value) if f.repeated else value
        except FieldValueError as err:
            raise FieldValueError(f"{f.name}.{err.path}", err.message) from None
        except ValueError as err:
            raise FieldValueError(f.name, str(err)) from None
    if with_defaults:
        for name in shape.lists:  # unset repeated fields: a new empty list each
            out.setdefault(name, [])
    return out


@dataclass(frozen=True)
class _Shape:
    """A message's fields by name, and what `with_defaults` gives each field that ListFields
    does not list: None for one with presence (but an enum: absent), the zero value for a
    scalar without; repeated fields ([]) apart, so no list is shared between two dicts."""

    fields: dict[str, _Field]
    absent: dict[str, Any]
    lists: tuple[str, ...]


@cache
def _shape(desc: Descriptor) -> _Shape:
    fields = _fields(desc)
    absent: dict[str, Any] = {}
    for f in fields.values():
        if f.repeated or f.enum is not None:
            continue  # [] below; an unset enum is UNSPECIFIED, i.e. absent
        absent[f.name] = None if f.presence else f.field.default_value
    lists = tuple(f.name for f in fields.values() if f.repeated)
    return _Shape(fields, absent, lists)


@cache
def _enum_names(enum: EnumDescriptor) -> dict[int, str | None]:
    """Every value number of an enum -> its domain value (None for *_UNSPECIFIED)."""
    return {v.number: enum_from_proto(enum, v.name) for v in enum.values}


def _enum_name(enum: EnumDescriptor, names: dict[int, str | None], number: int) -> str | None:
    if number not in names:
        raise ValueError(f"{enum.full_name} has no value numbered {number}")
    return names[number]


def dict_to_message(data: dict[str, Any], message_cls: type[M]) -> M:
    """A domain dict as a proto message; raises json_format.ParseError on a bad value."""
    mapped = _walk(data, message_cls.DESCRIPTOR)
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
