"""YAML text of a nested dict of scalars and lists (the YAML exports: llm-foundry, nanotron), with
a comment header; the subset both frameworks' loaders read (omegaconf, PyYAML)."""

from __future__ import annotations

import json
import re

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_./%-]*$")
_WORDS = {"true", "false", "null", "yes", "no", "on", "off", "~"}


def _scalar(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return repr(v)
    if isinstance(v, float):  # YAML 1.1 (PyYAML) reads a float only with a dot: 1.0e-08
        mant, _, exp = repr(v).partition("e")
        return (mant if "." in mant else mant + ".0") + (f"e{exp}" if exp else "")
    text = str(v)
    return text if _PLAIN.match(text) and text.lower() not in _WORDS else json.dumps(text)


def _lines(obj: object, indent: int) -> list[str]:
    pad = " " * indent
    out: list[str] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, dict) and v:
                out += [f"{pad}{k}:", *_lines(v, indent + 2)]
            elif isinstance(v, list) and v:
                out.append(f"{pad}{k}:")
                for item in v:
                    sub = _lines(item, indent + 4)
                    if isinstance(item, dict) and sub:
                        out.append(f"{pad}  - {sub[0].lstrip()}")
                        out += sub[1:]
                    else:
                        out.append(f"{pad}  - {_scalar(item)}")
            elif isinstance(v, dict | list):
                out.append(f"{pad}{k}: {'{}' if isinstance(v, dict) else '[]'}")
            else:
                out.append(f"{pad}{k}: {_scalar(v)}")
    return out


def yaml_text(header: list[str], doc: dict[str, object]) -> str:
    """`doc` as YAML, each header line a comment above it."""
    return "\n".join([*(f"# {h}" for h in header), *_lines(doc, 0)]) + "\n"
