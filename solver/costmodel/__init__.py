"""The cost model: memory and time of any configuration, in one place (DESIGN.md)."""

from meshplan.solver.costmodel.model import CostModel
from meshplan.solver.costmodel.point import Layout, Point

__all__ = ["CostModel", "Layout", "Point"]
