"""Flags of `meshplan curve|replan|admit|front` (tools/cli/scheduler.py turns them into requests).

Every default a flag's help states is the default the command applies; each command's --help
ends with its own exit statuses.
"""

from __future__ import annotations

import argparse

from meshplan.tools.cli.flags import (
    FRAMEWORKS,
    PIN_WORDS,
    PINS,
    PRECISIONS,
    RECOMPUTES,
    add_cell_pins,
    add_memory_pins,
    add_ray_flag,
    add_server_flag,
    non_negative,
    plot_path,
    tokens,
)

COMPATIBILITY = ("SAME_MODEL_PARALLEL", "SAME_TP", "FREE")
RESHARD = ("DP_ONLY", "FULL")
BATCH_KINDS = {"fixed-global": "FIXED_GLOBAL", "per-replica": "FIXED_PER_REPLICA", "free": "FREE"}


def _exit_codes(answered: str, nothing: str) -> str:
    return (
        "exit status:\n"
        f"  0    {answered}\n"
        "  1    anything else: a server that does not answer, a solve that failed\n"
        "  2    bad input: a flag, a request field or a file; one line on stderr names it\n"
        f"  3    {nothing}\n"
        "  130  interrupted (Ctrl-C)\n"
    )


CURVE_EXIT = _exit_codes("at least one cell was planned", "no cell of the grid can be planned")
REPLAN_EXIT = _exit_codes(
    "at least one row was planned at the compatibility level",
    "no row can be planned at the level (each row says the least level that fits)",
)
ADMIT_EXIT = _exit_codes(
    "an allocation meets the deadline (the pick)",
    "no allocation meets the deadline (each type says its earliest finish)",
)
GRID_REQUIRED = "this or --nodes is required"
FRONT_EXIT = _exit_codes("the front has at least one point", "no cell can be planned")


def add_curve_arguments(c: argparse.ArgumentParser) -> None:
    """Flags of `meshplan curve`."""
    _common(c, pins=True)
    _clusters(c)
    _grid(c, GRID_REQUIRED)
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
    c.epilog = CURVE_EXIT


# The running layout's flags: (help, default) per pin; None: required.
_RUNNING = {
    "tp": "required",
    "pp": "required",
    "dp": "required",
    "cp": "default 1",
    "ep": "default 1",
    "virtual_stages": "default 1",
    "micro_batch_size": "required",
    "num_microbatches": "required unless --global-batch-tokens gives the running batch",
}


def add_replan_arguments(r: argparse.ArgumentParser) -> None:
    """Flags of `meshplan replan`."""
    _common(r, pins=False, batch="fixed-global at the running layout's batch")
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
    for name in PINS:
        what, unit = PIN_WORDS[name]
        r.add_argument(
            "--" + name.replace("_", "-"),
            type=int,
            dest=name,
            metavar="N",
            help=f"the running layout's {what} ({unit}; {_RUNNING[name]})",
        )
    r.add_argument(
        "--zero-stage",
        type=int,
        choices=[0, 1, 2, 3],
        help="the running layout's ZeRO stage (default: 1, or 0 when dp*cp = 1)",
    )
    r.add_argument(
        "--recompute",
        type=str.upper,
        choices=RECOMPUTES,
        help="the running layout's recomputation, any case (default NONE)",
    )
    ev = r.add_mutually_exclusive_group()
    ev.add_argument(
        "--lose", type=int, metavar="NODES", help="nodes lost (count; default 1 with no event)"
    )
    ev.add_argument("--gain", type=int, metavar="NODES", help="nodes gained (count; default: none)")
    ev.add_argument(
        "--precompute",
        type=int,
        metavar="K",
        help="a row per loss of 1..K nodes, the table an elastic job reads at restart "
        "(count; default: one event, --lose 1)",
    )
    r.add_argument(
        "--compatibility",
        type=str.upper,
        choices=COMPATIBILITY,
        help="what the new layout keeps, any case: every model-parallel degree (dp changes), tp, "
        "or nothing (default SAME_MODEL_PARALLEL)",
    )
    r.add_argument(
        "--checkpoint-reshard",
        type=str.upper,
        choices=RESHARD,
        help="how the checkpoint reloads, any case: DP_ONLY across data parallelism only (then "
        "only SAME_MODEL_PARALLEL), FULL to any layout, as Megatron-Core's distributed "
        "checkpoints do (default FULL)",
    )
    r.add_argument(
        "--no-idle-gpus",
        action="store_true",
        help="use every GPU left (default: a layout may leave some idle)",
    )
    r.epilog = REPLAN_EXIT


