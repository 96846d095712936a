"""A solve's answer, on its own so that the paths that never build a CP-SAT model (the bounds
and exact scores settle most plans) do not import OR-Tools, and pandas through it."""

from __future__ import annotations

from meshplan.solver.costmodel import Point
from meshplan.solver.record import record


@record
class Solved:
    status: str  # OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN, MODEL_INVALID
    point: Point | None
    objective: float
    bound: float
    solve_time_s: float
