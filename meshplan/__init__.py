"""meshplan: plans how a transformer training step is cut across GPUs.

One import namespace: `meshplan.solver` (the planning core), `meshplan.server` (the gRPC
service), `meshplan.client` (its Python client), `meshplan.tools` (the command line and the
workflows around the planner) and `meshplan.v1` (code generated from proto/).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("meshplan")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
