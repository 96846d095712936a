"""`meshplan curve|replan|admit|front`: the scheduler queries from the command line.

Each prints one artefact on stdout (a table, or --json, or --csv); --plot writes a PNG and says
so on stderr. The flags live in tools/cli/scheduler_flags.py; here they become a request, with
the defaults their help states, and a map from each request field they set to the flag, so an
error names the flag the user typed (and the field, for what a --request file set).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from meshplan.tools.cli.flags import PINS
from meshplan.tools.cli.inputs import model_spec, read_json_file
from meshplan.tools.cli.scheduler_flags import (
    BATCH_KINDS,
    add_admit_arguments,
    add_curve_arguments,
    add_front_arguments,
    add_replan_arguments,
)

__all__ = [
    "add_admit_arguments",
    "add_curve_arguments",
    "add_front_arguments",
    "add_replan_arguments",
    "run_admit",
    "run_curve",
    "run_front",
    "run_replan",
]

INFEASIBLE = 3


class _Request:
    """A request dict built from --request and the flags, remembering which flag set which
    field (a.origins, read by tools/cli/main.py when it reports an error)."""

    def __init__(self, a: argparse.Namespace) -> None:
        req: Any = read_json_file(a.request) if a.request else {}
        if not isinstance(req, dict):
            raise ValueError(f"--request: must hold a JSON object, got {type(req).__name__}")
        self.data: dict[str, Any] = req
        self.origins: dict[str, str] = {}
        a.origins = self.origins

    def section(self, path: str) -> dict[str, Any]:
        """The object at a dotted path, created if absent."""
        node = self.data
        for key in path.split("."):
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ValueError(f"{key}: must be a JSON object, got {type(node).__name__}")
        return node

    def put(self, field: str, value: Any, flag: str) -> None:
        """Set a dotted field from a flag."""
        head, _, name = field.rpartition(".")
        (self.section(head) if head else self.data)[name] = value
        self.origins[field] = flag

    def given(self, field: str) -> bool:
        """True if the request file (or a flag already) set the dotted field."""
        node: Any = self.data
        for key in field.split("."):
            if not isinstance(node, dict) or key not in node:
                return False
            node = node[key]
        return True


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _base(a: argparse.Namespace, pins: bool = True, batch: str = "FREE") -> _Request:
    """The request's parts every query shares; `batch`: the policy with no batch flag."""
    r = _Request(a)
    if a.model:
        r.section("model").update(model_spec(a.model))
        r.origins["model"] = "--model"
    for key in ("seq_len", "precision", "framework", "critical_batch_tokens"):
        if getattr(a, key) is not None:
            r.put(f"training.{key}", getattr(a, key), _flag(key))
    _batch(a, r, batch)
    if a.observations:
        r.put("observations", read_json_file(a.observations, "--observations"), "--observations")
    if a.cell_time_limit is not None:
        r.put("options.cell_time_limit_s", a.cell_time_limit, "--cell-time-limit")
    if getattr(a, "knee_gain", None) is not None:
        r.put("options.knee_gain", a.knee_gain, "--knee-gain")
    if pins:
        for key in (*PINS, "zero_stage", "recompute"):
            if getattr(a, key) is not None:
                r.put(f"search.{key}", getattr(a, key), _flag(key))
        if a.sequence_parallel is not None:
            r.put("search.sequence_parallel", a.sequence_parallel == "true", "--sequence-parallel")
    if hasattr(a, "counts"):
        _apply_clusters(a, r)
    return r


def _batch(a: argparse.Namespace, r: _Request, default: str) -> None:
    """The batch policy: --batch, or as its help says, fixed-global with
    --global-batch-tokens, per-replica with --per-replica-batch-tokens, else `default`."""
    for name in ("global", "per_replica", "min_global", "max_global"):
        value = getattr(a, f"{name}_batch_tokens")
        if value is not None:
            r.put(f"batch.{name}_batch_tokens", value, _flag(f"{name}_batch_tokens"))
    if a.batch:
        r.put("batch.kind", BATCH_KINDS[a.batch], "--batch")
    elif not r.given("batch.kind"):
        kind = default
        if a.global_batch_tokens is not None:
            kind = "FIXED_GLOBAL"
        elif a.per_replica_batch_tokens is not None:
            kind = "FIXED_PER_REPLICA"
        r.put("batch.kind", kind, "--batch")
    if a.noise_scale_tokens is not None or a.reference_batch_tokens is not None:
        eff = "batch.statistical_efficiency"
        r.section(eff)
        r.origins[eff] = "--noise-scale-tokens"
        for key in ("noise_scale_tokens", "reference_batch_tokens"):
            if getattr(a, key) is not None:
                r.put(f"{eff}.{key}", getattr(a, key), _flag(key))


