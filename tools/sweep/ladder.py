"""The scaling ladder (the lesson "The scaling ladder"): rungs of (model, GPUs), each planned; for
each, the wall that binds, the parallel axes it adds compared with the last feasible rung below it,
and the layout.

The axes of a layout are tp, pp, cp, ep and the data axis, which is `fsdp` under ZeRO-3 (the
lesson counts FSDP as the axis that rung 0 adds) and `dp` otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from meshplan.solver.results import PlanResult
from meshplan.solver.schema import ParallelConfig
from meshplan.tools.sweep.grid import ModelItem, expand_model
from meshplan.tools.sweep.solve import Job, build_jobs, solve_local, solve_remote

if TYPE_CHECKING:
    from meshplan.tools.sweep.ray_paths import RayBackend

SEED_RUNGS = "llama3-8b@8,llama3-70b@8,llama3-70b@256,llama3-405b@2048"  # "The scaling ladder"


@dataclass
class Rung:
    """One rung of the ladder, planned."""

    index: int
    model: str
    params: float
    num_gpus: int
    result: PlanResult | None = None
    error: str | None = None
    axes: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)

    @property
    def feasible(self) -> bool:
        """True if the rung has a layout."""
        return self.result is not None and self.result.config is not None

    @property
    def wall(self) -> str:
        """The binding wall, INFEASIBLE, or ERROR."""
        if self.result is None:
            return "ERROR"
        return self.result.binding_wall.value if self.feasible else "INFEASIBLE"

    @property
    def min_gpus(self) -> int:
        """For an infeasible rung: the smallest GPU count that fits (0: unknown)."""
        e = self.result.explanation if self.result is not None else None
        return e.min_gpus if e else 0


def axes_of(c: ParallelConfig) -> list[str]:
    """The parallel axes a layout uses, in the order of "Designing a pretraining system" (tp in
    node, pp, cp, ep, data)."""
    out = [a for a in ("tp", "pp", "cp", "ep") if getattr(c, a) > 1]
    if c.dp > 1:
        out.append("fsdp" if c.zero_stage == 3 else "dp")
    return out


def parse_rungs(text: str) -> list[tuple[str, int]]:
    """'llama3-8b@8,llama3-70b@256' -> [('llama3-8b', 8), ...]; ValueError naming --rungs."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        model, at, gpus = part.rpartition("@")
        if not at or not model or not gpus.isdigit() or int(gpus) < 1:
            raise ValueError(f"--rungs: {part!r} is not MODEL@GPUS (e.g. llama3-70b@256)")
        out.append((model, int(gpus)))
    if not out:
        raise ValueError(f"--rungs: no rung in {text!r}")
    return out


def pair(models: Sequence[ModelItem], gpus: Sequence[int]) -> list[tuple[ModelItem, int]]:
    """Rungs from --models and --gpus: zipped when as many of each, one of either is repeated."""
    if len(models) == len(gpus):
        return list(zip(models, gpus, strict=True))
    if len(models) == 1:
        return [(models[0], n) for n in gpus]
    if len(gpus) == 1:
        return [(m, gpus[0]) for m in models]
    raise ValueError(
        f"--gpus: {len(gpus)} counts for {len(models)} models; give as many, or one of either"
    )


def rung_models(pairs: Sequence[tuple[str, int]]) -> list[tuple[ModelItem, int]]:
    """Each rung's model item expanded (an item naming several models is an error rung)."""
    out = []
    for label, n in pairs:
        items = expand_model(label)
        if len(items) != 1:
            items = [ModelItem(label, error=f"model {label!r}: a rung names one model")]
        out.append((items[0], n))
    return out


