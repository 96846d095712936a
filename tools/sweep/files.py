"""A sweep's files (CSV and JSON lines, resumable) and the run loop (its progress bar is
tools/render/progress.py's)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from meshplan.tools.render.progress import Progress
from meshplan.tools.sweep.solve import (
    Job,
    Outcome,
    Stats,
    flat_row,
    full_row,
    pending,
    solve_local,
    solve_remote,
)

if TYPE_CHECKING:
    from meshplan.tools.sweep.ray_paths import RayBackend

CSV_COLUMNS = [
    "key", "model", "gpu", "num_gpus", "seq_len", "precision", "global_batch_tokens",
    "critical_batch_tokens", "train_tokens", "batch_cap_tokens", "status", "error", "reason", "min_gpus", "total_params",
    "active_params", "tp", "pp", "dp", "cp", "ep", "virtual_stages", "micro_batch_size",
    "num_microbatches", "zero_stage", "recompute", "sequence_parallel", "num_gpus_used",
    "plan_global_batch_tokens", "step_time_s", "tokens_per_s", "mfu", "model_flops_per_token",
    "bubble_fraction", "memory_total_bytes", "hbm_bytes", "binding_wall", "warnings",
    "solver_status", "wall_time_s",
]  # fmt: skip


class SweepFiles:
    """The output of a sweep: a CSV and/or a JSON-lines file, appended one row per cell.

    On open, the rows already written are read (from the JSON lines if there are any, else from
    the CSV): their keys are done. A line cut short by a kill is dropped; with `retry_errors`,
    ERROR rows are dropped too so that their cells run again. The CSV is rewritten from the rows
    kept, so both files hold the same cells.
    """

    def __init__(
        self, csv_path: Path | None, jsonl_path: Path | None, retry_errors: bool = False
    ) -> None:
        if csv_path is None and jsonl_path is None:
            raise ValueError("--out: give --out PREFIX, --csv PATH or --jsonl PATH")
        self.csv_path, self.jsonl_path = csv_path, jsonl_path
        self.rows: list[dict[str, Any]] = []
        lines: list[str] = []
        if jsonl_path is not None and jsonl_path.exists():
            for line in jsonl_path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # cut short by a kill: the cell runs again
                if isinstance(row, dict) and "key" in row:
                    self.rows.append(row)
                    lines.append(line)
        elif csv_path is not None and csv_path.exists():
            with csv_path.open(newline="", encoding="utf-8") as f:
                self.rows = [r for r in csv.DictReader(f) if r.get("key")]
        if retry_errors:
            keep = [i for i, r in enumerate(self.rows) if r.get("status") != "ERROR"]
            self.rows = [self.rows[i] for i in keep]
            lines = [lines[i] for i in keep] if lines else lines
        self._jsonl: TextIO | None = None
        self._csv: TextIO | None = None
        if jsonl_path is not None:
            jsonl_path.parent.mkdir(parents=True, exist_ok=True)
            jsonl_path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
            self._jsonl = jsonl_path.open("a", encoding="utf-8")
        if csv_path is not None:
            csv_path.parent.mkdir(parents=True, exist_ok=True)
            self._csv = csv_path.open("w", newline="", encoding="utf-8")
            self._writer = csv.DictWriter(self._csv, CSV_COLUMNS, extrasaction="ignore")
            self._writer.writeheader()
            for r in self.rows:
                self._writer.writerow(r)
            self._csv.flush()

    @property
    def done(self) -> set[str]:
        """Keys of the cells written."""
        return {str(r["key"]) for r in self.rows}

    def write(self, out: Outcome) -> dict[str, Any]:
        """Append one cell to both files (flushed at once, so a kill loses at most this row)."""
        row = full_row(out)
        if self._jsonl is not None:
            self._jsonl.write(json.dumps(row) + "\n")
            self._jsonl.flush()
        if self._csv is not None:
            self._writer.writerow(flat_row(out))
            self._csv.flush()
        self.rows.append(row)
        return row

    def close(self) -> None:
        """Close both files."""
        for f in (self._jsonl, self._csv):
            if f is not None:
                f.close()

    def __enter__(self) -> SweepFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_sweep(
    jobs: Sequence[Job],
    files: SweepFiles,
    *,
    workers: int = 0,
    servers: Sequence[str] = (),
    timeout: float = 3600.0,
    progress: bool = False,
    ray: RayBackend | None = None,
) -> Stats:
    """Solve the cells not yet written and append them to `files`; returns what it did. With
    `ray` (tools/sweep/ray_paths.py) the cells run on its cluster's worker actors."""
    todo = pending(jobs, files.done)
    stats = Stats(total=len(jobs), skipped=len(jobs) - len(todo))
    bar = Progress(stats.total, stats.skipped, enabled=progress)
    if ray is not None:
        outcomes: Iterator[Outcome] = _on_ray(ray, todo)
    elif servers:
        outcomes = solve_remote(todo, servers, timeout)
    else:
        outcomes = solve_local(todo, workers)
    written = files.done
    try:
        for out in outcomes:
            if out.job.key in written:  # a cell answered twice is written once
                continue
            written.add(out.job.key)
            row = files.write(out)
            stats.solved += 1
            stats.statuses[row["status"]] = stats.statuses.get(row["status"], 0) + 1
            bar.update(row["status"])
    finally:
        bar.close()
    return stats


def _on_ray(ray: RayBackend, jobs: Sequence[Job]) -> Iterator[Outcome]:
    """The cells on Ray; SIGTERM stops them as Ctrl-C does (the actors are killed)."""
    from meshplan.tools.cli.interrupt import sigterm_as_interrupt

    with sigterm_as_interrupt():
        yield from ray.sweep(jobs)
