"""`meshplan curve|replan|admit|front`: the scheduler queries from the command line.

Each prints one artefact on stdout (a table, or --json, or --csv); --plot writes a PNG and says
so on stderr. Exit status: 0 answered, 3 nothing can be planned / the deadline cannot be met,
2 bad input (one line naming the field), 1 anything else.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from meshplan.tools.flags import PINS, model_spec

INFEASIBLE = 3


def add_scheduler_commands(sub: Any) -> None:
    """Register curve, replan, admit and front on the `meshplan` subparsers."""
    c = sub.add_parser("curve", help="throughput over (GPU type, count): envelope, knee, bands")
    _common(c, pins=True)
    _clusters(c)
    _grid(c)
    c.add_argument("--knee-gain", type=float, help="knee threshold per doubling (default 0.05)")
    c.add_argument("--plot", help="draw goodput and its envelope against GPUs to this PNG")
    c.set_defaults(fn=run_curve)
    r = sub.add_parser("replan", help="the layout after losing or gaining nodes")
    _common(r, pins=False)
    r.add_argument("--gpu", help="catalog GPU of the running cluster")
    r.add_argument("--gpus", type=int, help="GPUs the job runs on now")
    r.add_argument("--gpus-per-node", type=int)
    for name in (*PINS, "zero_stage"):
        r.add_argument("--" + name.replace("_", "-"), type=int, dest=name, help="running layout")
    r.add_argument("--recompute", choices=["NONE", "SELECTIVE", "FULL"], help="running layout")
    ev = r.add_mutually_exclusive_group()
    ev.add_argument("--lose", type=int, metavar="NODES", help="nodes lost")
    ev.add_argument("--gain", type=int, metavar="NODES", help="nodes gained")
    ev.add_argument("--precompute", type=int, metavar="K", help="a row per loss of 1..K nodes")
    r.add_argument("--compatibility", choices=["SAME_MODEL_PARALLEL", "SAME_TP", "FREE"])
    r.add_argument("--checkpoint-reshard", choices=["DP_ONLY", "FULL"])
    r.add_argument("--no-idle-gpus", action="store_true", help="use every GPU left")
    r.set_defaults(fn=run_replan)
    a = sub.add_parser("admit", help="fewest (or cheapest) GPUs per type that meet a deadline")
    _common(a, pins=True)
    _clusters(a)
    _grid(a)
    a.add_argument("--tokens", type=int, help="training tokens left")
    a.add_argument("--steps", type=int, help="optimizer steps left")
    a.add_argument("--deadline-hours", type=float, help="hours from now to the deadline")
    a.add_argument("--deadline-unix", type=float, help="deadline as a Unix time (s)")
    a.add_argument("--startup-overhead", type=float, metavar="S", help="start-up time (s)")
    a.add_argument("--downtime", type=float, metavar="FRACTION", help="share of time lost")
    a.add_argument("--band-upper", action="store_true", help="plan on the band's slow end")
    a.add_argument("--objective", choices=["FEWEST_GPUS", "CHEAPEST", "FEWEST_GPU_HOURS"])
    a.set_defaults(fn=run_admit)
    f = sub.add_parser("front", help="days against GPU-hours and cost for a token budget")
    _common(f, pins=True)
    _clusters(f)
    _grid(f)
    f.add_argument("--token-budget", type=int, help="tokens to train")
    f.add_argument("--plot", help="draw the front to this PNG")
    f.set_defaults(fn=run_front)


def _common(p: argparse.ArgumentParser, pins: bool) -> None:
    p.add_argument("--request", help="a full request as JSON (the contract's names); flags win")
    p.add_argument("--model", help="catalog name (e.g. llama3-70b) or a HF config.json path")
    p.add_argument("--seq-len", type=int)
    p.add_argument("--precision", choices=["BF16", "FP8"])
    p.add_argument(
        "--framework", choices=["GENERIC", "KEMPNERFORGE", "MEGATRON", "TORCHTITAN", "DEEPSPEED"]
    )
    p.add_argument("--critical-batch-tokens", type=int)
    p.add_argument(
        "--batch",
        choices=["fixed-global", "per-replica", "free"],
        help="batch policy: every cell trains --global-batch-tokens, or --per-replica-batch-"
        "tokens x dp, or the planner chooses up to --max-global-batch-tokens",
    )
    for name in ("global", "per_replica", "min_global", "max_global"):
        p.add_argument(f"--{name.replace('_', '-')}-batch-tokens", type=int)
    p.add_argument("--noise-scale-tokens", type=float, help="gradient noise scale (goodput)")
    p.add_argument("--reference-batch-tokens", type=int, help="batch of efficiency 1 (goodput)")
    p.add_argument("--observations", help="JSON list of measured cells (see the README)")
    p.add_argument("--cell-time-limit", type=float, help="solve time cap per cell (s)")
    if pins:
        for name in PINS:
            p.add_argument("--" + name.replace("_", "-"), type=int, dest=name, help="pin")
        p.add_argument("--zero-stage", type=int, choices=[0, 1, 2, 3], help="pin")
        p.add_argument("--recompute", choices=["NONE", "SELECTIVE", "FULL"], help="pin")
    p.add_argument("--server", help="HOST:PORT of a meshplan server (default: in-process)")
    p.add_argument("--timeout", type=float, default=600.0, help="deadline of a --server call (s)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the answer as JSON")
    out.add_argument("--csv", action="store_true", help="print the rows as CSV")


def _clusters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu", help="comma-separated catalog GPUs, one curve each")
    p.add_argument("--gpus-per-node", type=int)
    p.add_argument("--max-gpus", help="comma-separated GPUs available per type")
    p.add_argument("--price", help="comma-separated price per GPU-hour per type")


def _grid(p: argparse.ArgumentParser) -> None:
    p.add_argument("--counts", help="comma-separated GPU counts")
    p.add_argument("--nodes", help="whole nodes MIN..MAX (or MAX)")
    p.add_argument("--sub-node", action="store_true", help="also 1, 2, 4, ... below a node")


def _list(text: str | None, kind: type, flag: str) -> list:
    if text is None:
        return []
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{flag}: expected comma-separated numbers, got {text!r}") from None


def _base(a: argparse.Namespace, pins: bool = True) -> dict:
    req: dict = json.loads(Path(a.request).read_text()) if a.request else {}
    if a.model:
        req.setdefault("model", {}).update(model_spec(a.model))
    training = req.setdefault("training", {})
    for key in ("seq_len", "precision", "framework", "critical_batch_tokens"):
        if getattr(a, key) is not None:
            training[key] = getattr(a, key)
    batch = req.setdefault("batch", {})
    if a.batch:
        kind = {"fixed-global": "FIXED_GLOBAL", "per-replica": "FIXED_PER_REPLICA"}
        batch["kind"] = kind.get(a.batch, "FREE")
    for name in ("global", "per_replica", "min_global", "max_global"):
        value = getattr(a, f"{name}_batch_tokens")
        if value is not None:
            batch[f"{name}_batch_tokens"] = value
    if a.noise_scale_tokens is not None or a.reference_batch_tokens is not None:
        batch["statistical_efficiency"] = {
            "noise_scale_tokens": a.noise_scale_tokens,
            "reference_batch_tokens": a.reference_batch_tokens,
        }
    if a.observations:
        req["observations"] = json.loads(Path(a.observations).read_text())
    options = req.setdefault("options", {})
    if a.cell_time_limit is not None:
        options["cell_time_limit_s"] = a.cell_time_limit
    if getattr(a, "knee_gain", None) is not None:
        options["knee_gain"] = a.knee_gain
    if pins:
        search = req.setdefault("search", {})
        for key in (*PINS, "zero_stage", "recompute"):
            if getattr(a, key) is not None:
                search[key] = getattr(a, key)
    if hasattr(a, "counts"):
        _apply_clusters(a, req)
    return req


def _apply_clusters(a: argparse.Namespace, req: dict) -> None:
    gpus = (a.gpu or "").split(",") if a.gpu else []
    clusters = req.get("clusters") or [{"gpu": g} for g in gpus] or [{}]
    if gpus and len(gpus) != len(clusters):
        clusters = [{"gpu": g} for g in gpus]
    for flag, key, kind in (("max_gpus", "max_gpus", int), ("price", "price_per_gpu_hour", float)):
        values = _list(getattr(a, flag), kind, f"--{flag.replace('_', '-')}")
        if len(values) == 1:
            values *= len(clusters)
        if values and len(values) != len(clusters):
            raise ValueError(f"--{flag.replace('_', '-')}: give one value or one per --gpu")
        for c, v in zip(clusters, values, strict=False):
            c[key] = v
    for c in clusters:
        if a.gpus_per_node is not None:
            c["gpus_per_node"] = a.gpus_per_node
    req["clusters"] = clusters
    grid = dict(req.get("grid") or {})
    if a.counts:
        grid["counts"] = _list(a.counts, int, "--counts")
    if a.nodes:
        lo, _, hi = a.nodes.partition("..")
        try:
            grid["min_nodes"], grid["max_nodes"] = (int(lo), int(hi)) if hi else (1, int(lo))
        except ValueError:
            raise ValueError(f"--nodes: expected MIN..MAX whole nodes, got {a.nodes!r}") from None
    if a.sub_node:
        grid["sub_node"] = True
    if grid:
        req["grid"] = grid


def _call(a: argparse.Namespace, method: str, req: Any) -> Any:
    """In-process, or through a server; a rejected request exits 2 like a local one."""
    if not a.server:
        from meshplan.solver import scheduler

        return getattr(scheduler, method)(req)
    from meshplan.client import InvalidRequestError, PlannerClient

    with PlannerClient(a.server) as client:
        try:
            return getattr(client, method)(req, timeout=a.timeout)
        except InvalidRequestError as err:
            fields = "; ".join(f"{v.field}: {v.description}" for v in err.violations)
            raise ValueError(fields or err.message) from None


def _emit(a: argparse.Namespace, answer: Any, table: str, rows: list[dict]) -> None:
    if a.json:
        print(answer.model_dump_json(indent=2))
    elif a.csv:
        from meshplan.tools.sched_render import write_csv

        write_csv(sys.stdout, rows)
    else:
        print(table)


def run_curve(a: argparse.Namespace) -> int:
    from meshplan.solver.scheduler import CellStatus, CurveRequest
    from meshplan.tools.sched_render import curve_rows, curve_table

    req = CurveRequest.model_validate(_base(a))
    res = _call(a, "scaling_curve", req)
    _emit(a, res, curve_table(res), curve_rows(res))
    if a.plot:
        from meshplan.tools.plots import describe
        from meshplan.tools.sched_plots import curve_plot

        out = curve_plot(a.plot, res, req.model.preset or "model")
        print(f"meshplan: {describe(out, 'scaling curve')}", file=sys.stderr)
    return 0 if any(c.status is CellStatus.PLANNED for c in res.cells) else INFEASIBLE


def run_replan(a: argparse.Namespace) -> int:
    from meshplan.solver.scheduler import CellStatus, ReplanRequest
    from meshplan.tools.sched_render import replan_rows, replan_table

    data = _base(a, pins=False)
    cluster = data.setdefault("cluster", {})
    for flag, key in (("gpu", "gpu"), ("gpus", "num_gpus"), ("gpus_per_node", "gpus_per_node")):
        if getattr(a, flag) is not None:
            cluster[key] = getattr(a, flag)
    config = data.setdefault("config", {})
    for key in (*PINS, "zero_stage", "recompute"):
        if getattr(a, key) is not None:
            config[key] = getattr(a, key)
    event = data.setdefault("event", {})
    if a.lose is not None:
        event["delta_nodes"] = -a.lose
    if a.gain is not None:
        event["delta_nodes"] = a.gain
    if a.precompute is not None:
        event["precompute_nodes"] = a.precompute
    for key in ("compatibility", "checkpoint_reshard"):
        if getattr(a, key):
            data[key] = getattr(a, key)
    if a.no_idle_gpus:
        data["allow_idle_gpus"] = False
    if not data["batch"]:
        data["batch"] = {"kind": "FIXED_GLOBAL"}  # keep the running global batch
    req = ReplanRequest.model_validate(data)
    res = _call(a, "replan", req)
    _emit(a, res, replan_table(res), replan_rows(res))
    return 0 if any(r.status is CellStatus.PLANNED for r in res.rows) else INFEASIBLE


def run_admit(a: argparse.Namespace) -> int:
    from meshplan.solver.scheduler import AdmitRequest
    from meshplan.tools.sched_render import admit_rows, admit_table

    data = _base(a)
    work = data.setdefault("work", {})
    if a.tokens is not None:
        work["tokens"] = a.tokens
    if a.steps is not None:
        work["steps"] = a.steps
    if a.deadline_hours is not None:
        data["deadline_s"] = a.deadline_hours * 3600
    if a.deadline_unix is not None:
        data["deadline_unix_s"] = a.deadline_unix
    for flag, key in (
        ("startup_overhead", "startup_overhead_s"),
        ("downtime", "downtime_fraction"),
        ("objective", "objective"),
    ):
        if getattr(a, flag) is not None:
            data[key] = getattr(a, flag)
    if a.band_upper:
        data["use_band_upper"] = True
    req = AdmitRequest.model_validate(data)
    res = _call(a, "smallest_allocation", req)
    _emit(a, res, admit_table(res), admit_rows(res))
    return 0 if res.feasible else INFEASIBLE


def run_front(a: argparse.Namespace) -> int:
    from meshplan.solver.scheduler import FrontRequest
    from meshplan.tools.sched_render import front_rows, front_table

    data = _base(a)
    if a.token_budget is not None:
        data["token_budget"] = a.token_budget
    req = FrontRequest.model_validate(data)
    res = _call(a, "training_front", req)
    _emit(a, res, front_table(res), front_rows(res))
    if a.plot:
        from meshplan.tools.plots import describe
        from meshplan.tools.sched_plots import front_plot

        out = front_plot(a.plot, res, req.model.preset or "model")
        print(f"meshplan: {describe(out, 'training front')}", file=sys.stderr)
    return 0 if res.points else INFEASIBLE
