"""`meshplan curve|replan|admit|front`: the scheduler queries from the command line.

Each prints one artefact on stdout (a table, or --json, or --csv); --plot writes a PNG and says
so on stderr. Exit status: 0 answered, 3 nothing can be planned / the deadline cannot be met,
2 bad input (one line naming the field), 1 anything else.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from meshplan.tools.cli.flags import (
    FRAMEWORKS,
    PIN_WORDS,
    PINS,
    PRECISIONS,
    RECOMPUTES,
    add_memory_pins,
    add_server_flag,
    plot_path,
    tokens,
)
from meshplan.tools.cli.inputs import model_spec, read_json_file

INFEASIBLE = 3


def add_curve_arguments(c: argparse.ArgumentParser) -> None:
    """Flags of `meshplan curve`."""
    _common(c, pins=True)
    _clusters(c)
    _grid(c)
    c.add_argument(
        "--knee-gain",
        type=float,
        metavar="FRACTION",
        help="the knee: the smallest count past which the envelope gains less than this per "
        "doubling (fraction; default 0.05)",
    )
    c.add_argument(
        "--plot",
        type=plot_path,
        metavar="FILE",
        help="draw goodput and its envelope against GPUs (PNG, SVG or PDF by suffix; default: "
        "no picture)",
    )


def add_replan_arguments(r: argparse.ArgumentParser) -> None:
    """Flags of `meshplan replan`."""
    _common(r, pins=False)
    r.add_argument(
        "--gpu", metavar="NAME", help="catalog GPU of the running cluster (default h100-sxm-80gb)"
    )
    r.add_argument(
        "--gpus", type=int, metavar="N", help="GPUs the job runs on now (count; required)"
    )
    r.add_argument(
        "--gpus-per-node",
        type=int,
        metavar="N",
        help="GPUs per node (count; default: the catalog's)",
    )
    for name in (*PINS, "zero_stage"):
        what, unit = PIN_WORDS.get(name, (name.replace("_", " "), "count"))
        r.add_argument(
            "--" + name.replace("_", "-"),
            type=int,
            dest=name,
            metavar="N",
            help=f"the running layout's {what} ({unit}; default: 1, or required for tp, pp, dp, "
            "micro-batch size)",
        )
    r.add_argument(
        "--recompute",
        type=str.upper,
        choices=RECOMPUTES,
        help="the running layout's recomputation, any case (default NONE)",
    )
    ev = r.add_mutually_exclusive_group()
    ev.add_argument("--lose", type=int, metavar="NODES", help="nodes lost (count; default 1)")
    ev.add_argument("--gain", type=int, metavar="NODES", help="nodes gained (count; default 0)")
    ev.add_argument(
        "--precompute",
        type=int,
        metavar="K",
        help="a row per loss of 1..K nodes, the table an elastic job reads at restart "
        "(count; default: one event)",
    )
    r.add_argument(
        "--compatibility",
        type=str.upper,
        choices=["SAME_MODEL_PARALLEL", "SAME_TP", "FREE"],
        help="what the new layout keeps: every model-parallel degree (dp changes), tp, or "
        "nothing (default SAME_MODEL_PARALLEL)",
    )
    r.add_argument(
        "--checkpoint-reshard",
        type=str.upper,
        choices=["DP_ONLY", "FULL"],
        help="how the checkpoint can be resharded (default DP_ONLY, Megatron-Core's "
        "distributed optimizer)",
    )
    r.add_argument(
        "--no-idle-gpus",
        action="store_true",
        help="use every GPU left (default: a layout may leave some idle)",
    )


def add_admit_arguments(a: argparse.ArgumentParser) -> None:
    """Flags of `meshplan admit`."""
    _common(a, pins=True)
    _clusters(a)
    _grid(a)
    a.add_argument(
        "--tokens",
        type=tokens,
        metavar="TOKENS",
        help="training tokens left (tokens, e.g. 2T; required unless --steps)",
    )
    a.add_argument(
        "--steps",
        type=int,
        metavar="N",
        help="optimizer steps left (count; required unless --tokens)",
    )
    a.add_argument(
        "--deadline-hours",
        type=float,
        metavar="H",
        help="hours from now to the deadline (hours; give it or --deadline-unix; default: none)",
    )
    a.add_argument(
        "--deadline-unix",
        type=float,
        metavar="T",
        help="deadline as a Unix time (s; default: none)",
    )
    a.add_argument(
        "--startup-overhead",
        type=float,
        metavar="S",
        help="time to start the job before the first step (s; default 0)",
    )
    a.add_argument(
        "--downtime",
        type=float,
        metavar="FRACTION",
        help="share of wall time lost to failures and restarts (fraction; default 0)",
    )
    a.add_argument(
        "--band-upper",
        action="store_true",
        help="plan on the slow end of the uncertainty band (default: the prediction)",
    )
    a.add_argument(
        "--objective",
        type=str.upper,
        choices=["FEWEST_GPUS", "CHEAPEST", "FEWEST_GPU_HOURS"],
        help="how the overall pick is made, any case (default FEWEST_GPUS)",
    )


def add_front_arguments(f: argparse.ArgumentParser) -> None:
    """Flags of `meshplan front`."""
    _common(f, pins=True)
    _clusters(f)
    _grid(f)
    f.add_argument(
        "--token-budget",
        type=tokens,
        metavar="TOKENS",
        help="tokens to train (tokens, e.g. 15T; required)",
    )
    f.add_argument(
        "--plot",
        type=plot_path,
        metavar="FILE",
        help="draw the front (PNG, SVG or PDF by suffix; default: no picture)",
    )


def _common(p: argparse.ArgumentParser, pins: bool) -> None:
    p.add_argument(
        "--request",
        metavar="FILE",
        help="a full request as JSON with the contract's field names, '-' for stdin; flags "
        "written over it (default: none)",
    )
    p.add_argument(
        "--model",
        metavar="NAME|PATH",
        help="a catalog model (e.g. llama3-70b) or a Hugging Face config.json or its directory "
        "(required unless --request names it)",
    )
    p.add_argument(
        "--seq-len", type=int, metavar="TOKENS", help="sequence length (tokens; default 8192)"
    )
    p.add_argument(
        "--precision",
        type=str.upper,
        choices=PRECISIONS,
        help="training precision, any case (default BF16)",
    )
    p.add_argument(
        "--framework",
        type=str.upper,
        choices=FRAMEWORKS,
        help="the framework profile, any case (default: the planner's default profile)",
    )
    p.add_argument(
        "--critical-batch-tokens",
        type=int,
        metavar="TOKENS",
        help="cap on the global batch (tokens; default: the planner's scaling-law cap)",
    )
    p.add_argument(
        "--batch",
        type=str.lower,
        choices=["fixed-global", "per-replica", "free"],
        help="batch policy: every cell trains --global-batch-tokens, or --per-replica-batch-"
        "tokens x dp, or the planner chooses up to --max-global-batch-tokens (default: "
        "fixed-global when --global-batch-tokens is given, else free)",
    )
    for name, what in (
        ("global", "the global batch every cell trains"),
        ("per_replica", "tokens per data-parallel replica"),
        ("min_global", "the least global batch under the free policy"),
        ("max_global", "the largest global batch under the free policy"),
    ):
        p.add_argument(
            f"--{name.replace('_', '-')}-batch-tokens",
            type=int,
            metavar="TOKENS",
            help=f"{what} (tokens; default: none)",
        )
    p.add_argument(
        "--noise-scale-tokens",
        type=float,
        metavar="TOKENS",
        help="gradient noise scale for goodput, Pollux's statistical efficiency (tokens; "
        "default: none, goodput = throughput)",
    )
    p.add_argument(
        "--reference-batch-tokens",
        type=int,
        metavar="TOKENS",
        help="the batch of statistical efficiency 1 (tokens; default: the smallest cell's)",
    )
    p.add_argument(
        "--observations",
        metavar="FILE",
        help="JSON list of measured cells (layout + step time) to correct the curve (default: "
        "none)",
    )
    p.add_argument(
        "--cell-time-limit",
        type=float,
        metavar="S",
        help="solve time cap per cell (s; default 10)",
    )
    if pins:
        for name in PINS:
            what, unit = PIN_WORDS.get(name, (name.replace("_", " "), "count"))
            p.add_argument(
                "--" + name.replace("_", "-"),
                type=int,
                dest=name,
                metavar="N",
                help=f"pin {what} in every cell ({unit}; default: free)",
            )
        add_memory_pins(p, evaluate=False)
    add_server_flag(p, "HOST:PORT of a meshplan server (default: in-process)")
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="deadline of a --server call (s; default 600)",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the answer as JSON")
    out.add_argument("--csv", action="store_true", help="print the rows as CSV")


def _clusters(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--gpu",
        metavar="NAMES",
        help="comma-separated catalog GPUs, one curve each (default h100-sxm-80gb)",
    )
    p.add_argument(
        "--gpus-per-node", type=int, metavar="N", help="GPUs per node (count; default: catalog)"
    )
    p.add_argument(
        "--max-gpus",
        metavar="N[,N...]",
        help="GPUs available per type, one value or one per --gpu (count; default: no limit)",
    )
    p.add_argument(
        "--price",
        metavar="USD[,USD...]",
        help="price per GPU-hour per type, one value or one per --gpu (USD; default: none)",
    )


def _grid(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--counts",
        metavar="N[,N...]",
        help="comma-separated GPU counts (count; default: 1, 2, 4, 8, then whole nodes)",
    )
    p.add_argument(
        "--nodes",
        metavar="MIN..MAX",
        help="whole nodes MIN..MAX, or MAX (nodes; default: see --counts)",
    )
    p.add_argument(
        "--sub-node",
        action="store_true",
        help="also 1, 2, 4, ... GPUs below a node (default: whole nodes only with --nodes)",
    )


def _list(text: str | None, kind: type, flag: str) -> list:
    if text is None:
        return []
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{flag}: expected comma-separated numbers, got {text!r}") from None


def _base(a: argparse.Namespace, pins: bool = True) -> dict:
    req: Any = read_json_file(a.request) if a.request else {}
    if not isinstance(req, dict):
        raise ValueError(f"--request: must hold a JSON object, got {type(req).__name__}")
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
        req["observations"] = read_json_file(a.observations, "--observations")
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
        if a.sequence_parallel is not None:
            search["sequence_parallel"] = a.sequence_parallel == "true"
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
    from meshplan.client import InvalidRequestError
    from meshplan.tools.cli.remote import connect

    with connect(a) as client:
        try:
            return getattr(client, method)(req, timeout=a.timeout)
        except InvalidRequestError as err:
            fields = "; ".join(f"{v.field}: {v.description}" for v in err.violations)
            raise ValueError(fields or err.message) from None


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

    req = CurveRequest.model_validate(_base(a))
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
    from meshplan.tools.render.scheduler_tables import admit_rows, admit_table

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
    from meshplan.tools.render.scheduler_tables import front_rows, front_table

    data = _base(a)
    if a.token_budget is not None:
        data["token_budget"] = a.token_budget
    req = FrontRequest.model_validate(data)
    res = _call(a, "training_front", req)
    _emit(a, res, front_table(res), front_rows(res))
    if a.plot:
        from meshplan.tools.render.plots import describe
        from meshplan.tools.render.scheduler_plots import front_plot

        out = front_plot(a.plot, res, req.model.preset or "model")
        print(f"meshplan: {describe(out, 'training front')}", file=sys.stderr)
    return 0 if res.points else INFEASIBLE
