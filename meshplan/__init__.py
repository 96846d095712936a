"""meshplan: plans how a transformer training step is cut across GPUs.

One import namespace: `meshplan.solver` (the planning core), `meshplan.server` (the gRPC
service), `meshplan.client` (its Python client), `meshplan.tools` (the command line and the
workflows around the planner) and `meshplan.v1` (code generated from proto/).
"""

from __future__ import annotations


def __getattr__(name: str) -> str:
    # The version is read from the installed metadata only when asked.
    if name == "__version__":
        return installed_version() or "0+unknown"  # "unknown": a source tree never installed
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def installed_version() -> str | None:
    """meshplan's version from its installed metadata, found as importlib.metadata.version finds
    it (the first sys.path entry with a meshplan .dist-info or .egg-info) without importing
    importlib.metadata, whose import (email, zipfile, csv, ...) was half of `meshplan --version`."""
    import os
    import sys

    for entry in sys.path:
        folder = entry or "."
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            stem, ext = os.path.splitext(name)
            if ext not in (".dist-info", ".egg-info"):
                continue
            if stem.split("-")[0].lower().replace("_", "-").replace(".", "-") != "meshplan":
                continue
            path = os.path.join(folder, name)
            if os.path.isdir(path):
                path = os.path.join(path, "METADATA" if ext == ".dist-info" else "PKG-INFO")
            try:
                with open(path, encoding="utf-8") as f:
                    for line in f:
                        if line.startswith("Version:"):
                            return line.split(":", 1)[1].strip()
                        if not line.strip():
                            break  # the headers end at the first blank line
            except OSError:
                continue
    return None
