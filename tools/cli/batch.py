"""CLI glue for remote calls: `meshplan plan|evaluate --server`, `meshplan batch`.

tools/cli/main.py wires these in; they print nothing except the batch progress bar (stderr,
tools/render/progress.py).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError

from meshplan.client.exceptions import PlannerError
from meshplan.client.sync import BatchItem, PlannerClient
from meshplan.solver.results import Evaluation, PlanResult
from meshplan.solver.schema import EvaluateRequest, PlanRequest
from meshplan.tools.cli.flags import add_ray_flag, add_server_flag
from meshplan.tools.cli.interrupt import sigterm_as_interrupt
from meshplan.tools.cli.messages import one_line, shorten
from meshplan.tools.cli.remote import connect
from meshplan.tools.render.progress import Progress
from meshplan.tools.sweep.ray_paths import ray_backend
from meshplan.tools.sweep.remote import send_chunks

_SLACK_S = 10.0  # deadline beyond the solve's own time limit: model build, transport
CSV_COLUMNS = [
    "index", "status", "error", "model", "gpu", "num_gpus", "tp", "pp", "dp", "cp", "ep",
    "virtual_stages", "micro_batch_size", "num_microbatches", "zero_stage", "recompute",
    "sequence_parallel", "step_time_s", "tokens_per_s", "mfu", "memory_total_bytes",
    "binding_wall", "min_gpus",
]  # fmt: skip


def remote_plan(
    target: str | list[str], req: PlanRequest, timeout: float | None = None
) -> PlanResult:
    """Plan on a server; the deadline defaults to the request's time limit plus slack."""
    with PlannerClient(target) as client:
        return client.plan(req, timeout=timeout or req.options.time_limit_s + _SLACK_S)


def remote_evaluate(
    target: str | list[str], req: EvaluateRequest, timeout: float | None = None
) -> Evaluation:
    """Evaluate on a server (deadline: `timeout` or 30 s)."""
    with PlannerClient(target) as client:
        return client.evaluate(req, timeout=timeout or 30.0)


