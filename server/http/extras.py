"""What the page needs from outside server/: the framework exports, the Hugging Face
config.json reader and the words for the binding walls. They live over the planning core, in
meshplan.tools, which server/ does not import; `meshplan serve` installs them here (see
meshplan.tools.cli.serve) and the page says so when a server runs without them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from meshplan.solver.schema import ModelSpec, ParallelConfig, TrainingSpec

# emit(kind, config, model, training, global_batch_tokens, cluster) -> the framework's input (text)
ExportFn = Callable[[str | None, ParallelConfig, ModelSpec, TrainingSpec, int], str]
# a config.json's object -> the model it describes (ValueError naming the key it cannot read)
HfConfigFn = Callable[[dict[str, Any]], ModelSpec]


@dataclass(frozen=True)
class PageTools:
    """The functions and words the page uses that the server does not own."""

    export: ExportFn | None = None
    export_kinds: tuple[str, ...] = ()
    model_from_hf_config: HfConfigFn | None = None
    hf_model_types: tuple[str, ...] = ()
    walls: Mapping[str, str] = field(default_factory=dict)  # wall name -> what it means


_installed = PageTools()


def install(tools: PageTools) -> None:
    """Give the page these tools (every HTTP site of this process reads them)."""
    global _installed
    _installed = tools


def installed() -> PageTools:
    """The tools installed, or none (a server started as `python -m meshplan.server`)."""
    return _installed
