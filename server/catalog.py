"""ListCatalog: the solver's catalog as proto, converted field for field."""

from __future__ import annotations

from meshplan.convert import to_proto
from meshplan.solver.catalog import get_gpu, get_model, gpu_names, model_names
from meshplan.v1 import catalog_pb2, planner_pb2


def list_catalog() -> planner_pb2.ListCatalogResponse:
    """Every GPU and model preset, sorted by name."""
    return planner_pb2.ListCatalogResponse(
        gpus=[to_proto(get_gpu(n), catalog_pb2.GpuInfo) for n in gpu_names()],
        models=[to_proto(get_model(n), catalog_pb2.ModelInfo) for n in model_names()],
    )