def add_batch_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `meshplan batch` (run_batch reads them with getattr, so a subset works too)."""
    add_server_flag(
        parser, "the meshplan server(s) to send the requests to (required unless --ray)"
    )
    add_ray_flag(parser)
    parser.add_argument(
        "--jobs",
        type=int,
        default=0,
        metavar="N",
        help="with --ray: worker actors at most (count; default 0: one per CPU of the cluster)",
    )
    parser.add_argument(
        "--request",
        required=True,
        metavar="FILE",
        help="a JSON list of plan requests, one request, or JSON lines ('-': stdin)",
    )
    parser.add_argument(
        "--output",
        default="-",
        metavar="FILE",
        help="where the answers go, one row per request (default '-': stdout)",
    )
    parser.add_argument(
        "--format",
        choices=["jsonl", "csv"],
        default=None,
        help="jsonl or csv (default: csv if --output ends in .csv, else jsonl)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=3600.0,
        metavar="S",
        help="deadline of each PlanBatch call (s; default 3600)",
    )
    parser.add_argument(
        "--chunk-size",
        type=int,
        default=256,
        metavar="N",
        help="requests per PlanBatch call (count; default 256)",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: when stderr is a terminal)",
    )


def read_requests(path: str) -> list[PlanRequest]:
    """Plan requests from a JSON list, one JSON object, or JSON lines ('-' = stdin); ValueError
    naming the file and the item for anything wrong."""
    where = f"--request {shorten(path)!r}"
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(
            f"{where}: cannot read it: {getattr(err, 'strerror', None) or err}"
        ) from None
    stripped = text.strip()
    try:
        if stripped.startswith("["):
            items = json.loads(stripped)
        elif "\n" in stripped and stripped.startswith("{") and not _is_one_object(stripped):
            items = [json.loads(line) for line in stripped.splitlines() if line.strip()]
        else:
            items = [json.loads(stripped)]
    except json.JSONDecodeError as err:
        raise ValueError(f"{where}: not JSON or JSON lines: {err}") from None
    except RecursionError:
        raise ValueError(f"{where}: nested too deeply to read") from None
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValueError(
                f"{where}: request {i} must be a JSON object (a PlanRequest), got a "
                f"{type(item).__name__}"
            )
        try:
            out.append(PlanRequest.model_validate(item))
        except ValidationError as err:
            raise ValueError(f"{where}: request {i}: {one_line(err)}") from None
    return out


def _is_one_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except (json.JSONDecodeError, RecursionError):
        return False


def run_batch(args: argparse.Namespace) -> int:
    """Send the requests through PlanBatch; write one JSON line or CSV row per answer.

    Rows come in the order the server finishes them, each with its request's index. Exit 0 if
    every request got an answer (an infeasible plan is an answer), 1 if some failed or the
    server could not be reached, 2 on a bad input file.
    """
    try:
        ray = ray_backend(args)
        if ray is None and not getattr(args, "server", None):
            raise ValueError("--server or --ray: give where to solve the requests")
        reqs = read_requests(args.request)
    except ValueError as err:
        print(f"meshplan batch: {shorten(str(err))}", file=sys.stderr)
        return 2
    output = getattr(args, "output", "-") or "-"
    fmt = getattr(args, "format", None) or ("csv" if output.endswith(".csv") else "jsonl")
    show = getattr(args, "progress", None)
    bar = Progress(len(reqs), enabled=sys.stderr.isatty() if show is None else show)
    if ray is not None:  # the worker actors of a Ray cluster (tools/sweep/ray_paths.py)
        with _open(output) as out, ray, sigterm_as_interrupt():
            try:
                failed, first = _write_all(ray.batch(reqs), _writer(out, fmt, reqs), bar)
            finally:
                bar.close()
        return _said(failed, first, len(reqs))
    servers = [s for s in str(args.server).split(",") if s]
    with _open(output) as out, connect(args, servers) as client:
        try:
            items = _send(client, reqs, args, in_flight=len(servers))
            failed, first = _write_all(items, _writer(out, fmt, reqs), bar)
        except PlannerError as err:
            bar.close()
            print(f"meshplan batch: {shorten(str(err))}", file=sys.stderr)
            return 1
    bar.close()
    return _said(failed, first, len(reqs))


def _write_all(items: Iterator[BatchItem], write: Any, bar: Progress) -> tuple[int, str]:
    """Write every answer; (how many failed, the first failure in one line)."""
    failed, first = 0, ""
    for item in items:
        if item.error is not None:
            failed += 1
            first = first or f"request {item.index}: {_error_line(item.error)}"
        write(item)
        bar.update()
    return failed, first


def _said(failed: int, first: str, total: int) -> int:
    """The exit status, and the line that says how many failed (the rows say which and why;
    the exit status alone would leave the user guessing)."""
    if failed:
        print(
            f"meshplan batch: {failed} of {total} requests failed (ERROR rows); the first, "
            f"{shorten(first)}",
            file=sys.stderr,
        )
    return 1 if failed else 0


def _error_line(err: PlannerError) -> str:
    fields = "; ".join(f"{v.field}: {v.description}" for v in getattr(err, "violations", []))
    return f"{err.code.name}: {fields or err.message}"


def _send(
    client: PlannerClient, reqs: list[PlanRequest], args: argparse.Namespace, in_flight: int = 1
) -> Iterator[BatchItem]:
    chunk = max(1, getattr(args, "chunk_size", 256) or 256)
    timeout = getattr(args, "timeout", None) or 3600.0
    return send_chunks(client, reqs, chunk, timeout, in_flight)


def _open(output: str) -> Any:
    if output == "-":
        return _NoClose(sys.stdout)
    return open(output, "w", newline="", encoding="utf-8")  # noqa: SIM115


class _NoClose:
    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def __enter__(self) -> IO[str]:
        return self.stream

    def __exit__(self, *exc: object) -> None:
        self.stream.flush()


def _writer(out: IO[str], fmt: str, reqs: list[PlanRequest]) -> Any:
    if fmt == "jsonl":

        def write_json(item: BatchItem) -> None:
            row: dict[str, Any] = {"index": item.index}
            if item.result is not None:
                row["result"] = item.result.model_dump(mode="json")
            else:
                row["error"] = _error_dict(item.error)
            out.write(json.dumps(row) + "\n")
            out.flush()

        return write_json
    rows = csv.DictWriter(out, fieldnames=CSV_COLUMNS)
    rows.writeheader()

    def write_csv(item: BatchItem) -> None:
        rows.writerow(csv_row(item, reqs[item.index]))
        out.flush()

    return write_csv


def _error_dict(err: PlannerError | None) -> dict[str, Any]:
    if err is None:
        return {}
    violations = [
        {"field": v.field, "description": v.description} for v in getattr(err, "violations", [])
    ]
    return {"code": err.code.name, "message": err.message, "field_violations": violations}


def csv_row(item: BatchItem, req: PlanRequest) -> dict[str, Any]:
    """One CSV row: the request's names, the layout, the speed, the memory, the wall."""
    row: dict[str, Any] = {
        "index": item.index,
        "model": req.model.preset or "",
        "gpu": req.cluster.gpu,
        "num_gpus": req.cluster.num_gpus,
    }
    if item.error is not None:
        return row | {"status": "ERROR", "error": f"{item.error.code.name}: {item.error.message}"}
    res = item.result
    assert res is not None
    row["status"] = res.status.value
    if res.config is not None:
        cfg = res.config.model_dump(mode="json")
        row |= {k: cfg[k] for k in CSV_COLUMNS if k in cfg}
    if res.performance is not None:
        perf = res.performance
        row |= {"step_time_s": perf.step_time_s, "tokens_per_s": perf.tokens_per_s, "mfu": perf.mfu}
    if res.memory is not None:
        row["memory_total_bytes"] = res.memory.total
    row["binding_wall"] = res.binding_wall.value
    if res.explanation is not None:
        row["min_gpus"] = res.explanation.min_gpus
    return row
