"""From wire bytes to a validated domain request, with every failure an INVALID_ARGUMENT.

Bytes that are not the method's message become a `Malformed` value (not an exception in gRPC's
deserializer, which would answer INTERNAL and log a traceback); strings are bounded before any
conversion, so an oversized name is refused in a line, never echoed whole.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from pydantic import BaseModel, ValidationError

from meshplan.server.convert import FieldValueError, from_proto
from meshplan.server.limits import RpcFailure
from meshplan.server.validate import Violation, echo, from_validation_error, shorten

D = TypeVar("D", bound=BaseModel)


@dataclass(frozen=True)
class Malformed:
    """Request bytes that do not parse as the method's message."""

    type_name: str
    error: str


def tolerant(message_cls: type[Message]) -> Callable[[bytes], Message | Malformed]:
    """A request deserializer that returns Malformed instead of raising."""

    def parse(data: bytes) -> Message | Malformed:
        try:
            return message_cls.FromString(data)
        except (DecodeError, RuntimeError, ValueError) as err:  # RecursionError is a RuntimeError
            return Malformed(message_cls.DESCRIPTOR.full_name, shorten(str(err), 120))

    return parse


def bad(field: str, description: str) -> NoReturn:
    """Raise INVALID_ARGUMENT with one field violation."""
    raise RpcFailure(
        grpc.StatusCode.INVALID_ARGUMENT, f"{field}: {description}", [Violation(field, description)]
    )


def check_strings(message: Message, max_chars: int, prefix: str = "") -> None:
    """INVALID_ARGUMENT for the first string field longer than `max_chars`, at any depth."""
    for field, value in message.ListFields():
        path = f"{prefix}.{field.name}" if prefix else field.name
        items = value if field.is_repeated else [value]
        for i, item in enumerate(items):
            where = f"{path}[{i}]" if field.is_repeated else path
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                check_strings(item, max_chars, where)
            elif isinstance(item, str | bytes) and len(item) > max_chars:
                bad(
                    where,
                    f"is {len(item):,} characters long, more than {max_chars} (got {echo(item)})",
                )


def check_message(request: object, max_chars: int, prefix: str = "") -> Message:
    """The request as a proto message, or INVALID_ARGUMENT if it did not parse or a string is
    too long."""
    if isinstance(request, Malformed):
        bad(prefix or "request", f"is not a valid {request.type_name}: {request.error}")
    assert isinstance(request, Message)
    check_strings(request, max_chars, prefix)
    return request


def parse(message: Any, model_cls: type[D], prefix: str = "") -> D:
    """A proto message as its pydantic request, or INVALID_ARGUMENT with field violations."""
    try:
        return from_proto(message, model_cls)
    except FieldValueError as err:  # e.g. an enum number this server does not know
        path = f"{prefix}.{err.path}" if prefix else err.path
        bad(path, shorten(err.message, 200))
    except ValidationError as err:
        violations = from_validation_error(err, prefix)
        summary = "; ".join(f"{v.field}: {v.description}" for v in violations)
        raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, summary, violations) from None
