"""Errors and values echoed to the user: one line, bounded (a 100 MB name must not flood the
terminal), naming the field or flag."""

from __future__ import annotations

import re
import reprlib
from collections.abc import Mapping

# A request field at the start of a message: "clusters[0].max_gpus: ..." or "deadline_s: ...".
_FIELD = re.compile(r"^([a-z_]+(?:\[\d+\])?(?:\.[a-z_]+(?:\[\d+\])?)*): ")


def shorten(text: str, limit: int = 600) -> str:
    """Text to echo on one line: words over 80 characters and the whole beyond `limit` cut,
    saying how much was cut (a 100 MB name must not flood the terminal)."""
    words = str(text).split()
    text = " ".join(w if len(w) <= 80 else f"{w[:60]}...({len(w):,} characters)" for w in words)
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit:,} more characters)"
    return text


def _key(field: str) -> str:
    """A field path without list indices: clusters[0].max_gpus, clusters.0.max_gpus ->
    clusters.max_gpus."""
    parts = re.sub(r"\[\d+\]", "", field).split(".")
    return ".".join(p for p in parts if not p.isdigit())


def flag_of(field: str, flags: Mapping[str, str] | None) -> str | None:
    """The flag the user typed that set `field` (or the nearest section holding it), or None
    when the field came from a --request file."""
    if not flags:
        return None
    parts = _key(field).split(".")
    for n in range(len(parts), 0, -1):
        flag = flags.get(".".join(parts[:n]))
        if flag:
            return flag if n == len(parts) else f"{flag} ({field})"
    return None


def name_flag(field: str, flags: Mapping[str, str] | None) -> str:
    """`field` said as the flag that set it, or as itself."""
    return flag_of(field, flags) or field


def name_flags(text: str, flags: Mapping[str, str] | None) -> str:
    """A message that starts with a request field, started with the flag that set it."""
    m = _FIELD.match(text)
    if not m or not flags:
        return text
    flag = flag_of(m.group(1), flags)
    return f"{flag}: {text[m.end() :]}" if flag else text


def one_line(e: Exception, flags: Mapping[str, str] | None = None) -> str:
    """An error as one line naming the flag the user typed (`flags`: request field -> flag) or,
    for what a --request file set, the field; and the value."""
    from pydantic import ValidationError

    if isinstance(e, ValidationError):
        parts, named = [], False
        for err in e.errors(include_url=False):
            loc = ".".join(str(x) for x in err["loc"]) or "request"
            msg = err["msg"].removeprefix("Value error, ")
            flag = flag_of(loc, flags)
            named = named or flag is not None
            parts.append(f"{flag or loc}: {msg} (got {_echo(err.get('input'))})")
        return shorten(("" if named else "invalid request: ") + "; ".join(parts))
    if isinstance(e, KeyError) and e.args:
        return shorten(f"invalid request: {e.args[0]}")
    if isinstance(e, OSError) and e.strerror:  # a file the user named
        return shorten(f"{e.filename or 'file'}: {e.strerror}")
    return shorten(name_flags(str(e), flags))


def _echo(value: object) -> str:
    r = reprlib.Repr()
    r.maxlevel, r.maxstring, r.maxother, r.maxlist, r.maxdict = 2, 60, 60, 4, 4
    return r.repr(value)