def climb(
    rungs: Sequence[tuple[ModelItem, int]],
    base: dict[str, Any] | None = None,
    *,
    workers: int = 0,
    servers: Sequence[str] = (),
    timeout: float = 3600.0,
    ray: RayBackend | None = None,
) -> list[Rung]:
    """Plan every rung (in parallel, on a server, or with `ray` on a Ray cluster's worker actors:
    tools/sweep/ray_paths.py) and compare each with the last feasible one."""
    jobs: list[Job] = [build_jobs([m], [n], base=base)[0] for m, n in rungs]
    unique = list({j.key: j for j in jobs}.values())
    if ray is not None:
        from meshplan.tools.cli.interrupt import sigterm_as_interrupt

        with sigterm_as_interrupt():  # SIGTERM stops the actors as Ctrl-C does
            outcomes = list(ray.sweep(unique))
    elif servers:
        outcomes = solve_remote(unique, servers, timeout)
    else:
        outcomes = solve_local(unique, workers)
    by_key = {o.job.key: o for o in outcomes}
    out: list[Rung] = []
    below: list[str] = []
    for i, ((m, n), job) in enumerate(zip(rungs, jobs, strict=True)):
        o = by_key[job.key]
        r = Rung(i, m.label, m.params, n, o.result, o.error)
        if r.result is not None and not r.params:
            r.params = r.result.num_parameters.total
        if r.feasible:
            assert r.result is not None and r.result.config is not None
            r.axes = axes_of(r.result.config)
            r.added = [a for a in r.axes if a not in below]
            r.dropped = [a for a in below if a not in r.axes]
            below = r.axes
        out.append(r)
    return out


def config_text(c: ParallelConfig) -> str:
    """'tp=8 pp=16 dp=16 v=2 | b=1 M=64 ZeRO-1 SELECTIVE'."""
    degrees = " ".join(
        f"{a}={getattr(c, a)}" for a in ("tp", "pp", "cp", "ep", "dp") if getattr(c, a) > 1
    )
    v = f" v={c.virtual_stages}" if c.virtual_stages > 1 else ""
    return (
        f"{degrees or 'one GPU'}{v} | b={c.micro_batch_size} M={c.num_microbatches} "
        f"ZeRO-{c.zero_stage} {c.recompute.value}"
    )


def rung_row(r: Rung) -> dict[str, Any]:
    """One rung as plain data (the JSON of `meshplan ladder --json`)."""
    row: dict[str, Any] = {
        "rung": r.index,
        "model": r.model,
        "params": int(r.params),
        "num_gpus": r.num_gpus,
        "binding_wall": r.wall,
        "axes": r.axes,
        "added": r.added,
        "dropped": r.dropped,
        "config": None,
        "mfu": None,
        "min_gpus": r.min_gpus or None,
        "reason": None,
        "error": r.error,
    }
    if r.result is not None and r.result.config is not None:
        row["config"] = r.result.config.model_dump(mode="json")
        row["mfu"] = r.result.performance.mfu if r.result.performance else None
    elif r.result is not None and r.result.explanation is not None:
        row["reason"] = r.result.explanation.reason
    return row


def render_ladder(rungs: Sequence[Rung]) -> str:
    """The ladder as the table of "The scaling ladder", then a note per infeasible or failed
    rung."""
    rows, notes = [["rung", "model", "params", "GPUs", "binding wall", "adds", "config / MFU"]], []
    for r in rungs:
        perf = r.result.performance if r.result is not None else None
        if r.feasible and perf is not None:
            assert r.result is not None and r.result.config is not None
            adds = " ".join([f"+{a}" for a in r.added] + [f"-{a}" for a in r.dropped]) or "(none)"
            what = f"{config_text(r.result.config)} | MFU {perf.mfu:.1%}"
        else:
            adds = "-"
            what = f"- infeasible: needs {r.min_gpus:,} GPUs -" if r.min_gpus else "- no layout -"
            if r.error:
                what = "- error -"
            e = r.result.explanation if r.result is not None else None
            notes.append(f"rung {r.index}: {r.error or (e.reason if e else '')}")
        params = f"{r.params / 1e9:.3g}B" if r.params else "?"
        rows.append([str(r.index), r.model, params, f"{r.num_gpus:,}", r.wall, adds, what])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    right = {2, 3}  # numbers
    lines = [
        "  ".join(
            [
                c.rjust(w) if i in right else c.ljust(w)
                for i, (c, w) in enumerate(zip(row[:-1], widths, strict=True))
            ]
            + [row[-1]]
        )
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines + ([""] + notes if notes else []))