def _list(text: str | None, kind: type, flag: str) -> list:
    if text is None:
        return []
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{flag}: expected comma-separated numbers, got {text!r}") from None


def _apply_clusters(a: argparse.Namespace, r: _Request) -> None:
    gpus = a.gpu.split(",") if a.gpu else []
    clusters = r.data.get("clusters") or [{"gpu": g} for g in gpus] or [{}]
    if gpus and len(gpus) != len(clusters):
        clusters = [{"gpu": g} for g in gpus]
    if gpus:
        r.origins["clusters"] = "--gpu"
    for flag, key, kind in (("max_gpus", "max_gpus", int), ("price", "price_per_gpu_hour", float)):
        values = _list(getattr(a, flag), kind, _flag(flag))
        if len(values) == 1:
            values *= len(clusters)
        if values and len(values) != len(clusters):
            raise ValueError(f"{_flag(flag)}: give one value or one per --gpu")
        for c, v in zip(clusters, values, strict=False):
            c[key] = v
        if values:
            r.origins[f"clusters.{key}"] = _flag(flag)
    if a.gpus_per_node is not None:
        for c in clusters:
            c["gpus_per_node"] = a.gpus_per_node
        r.origins["clusters.gpus_per_node"] = "--gpus-per-node"
    if gpus:
        r.origins["clusters.gpu"] = "--gpu"
    r.data["clusters"] = clusters
    grid = dict(r.data.get("grid") or {})
    if a.counts:
        grid["counts"] = _list(a.counts, int, "--counts")
        r.origins["grid"] = r.origins["grid.counts"] = "--counts"
    if a.nodes:
        lo, _, hi = a.nodes.partition("..")
        try:
            grid["min_nodes"], grid["max_nodes"] = (int(lo), int(hi)) if hi else (1, int(lo))
        except ValueError:
            raise ValueError(f"--nodes: expected MIN..MAX whole nodes, got {a.nodes!r}") from None
        r.origins["grid"] = r.origins["grid.min_nodes"] = r.origins["grid.max_nodes"] = "--nodes"
    if a.sub_node:
        grid["sub_node"] = True
    if grid:
        r.data["grid"] = grid


def _need_grid(r: _Request) -> None:
    """curve and front read a grid: --counts, --nodes, or the request's."""
    if not r.data.get("grid"):
        raise ValueError("--counts or --nodes: give the GPU counts of the grid")


def _call(a: argparse.Namespace, method: str, req: Any) -> Any:
    """In-process (its cells on a Ray cluster's workers with --ray), or through a server; a
    rejected request exits 2 like a local one."""
    from meshplan.tools.sweep.ray_paths import ray_backend

    ray = ray_backend(a)
    if ray is not None:
        from meshplan.solver import scheduler
        from meshplan.tools.cli.interrupt import sigterm_as_interrupt

        with ray, sigterm_as_interrupt():
            return getattr(scheduler, method)(req, solver=ray.cells)
    if not a.server:
        from meshplan.solver import scheduler

        return getattr(scheduler, method)(req)
    from meshplan.tools.cli.remote import connect

    with connect(a) as client:
        return getattr(client, method)(req, timeout=a.timeout)


def _emit(a: argparse.Namespace, answer: Any, table: str, rows: list[dict]) -> None:
    if a.json:
        print(answer.model_dump_json(indent=2))
    elif a.csv:
        from meshplan.tools.render.scheduler_tables import write_csv

        write_csv(sys.stdout, rows)
    else:
        print(table)


def run_curve(a: argparse.Namespace) -> int:
    from meshplan.solver.scheduler import CellStatus, CurveRequest
    from meshplan.tools.render.scheduler_tables import curve_rows, curve_table

    r = _base(a)
    _need_grid(r)
    req = CurveRequest.model_validate(r.data)
    res = _call(a, "scaling_curve", req)
    _emit(a, res, curve_table(res), curve_rows(res))
    if a.plot:
        from meshplan.tools.render.plots import describe
        from meshplan.tools.render.scheduler_plots import curve_plot

        out = curve_plot(a.plot, res, req.model.preset or "model")
        print(f"meshplan: {describe(out, 'scaling curve')}", file=sys.stderr)
    return 0 if any(c.status is CellStatus.PLANNED for c in res.cells) else INFEASIBLE


