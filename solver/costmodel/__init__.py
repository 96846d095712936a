"""The cost model: memory and time of any configuration, in one place (DESIGN.md)."""

from solver.costmodel.model import CostModel
from solver.costmodel.point import Layout, Point

__all__ = ["CostModel", "Layout", "Point"]