def add_admit_arguments(a: argparse.ArgumentParser) -> None:
    """Flags of `meshplan admit`."""
    _common(a, pins=True)
    _clusters(a, "required: the GPUs of each type available")
    _grid(a, "default: 1, 2, 4, ... below a node, then whole nodes up to --max-gpus")
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
        type=non_negative,
        metavar="H",
        help="hours from now to the deadline (hours; this or --deadline-unix is required)",
    )
    a.add_argument(
        "--deadline-unix",
        type=non_negative,
        metavar="T",
        help="deadline as a Unix time (s; this or --deadline-hours is required)",
    )
    a.add_argument(
        "--startup-overhead",
        type=non_negative,
        metavar="S",
        help="time to start the job before the first step (s; default 0)",
    )
    a.add_argument(
        "--downtime",
        type=non_negative,
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
    a.epilog = ADMIT_EXIT


def add_front_arguments(f: argparse.ArgumentParser) -> None:
    """Flags of `meshplan front`."""
    _common(f, pins=True)
    _clusters(f)
    _grid(f, GRID_REQUIRED)
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
    f.epilog = FRONT_EXIT


def _common(p: argparse.ArgumentParser, pins: bool, batch: str = "free") -> None:
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
        "--seq-len", type=tokens, metavar="TOKENS", help="sequence length (tokens; default 8192)"
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
        help="the framework profile, any case (default MEGATRON)",
    )
    p.add_argument(
        "--critical-batch-tokens",
        type=tokens,
        metavar="TOKENS",
        help="cap on the global batch (tokens, e.g. 16M; default: the planner's scaling-law cap)",
    )
    p.add_argument(
        "--batch",
        type=str.lower,
        choices=list(BATCH_KINDS),
        help="batch policy: every cell trains --global-batch-tokens, or --per-replica-batch-"
        "tokens x dp, or the planner chooses up to --max-global-batch-tokens (default: "
        "fixed-global when --global-batch-tokens is given, per-replica when "
        f"--per-replica-batch-tokens is, else {batch})",
    )
    for name, what in (
        ("global", "the global batch every cell trains"),
        ("per_replica", "tokens per data-parallel replica"),
        ("min_global", "the least global batch under the free policy"),
        ("max_global", "the largest global batch under the free policy"),
    ):
        p.add_argument(
            f"--{name.replace('_', '-')}-batch-tokens",
            type=tokens,
            metavar="TOKENS",
            help=f"{what} (tokens, e.g. 4M; default: none)",
        )
    p.add_argument(
        "--noise-scale-tokens",
        type=tokens,
        metavar="TOKENS",
        help="gradient noise scale for goodput, Pollux's statistical efficiency (tokens; "
        "default: none, goodput = throughput)",
    )
    p.add_argument(
        "--reference-batch-tokens",
        type=tokens,
        metavar="TOKENS",
        help="the batch of statistical efficiency 1 (tokens; required with --noise-scale-tokens)",
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
        add_cell_pins(p)
        add_memory_pins(p, evaluate=False)
    add_server_flag(p, "HOST:PORT of a meshplan server (default: in-process)")
    add_ray_flag(p)
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


def _clusters(p: argparse.ArgumentParser, cap: str = "default: no limit") -> None:
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
        help=f"GPUs available per type, one value or one per --gpu (count; {cap})",
    )
    p.add_argument(
        "--price",
        metavar="USD[,USD...]",
        help="price per GPU-hour per type, one value or one per --gpu (USD; default: none)",
    )


def _grid(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument(
        "--counts",
        metavar="N[,N...]",
        help=f"comma-separated GPU counts (count; {default})",
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
