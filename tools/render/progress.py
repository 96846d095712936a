"""The progress bar of `meshplan sweep` and `meshplan batch` on stderr (rich's), counting the
rows by status: [━━━━━━━      ] 12/40 10 ok 1 infeasible 1 error 0:00:13."""

from __future__ import annotations

import sys
from collections import Counter


class Progress:
    """A bar over `total` rows, `skipped` of them done before it starts (a resumed sweep);
    `enabled` False draws nothing (stderr not a terminal, or --no-progress)."""

    def __init__(self, total: int, skipped: int = 0, enabled: bool = True) -> None:
        self.total, self.skipped, self.enabled = total, skipped, enabled
        self.done = 0
        self.statuses: Counter[str] = Counter()
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as Bar

        self._bar = Bar(
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[counts]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=Console(file=sys.stderr),
        )
        self._task = self._bar.add_task("rows", total=total, completed=skipped, counts="")
        self._bar.start()

    def update(self, status: str = "") -> None:
        """Count one finished row (by its status, if given) and redraw."""
        self.done += 1
        if status:
            self.statuses["error" if status == "ERROR" else status.lower()] += 1
        if self.enabled:
            counts = " ".join(f"{n} {s}" for s, n in sorted(self.statuses.items()))
            self._bar.update(self._task, advance=1, counts=counts)

    def close(self) -> None:
        """End the bar (its last state stays on stderr)."""
        if self.enabled:
            self._bar.stop()
            self.enabled = False
