"""Cache keys: a hash of the canonical request plus the cost-model version.

The canonical request is the validated request with every default filled in, dumped as JSON in
the models' field order, so a field sent at its default and a field left out give the same key. The version
is a digest of the planning core's code and data (cost model, rules, search, constants, catalog):
any change to what an answer depends on changes every key.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

from pydantic import BaseModel

_CORE = Path(__file__).resolve().parent.parent  # the meshplan.solver package


@cache
def cost_model_version() -> str:
    """16 hex digits of SHA-256 over the core's .py and .json files (path and contents)."""
    digest = hashlib.sha256()
    for path in sorted(_CORE.rglob("*")):
        if path.suffix in (".py", ".json") and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(_CORE)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def canonical(request: BaseModel) -> str:
    """The request as canonical JSON (defaults filled, fields in their models' order, no
    spaces): pydantic's own serialiser, three times faster than json.dumps over model_dump
    (0.13 against 0.43 s for a request of 20,000 observations)."""
    return request.model_dump_json()


def cache_key(kind: str, request: BaseModel, salt: str = "") -> str:
    """32 hex digits naming (query kind, canonical request, cost-model version); `salt` names
    what the request stands for beyond its fields (the observations a query's fit was made
    from, when they were fitted apart and left out of it: observe.Fit.source)."""
    text = f"{kind}\n{cost_model_version()}\n{canonical(request)}"
    if salt:
        text += f"\n{salt}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]
