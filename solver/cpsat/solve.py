"""Run CP-SAT with a time limit, a worker count and a gap; stop when asked; read the plan."""

from __future__ import annotations

import logging
import threading
import time

from ortools.sat.python import cp_model

from meshplan.solver.cpsat.build import Built
from meshplan.solver.cpsat.solved import Solved

__all__ = ["Solved", "solve"]
log = logging.getLogger(__name__)


def solve(
    b: Built, time_limit_s: float, workers: int, gap: float, stop: threading.Event | None = None
) -> Solved:
    s = cp_model.CpSolver()
    s.parameters.max_time_in_seconds = max(time_limit_s, 1e-3)
    s.parameters.num_workers = workers
    s.parameters.relative_gap_limit = gap
    s.parameters.random_seed = 0
    # Symmetry detection aborts multi-worker solves of these models (OR-Tools 9.15,
    # absl::btree_map::at). The models are small and their pruning comes from the row and cell
    # bounds: presolve (probing) and the LP of the big-M chains cost far more than they save,
    # and OR-Tools 9.15's presolve has wrongly proved such models INFEASIBLE before.
    s.parameters.symmetry_level = 0
    s.parameters.cp_model_presolve = False
    s.parameters.linearization_level = 0
    # Ctrl-C belongs to the caller (it stops us through `stop`): CP-SAT's own SIGINT handler
    # would end the search as if the time were up, then leave SIGINT at its default.
    s.parameters.catch_sigint_signal = False
    done = threading.Event()
    watcher = None
    if stop is not None:
        # stop_search() issued before the search starts is lost (DESIGN.md): repeat until done.
        def watch() -> None:
            while not done.is_set():
                if stop.wait(0.002):
                    while not done.is_set():
                        s.stop_search()
                        done.wait(0.002)
                    return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
    t0 = time.perf_counter()
    code = s.solve(b.model)
    dt = time.perf_counter() - t0
    done.set()
    if watcher is not None:
        watcher.join()
    name = s.status_name(code)
    log.debug(
        "cp-sat %s obj=%s bound=%s in %.4fs", name, s.objective_value, s.best_objective_bound, dt
    )
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return Solved(name, b.axes.chosen(s), s.objective_value, s.best_objective_bound, dt)
    return Solved(name, None, 0.0, 0.0, dt)
