"""`meshplan sweep` and `meshplan ladder`: flags and commands (wired in by tools/cli/main.py)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from meshplan.tools.cli.flags import (
    add_cell_pins,
    add_cluster_flags,
    add_memory_pins,
    add_ray_flag,
    add_server_flag,
    add_training_flags,
    plot_path,
)
from meshplan.tools.cli.inputs import request_from_flags
from meshplan.tools.cli.interrupt import Terminated
from meshplan.tools.sweep.grid import expand_models, parse_gpus, parse_ints
from meshplan.tools.sweep.ladder import SEED_RUNGS

MODELS_HELP = (
    "comma-separated: catalog names (llama3-70b), Hugging Face config.json paths, a family's "
    "catalog members in a size range (llama3:8b..405b, llama3:*), or family-shaped models "
    "scaled to sizes (llama3:3b, llama3:1b..64b:x2)"
)


def _knobs(p: argparse.ArgumentParser, lists: bool) -> None:
    """Request knobs shared by sweep and ladder (lists: GPU type, precision, seq_len are axes)."""
    many = " (comma-separated: one axis of the grid)" if lists else ""
    p.add_argument(
        "--request",
        metavar="FILE",
        help="a base PlanRequest as JSON; the grid and the flags override its fields "
        "(default: none)",
    )
    add_cluster_flags(p, many)
    add_training_flags(p, lists=many)
    add_cell_pins(p)
    add_memory_pins(p, evaluate=False)
    p.add_argument(
        "--allow-fewer-gpus",
        action="store_true",
        help="allow plans that leave some of the GPUs idle (default: use them all)",
    )
    p.add_argument(
        "--time-limit", type=float, metavar="S", help="solver time limit per plan (s; default 10)"
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=0,
        metavar="N",
        help="solver processes, or with --ray worker actors at most (count; default 0: one per "
        "CPU, of the cluster with --ray)",
    )
    add_server_flag(p, "solve on meshplan servers through PlanBatch (default: in-process)")
    p.add_argument(
        "--timeout",
        type=float,
        default=3600.0,
        metavar="S",
        help="deadline of one PlanBatch call (s; default 3600)",
    )


def add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of `meshplan sweep`."""
    p.add_argument("--models", required=True, metavar="MODELS", help=MODELS_HELP)
    p.add_argument(
        "--gpus",
        required=True,
        metavar="COUNTS",
        help="GPU counts: 8,64,512, or 8..16384 for 8, 16, 32, ... 16384 (doubling)",
    )
    _knobs(p, lists=True)
    add_ray_flag(p)
    p.add_argument(
        "--out",
        metavar="PREFIX",
        help="write PREFIX.csv and PREFIX.jsonl (one of --out, --csv, --jsonl is required)",
    )
    p.add_argument(
        "--csv", metavar="FILE", help="CSV path, instead of or as well as --out (default: none)"
    )
    p.add_argument(
        "--jsonl",
        metavar="FILE",
        help="JSON-lines path, instead of or as well as --out (default: none)",
    )
    p.add_argument(
        "--retry-errors",
        action="store_true",
        help="rerun the cells written as ERROR (default: keep them)",
    )
    p.add_argument(
        "--plot",
        metavar="FILE",
        type=plot_path,
        help="draw tokens/s and scaling efficiency against GPU count of every row; the suffix "
        "picks the format: .png, .svg or .pdf (default: no picture)",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: when stderr is a terminal)",
    )