def run_replan(a: argparse.Namespace) -> int:
    from meshplan.solver.scheduler import CellStatus, ReplanRequest
    from meshplan.tools.render.scheduler_tables import replan_rows, replan_table

    r = _base(a, pins=False, batch="FIXED_GLOBAL")
    for flag, key in (("gpu", "gpu"), ("gpus", "num_gpus"), ("gpus_per_node", "gpus_per_node")):
        if getattr(a, flag) is not None:
            r.put(f"cluster.{key}", getattr(a, flag), _flag(flag))
    for key in (*PINS, "zero_stage", "recompute"):
        if getattr(a, key) is not None:
            r.put(f"config.{key}", getattr(a, key), _flag(key))
        elif not r.given(f"config.{key}"):  # a required one missing: name the flag to give
            r.origins[f"config.{key}"] = _flag(key)
    for key, flag in (("cluster.num_gpus", "--gpus"), ("model", "--model")):
        if not r.given(key):
            r.origins[key] = flag
    if a.lose is not None:
        r.put("event.delta_nodes", -a.lose, "--lose")
    elif a.gain is not None:
        r.put("event.delta_nodes", a.gain, "--gain")
    elif a.precompute is not None:
        r.put("event.precompute_nodes", a.precompute, "--precompute")
    elif not r.data.get("event"):
        r.put("event.delta_nodes", -1, "--lose")  # the help's default: one node lost
    r.origins["event"] = r.origins.get("event.delta_nodes") or "--precompute"
    for key, default in (("compatibility", "SAME_MODEL_PARALLEL"), ("checkpoint_reshard", None)):
        value = getattr(a, key) or (None if r.given(key) else default)
        if value:
            r.put(key, value, _flag(key))
    if a.no_idle_gpus:
        r.put("allow_idle_gpus", False, "--no-idle-gpus")
    if a.global_batch_tokens is not None:  # the running batch, from which M follows
        r.origins["config.num_microbatches"] = "--num-microbatches"
    req = ReplanRequest.model_validate(r.data)
    res = _call(a, "replan", req)
    _emit(a, res, replan_table(res), replan_rows(res))
    return 0 if any(row.status is CellStatus.PLANNED for row in res.rows) else INFEASIBLE


def run_admit(a: argparse.Namespace) -> int:
    from meshplan.solver.scheduler import AdmitRequest
    from meshplan.tools.render.scheduler_tables import admit_rows, admit_table

    r = _base(a)
    if a.tokens is not None:
        r.put("work.tokens", a.tokens, "--tokens")
    if a.steps is not None:
        r.put("work.steps", a.steps, "--steps")
    if a.tokens is not None or a.steps is not None:
        r.origins["work"] = "--tokens" if a.tokens is not None else "--steps"
    if a.deadline_hours is not None:
        r.put("deadline_s", a.deadline_hours * 3600, "--deadline-hours")
    if a.deadline_unix is not None:
        r.put("deadline_unix_s", a.deadline_unix, "--deadline-unix")
    for flag, key in (
        ("startup_overhead", "startup_overhead_s"),
        ("downtime", "downtime_fraction"),
        ("objective", "objective"),
    ):
        if getattr(a, flag) is not None:
            r.put(key, getattr(a, flag), _flag(flag))
    if a.band_upper:
        r.put("use_band_upper", True, "--band-upper")
    if not r.given("work"):
        raise ValueError("--tokens or --steps: give the work left")
    if not (r.given("deadline_s") or r.given("deadline_unix_s")):
        raise ValueError("--deadline-hours or --deadline-unix: give the deadline")
    req = AdmitRequest.model_validate(r.data)
    res = _call(a, "smallest_allocation", req)
    _emit(a, res, admit_table(res), admit_rows(res))
    return 0 if res.feasible else INFEASIBLE


def run_front(a: argparse.Namespace) -> int:
    from meshplan.solver.scheduler import FrontRequest
    from meshplan.tools.render.scheduler_tables import front_rows, front_table

    r = _base(a)
    _need_grid(r)
    if a.token_budget is not None:
        r.put("token_budget", a.token_budget, "--token-budget")
    req = FrontRequest.model_validate(r.data)
    res = _call(a, "training_front", req)
    _emit(a, res, front_table(res), front_rows(res))
    if a.plot:
        from meshplan.tools.render.plots import describe
        from meshplan.tools.render.scheduler_plots import front_plot

        out = front_plot(a.plot, res, req.model.preset or "model")
        print(f"meshplan: {describe(out, 'training front')}", file=sys.stderr)
    return 0 if res.points else INFEASIBLE
