"""`meshplan serve`: the server, with the tools its planner page uses installed (the framework
exports, the Hugging Face config.json reader, the walls' words), which server/ does not import."""

from __future__ import annotations

import argparse
from typing import Any

from meshplan.server.cli import add_serve_arguments
from meshplan.server.cli import run_serve as run_server

__all__ = ["add_serve_arguments", "page_tools", "run_serve"]


def page_tools() -> Any:
    """The PageTools of this install (the exports and the reader load at their first use)."""
    from meshplan.server.http.extras import PageTools
    from meshplan.tools.cli.glossary import WALLS
    from meshplan.tools.models.hf_config import SUPPORTED_MODEL_TYPES

    def export(*args: Any) -> str:
        from meshplan.tools.export.emit import emit

        return emit(*args)

    def model_from_hf_config(data: dict[str, Any]) -> Any:
        from meshplan.tools.models.hf_config import modelspec_from_hf_dict

        return modelspec_from_hf_dict(data, "config.json")

    from meshplan.tools.export.emit import KINDS

    return PageTools(
        export=export,
        export_kinds=KINDS,
        model_from_hf_config=model_from_hf_config,
        hf_model_types=SUPPORTED_MODEL_TYPES,
        walls=WALLS,
    )


def run_serve(args: argparse.Namespace) -> int:
    """Install the page's tools, then run the server (server.cli.run_serve)."""
    if getattr(args, "http_port", None) is not None:
        from meshplan.server.http.extras import install

        install(page_tools())
    return run_server(args)
