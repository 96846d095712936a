"""Errors and values echoed to the user: one line, bounded (a 100 MB name must not flood the
terminal), naming the field or flag."""

from __future__ import annotations

import reprlib


def shorten(text: str, limit: int = 600) -> str:
    """Text to echo on one line: words over 80 characters and the whole beyond `limit` cut,
    saying how much was cut (a 100 MB name must not flood the terminal)."""
    words = str(text).split()
    text = " ".join(w if len(w) <= 80 else f"{w[:60]}...({len(w):,} characters)" for w in words)
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit:,} more characters)"
    return text


def one_line(e: Exception) -> str:
    """An error as one line naming the field (or flag) and the value."""
    from pydantic import ValidationError

    if isinstance(e, ValidationError):
        parts = []
        for err in e.errors(include_url=False):
            loc = ".".join(str(x) for x in err["loc"]) or "request"
            msg = err["msg"].removeprefix("Value error, ")
            parts.append(f"{loc}: {msg} (got {_echo(err.get('input'))})")
        return shorten("invalid request: " + "; ".join(parts))
    if isinstance(e, KeyError) and e.args:
        return shorten(f"invalid request: {e.args[0]}")
    if isinstance(e, OSError) and e.strerror:  # a file the user named
        return shorten(f"{e.filename or 'file'}: {e.strerror}")
    return shorten(str(e))


def _echo(value: object) -> str:
    r = reprlib.Repr()
    r.maxlevel, r.maxstring, r.maxother, r.maxlist, r.maxdict = 2, 60, 60, 4, 4
    return r.repr(value)
