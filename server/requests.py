"""From wire bytes to a validated domain request, with every failure an INVALID_ARGUMENT.

Bytes that are not the method's message become a `Malformed` value (not an exception in gRPC's
deserializer, which would answer INTERNAL and log a traceback); strings are bounded before any
conversion, so an oversized name is refused in a line, never echoed whole.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message
from pydantic import BaseModel, ValidationError

from meshplan.convert import FieldValueError, from_proto
from meshplan.server.limits import RpcFailure
from meshplan.server.validate import Violation, echo, from_validation_error, model_type, shorten

D = TypeVar("D", bound=BaseModel)


@dataclass(frozen=True)
class Malformed:
    """Request bytes that do not parse as the method's message (or are too many to parse)."""

    type_name: str
    error: str  # what is wrong, as a field violation's description


@dataclass(frozen=True)
class Wire:
    """A request's bytes, not parsed yet: what `raw` hands a method that parses off the event
    loop (the scheduler queries: a 0.9 MB one took 4-10 ms to parse on the loop, and as much to
    serialize again for its worker)."""

    type_name: str
    data: bytes


SINGLE_REQUEST_BYTES = 64 * 1024  # a request without repeated messages is far smaller


def request_cap(message_cls: type[Message], max_request_bytes: int) -> int:
    """The most bytes a request of this type may hold: a batch (a message with a repeated
    message field) up to `max_request_bytes`, any other up to SINGLE_REQUEST_BYTES."""
    fields = message_cls.DESCRIPTOR.fields
    batch = any(f.is_repeated and f.message_type is not None for f in fields)
    return max_request_bytes if batch else min(SINGLE_REQUEST_BYTES, max_request_bytes)


def tolerant(message_cls: type[Message], max_bytes: int) -> Callable[[bytes], Message | Malformed]:
    """A request deserializer that returns Malformed instead of raising, and does not parse a
    request larger than `max_bytes` (its copies would cost memory for nothing)."""
    name = message_cls.DESCRIPTOR.full_name

    def parse(data: bytes) -> Message | Malformed:
        if len(data) > max_bytes:
            return Malformed(
                name, f"is {len(data):,} bytes, more than the {max_bytes:,} a {name} may hold"
            )
        try:
            return message_cls.FromString(data)
        except (DecodeError, RuntimeError, ValueError) as err:  # RecursionError is a RuntimeError
            return Malformed(name, f"is not a valid {name}: {shorten(str(err), 120)}")

    return parse


def raw(message_cls: type[Message], max_bytes: int) -> Callable[[bytes], Wire | Malformed]:
    """A request deserializer that only bounds the bytes (Malformed past `max_bytes`, as
    `tolerant`) and leaves the parse to the method, off the event loop (`parse_wire`)."""
    name = message_cls.DESCRIPTOR.full_name

    def keep(data: bytes) -> Wire | Malformed:
        if len(data) > max_bytes:
            return Malformed(
                name, f"is {len(data):,} bytes, more than the {max_bytes:,} a {name} may hold"
            )
        return Wire(name, data)

    return keep


def parse_wire(message_cls: type[Message], data: bytes) -> Message:
    """`data` parsed as `message_cls`; INVALID_ARGUMENT on field "request" if it is not one."""
    got = tolerant(message_cls, len(data))(data)
    if isinstance(got, Malformed):
        bad("request", got.error)
    return got


def bad(field: str, description: str) -> NoReturn:
    """Raise INVALID_ARGUMENT with one field violation."""
    raise RpcFailure(
        grpc.StatusCode.INVALID_ARGUMENT, f"{field}: {description}", [Violation(field, description)]
    )


def check_strings(message: Message, max_chars: int, prefix: str = "") -> None:
    """INVALID_ARGUMENT for the first string field longer than `max_chars`, at any depth."""
    for field, value in message.ListFields():
        if field.type not in _TEXT and not _holds_text(field.message_type):
            continue  # a number, or a message with no string at any depth
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


_TEXT = (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES)


@cache
def _holds_text(desc: Descriptor | None, _seen: frozenset[str] = frozenset()) -> bool:
    """Whether messages of `desc` can hold a string or bytes field at any depth."""
    if desc is None or desc.full_name in _seen:
        return False
    seen = _seen | {desc.full_name}
    return any(f.type in _TEXT or _holds_text(f.message_type, seen) for f in desc.fields)


def check_message(request: object, max_chars: int, prefix: str = "") -> Message:
    """The request as a proto message, or INVALID_ARGUMENT if it did not parse or a string is
    too long."""
    if isinstance(request, Malformed):
        bad(prefix or "request", request.error)
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


PARSE_CHUNK = 256  # items of a long repeated field converted between two checks of the call


def parse_in_steps(
    message: Any, model_cls: type[D], check: Callable[[], None], prefix: str = ""
) -> D:
    """parse(), with each long repeated message field (a query's observations) converted and
    validated PARSE_CHUNK items at a time and `check()` called between two (it raises once the
    call has ended), so a request of 1 MiB stops within ~20 ms of its call's end rather than
    after the second or so its whole conversion takes. The same answers and field paths as
    parse()."""
    long = [
        fd
        for fd, value in message.ListFields()
        if fd.is_repeated and fd.message_type is not None and len(value) > PARSE_CHUNK
    ]
    if not long:
        return parse(message, model_cls, prefix)
    head = type(message)()
    head.CopyFrom(message)
    for fd in long:
        head.ClearField(fd.name)
    request = parse(head, model_cls, prefix)
    updates: dict[str, list[Any]] = {}
    for fd in long:
        info = model_cls.model_fields[fd.name]
        item_cls = model_type(info.annotation)
        assert item_cls is not None, fd.name  # a repeated message is a list of a model
        path = f"{prefix}.{fd.name}" if prefix else fd.name
        values = getattr(message, fd.name)
        cap = next((m.max_length for m in info.metadata if hasattr(m, "max_length")), None)
        if cap is not None and len(values) > cap:
            bad(path, f"holds {len(values):,} items, more than the {cap:,} allowed")
        items = []
        for i, value in enumerate(values):
            if i % PARSE_CHUNK == 0:
                check()
            items.append(parse(value, item_cls, f"{path}[{i}]"))
        updates[fd.name] = items
    check()
    return request.model_copy(update=updates)