def add_ladder_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of `meshplan ladder`."""
    p.add_argument(
        "--rungs",
        metavar="MODEL@GPUS,...",
        help=f"the rungs (default, without --models: {SEED_RUNGS}: a dense model from one "
        "node to a big cluster)",
    )
    p.add_argument(
        "--models", metavar="MODELS", help=MODELS_HELP + "; paired with --gpus (default: none)"
    )
    p.add_argument(
        "--gpus",
        metavar="COUNTS",
        help="GPU counts paired with --models, as many, or one (default: none)",
    )
    _knobs(p, lists=False)
    add_ray_flag(p)
    p.add_argument("--json", action="store_true", help="print the rungs as JSON instead of a table")
    p.add_argument(
        "--plot",
        metavar="FILE",
        type=plot_path,
        help="draw one bar per rung, its parallel degrees stacked; the suffix picks the "
        "format: .png, .svg or .pdf (default: no picture)",
    )


def base_request(a: argparse.Namespace) -> dict[str, Any]:
    """The flags that are not axes of the grid, as a request dict (the same rules as `plan`)."""
    ns = argparse.Namespace(**vars(a))
    for grid_flag in ("model", "gpu", "gpus", "seq_len", "precision", "top_k", "emit"):
        setattr(ns, grid_flag, None)
    req = request_from_flags(ns, evaluate=False)
    req.pop("model", None)
    if isinstance(req.get("cluster"), dict):
        req["cluster"].pop("num_gpus", None)
    if a.gpu and "," not in a.gpu:
        req.setdefault("cluster", {})["gpu"] = a.gpu.strip()
    return req


def _axis(text: str | None, name: str, allowed: tuple[str, ...] = ()) -> list[Any]:
    if not text:
        return [None]
    items = [t.strip().upper() if allowed else t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if allowed and t not in allowed]
    if not items or bad:
        raise ValueError(f"{name}: {text!r} must list values from {', '.join(allowed) or 'names'}")
    return list(dict.fromkeys(items))


def _servers(a: argparse.Namespace) -> list[str]:
    return [s for s in (a.server or "").split(",") if s.strip()]


def cmd_sweep(a: argparse.Namespace) -> int:
    from meshplan.tools.render.plots import describe, scaling_plot
    from meshplan.tools.sweep.files import SweepFiles, run_sweep
    from meshplan.tools.sweep.scaling import scaling_series
    from meshplan.tools.sweep.solve import build_jobs

    models, gpus = expand_models(a.models), parse_gpus(a.gpus)
    seqs = parse_ints(a.seq_len, "--seq-len") if a.seq_len else [None]
    jobs = build_jobs(
        models,
        gpus,
        seq_lens=seqs,
        gpu_types=_axis(a.gpu, "--gpu"),
        precisions=_axis(a.precision, "--precision", ("BF16", "FP8")),
        base=base_request(a),
    )
    csv_path = Path(a.csv) if a.csv else Path(a.out + ".csv") if a.out else None
    jsonl_path = Path(a.jsonl) if a.jsonl else Path(a.out + ".jsonl") if a.out else None
    t0 = time.monotonic()
    show = sys.stderr.isatty() if a.progress is None else a.progress
    from meshplan.tools.sweep.ray_paths import ray_backend

    ray = ray_backend(a)
    with SweepFiles(csv_path, jsonl_path, a.retry_errors) as files, ray or nullcontext():
        try:
            stats = run_sweep(
                jobs,
                files,
                workers=a.jobs,
                servers=_servers(a),
                timeout=a.timeout,
                progress=show,
                ray=ray,
            )
        except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (Terminated): workers stopped
            how = "terminated" if isinstance(e, Terminated) else "interrupted"
            print(f"meshplan sweep: {how}; rows written are kept: rerun to resume", file=sys.stderr)
            return 143 if isinstance(e, Terminated) else 130
        keys = {j.key for j in jobs}
        rows = [r for r in files.rows if r.get("key") in keys]
    counts = ", ".join(f"{n} {s}" for s, n in sorted(stats.statuses.items())) or "nothing new"
    where = ", ".join(str(p) for p in (csv_path, jsonl_path) if p)
    print(
        f"meshplan sweep: {stats.total} cells: {stats.skipped} already written, {stats.solved} "
        f"run ({counts}) in {time.monotonic() - t0:.1f} s; rows in {where}",
        file=sys.stderr,
    )
    if a.plot:
        path = scaling_plot(a.plot, scaling_series(rows))
        print(f"meshplan sweep: {describe(path, 'scaling curve')}", file=sys.stderr)
    return 1 if any(r.get("status") == "ERROR" for r in rows) else 0


def cmd_ladder(a: argparse.Namespace) -> int:
    from meshplan.tools.render.plots import describe, ladder_plot
    from meshplan.tools.sweep.ladder import (
        SEED_RUNGS,
        climb,
        pair,
        parse_rungs,
        render_ladder,
        rung_models,
        rung_row,
    )

    if a.rungs or not a.models:
        if a.models or a.gpus:
            raise ValueError("--rungs: give --rungs, or --models with --gpus, not both")
        rungs = rung_models(parse_rungs(a.rungs or SEED_RUNGS))
    else:
        if not a.gpus:
            raise ValueError("--gpus: needed with --models")
        counts = parse_gpus(a.gpus) if ".." in a.gpus else parse_ints(a.gpus, "--gpus", False)
        rungs = pair(expand_models(a.models), counts)
    if a.gpu and "," in a.gpu:
        raise ValueError(f"--gpu: the ladder takes one GPU type, got {a.gpu!r}")
    base = base_request(a)
    if a.seq_len:
        seqs = parse_ints(a.seq_len, "--seq-len")
        if len(seqs) > 1:
            raise ValueError(f"--seq-len: the ladder takes one sequence length, got {a.seq_len!r}")
        base.setdefault("training", {})["seq_len"] = seqs[0]
    if a.precision:
        (prec,) = _axis(a.precision, "--precision", ("BF16", "FP8"))
        base.setdefault("training", {})["precision"] = prec
    from meshplan.tools.sweep.ray_paths import ray_backend

    ray = ray_backend(a)
    with ray or nullcontext():
        out = climb(rungs, base, workers=a.jobs, servers=_servers(a), timeout=a.timeout, ray=ray)
    print(json.dumps([rung_row(r) for r in out], indent=2) if a.json else render_ladder(out))
    if a.plot:
        print(f"meshplan ladder: {describe(ladder_plot(a.plot, out), 'ladder')}", file=sys.stderr)
    return 1 if any(r.error for r in out) else 0
