"""meshplan: plans how a transformer training step is cut across GPUs.

One import namespace: `meshplan.solver` (the planning core), `meshplan.server` (the gRPC
service), `meshplan.client` (its Python client), `meshplan.tools` (the command line and the
workflows around the planner) and `meshplan.v1` (code generated from proto/).
"""

from __future__ import annotations


def __getattr__(name: str) -> str:
    # The version is read from the installed metadata only when asked (importlib.metadata
    # costs tens of milliseconds at every start of the command line otherwise).
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("meshplan")
        except PackageNotFoundError:  # a source tree that was never installed
            return "0+unknown"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
