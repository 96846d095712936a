"""Tables and CSV rows of the scheduler queries' answers (tools/cli/scheduler.py prints them)."""

from __future__ import annotations

import csv
from typing import IO

from meshplan.solver.scheduler import AdmitResult, CurveResult, FrontResult, ReplanResult
from meshplan.solver.schema import PINNABLE_AXES, ParallelConfig

GIB = 1 << 30


def layout(c: ParallelConfig | None) -> str:
    """'tp2 pp4 dp8 b1 M16 z1 SELECTIVE' (empty when None)."""
    if c is None:
        return ""
    axes = " ".join(
        f"{k}{getattr(c, k)}" for k in ("tp", "pp", "cp", "ep", "dp") if getattr(c, k) > 1
    )
    v = f" v{c.virtual_stages}" if c.virtual_stages > 1 else ""
    return (
        f"{axes or 'dp1'}{v} b{c.micro_batch_size} M{c.num_microbatches} z{c.zero_stage} "
        f"{c.recompute.value}"
    )


def _config_cols(c: ParallelConfig | None) -> dict:
    out = {k: (getattr(c, k) if c else "") for k in PINNABLE_AXES}
    out["recompute"] = c.recompute.value if c else ""
    return out


def _table(headers: list[str], rows: list[list[str]]) -> str:
    """A plain-text table (rich's, no colour, no box but the rule under the header): the first
    column left-aligned, the others right-aligned, as wide as their widest cell."""
    import io

    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="")
    for i, h in enumerate(headers):
        table.add_column(Text(h), justify="right" if i else "left", no_wrap=True)
    for r in rows:
        table.add_row(*(Text(x) for x in r))  # Text: a cell is never read as markup
    out = io.StringIO()
    Console(file=out, width=1000, color_system=None, highlight=False).print(table)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines() if line.strip())


def _k(x: float) -> str:
    return f"{x:,.0f}" if x else "-"


def curve_table(res: CurveResult) -> str:
    out = []
    for s in res.clusters:
        out.append(
            f"{s.cluster} ({s.gpus_per_node} GPUs/node): smallest feasible {s.min_feasible_gpus or '-'}, "
            f"scale unit {s.scale_unit_gpus or '-'} GPUs, knee {s.knee_gpus or 'not within the grid'} "
            f"(< {res.knee_gain:.0%} per doubling), largest useful {s.largest_useful_gpus or '-'} "
            f"({s.largest_useful_reason})"
        )
        rows, why = [], []
        for c in res.cells:
            if c.cluster != s.cluster:
                continue
            if c.status.value != "PLANNED":
                rows.append([str(c.num_gpus), c.status.value, *[""] * 8])
                why.append(f"  {c.num_gpus} GPUs: {c.reason}")
                continue
            rows.append(
                [
                    str(c.num_gpus),
                    "PLANNED",
                    str(c.num_gpus_used),
                    layout(c.config),
                    _k(c.tokens_per_s),
                    _k(c.goodput_tokens_per_s),
                    f"{c.mfu:.1%}",
                    _k(c.envelope_goodput_tokens_per_s),
                    f"{c.envelope_speedup:.2f}",
                    c.binding_wall.value + (" *" if c.extrapolates else ""),
                ]
            )
        head = [
            "GPUs",
            "status",
            "used",
            "layout",
            "tok/s",
            "goodput",
            "MFU",
            "envelope",
            "speedup",
            "wall",
        ]
        out += [_table(head, rows), *why, ""]
    out.append(f"band: {res.band_source.removeprefix('band: ')}")
    if res.fit is not None:
        f = res.fit
        out.append(
            f"fit of {f.num_observations} observations: compute x{f.compute_factor:.3f}, "
            f"communication x{f.communication_factor:.3f}, band +-{f.relative_error:.1%}"
            " (* extrapolates)"
        )
    out.append(f"cache key {res.cache_key} (cost model {res.cost_model_version})")
    return "\n".join(out)


def curve_rows(res: CurveResult) -> list[dict]:
    return [
        {
            "cluster": c.cluster,
            "num_gpus": c.num_gpus,
            "status": c.status.value,
            "reason": c.reason,
            "num_gpus_used": c.num_gpus_used,
            **_config_cols(c.config),
            "global_batch_tokens": c.global_batch_tokens,
            "step_time_s": c.step_time_s,
            "tokens_per_s": c.tokens_per_s,
            "goodput_tokens_per_s": c.goodput_tokens_per_s,
            "mfu": c.mfu,
            "memory_headroom_bytes": c.memory_headroom_bytes,
            "binding_wall": c.binding_wall.value,
            "band_low_tokens_per_s": c.band_low_tokens_per_s,
            "band_high_tokens_per_s": c.band_high_tokens_per_s,
            "extrapolates": c.extrapolates,
            "envelope_goodput_tokens_per_s": c.envelope_goodput_tokens_per_s,
            "envelope_num_gpus": c.envelope_num_gpus,
            "speedup": c.speedup,
        }
        for c in res.cells
    ]


def replan_table(res: ReplanResult) -> str:
    out = [
        f"running: {res.before_num_gpus} GPUs, {_k(res.before_tokens_per_s)} tokens/s, "
        f"{res.before_memory.total / GIB:.1f} GiB per GPU; level {res.compatibility.value}"
    ]
    rows, why = [], []
    for r in res.rows:
        if r.status.value != "PLANNED":
            more = f"; the least level that fits is {r.least_level.value}" if r.least_level else ""
            more += (
                f"; the level fits on {r.min_nodes_at_level} nodes" if r.min_nodes_at_level else ""
            )
            rows.append([f"{r.delta_nodes:+d}", str(r.num_gpus), r.status.value, *[""] * 7])
            why.append(f"  {r.delta_nodes:+d} nodes: {r.reason}{more}")
            continue
        rows.append(
            [
                f"{r.delta_nodes:+d}",
                str(r.num_gpus),
                "PLANNED",
                str(r.num_gpus_used),
                layout(r.config),
                f"{r.memory.total / GIB:.1f}",
                f"{r.throughput_kept:.1%}",
                f"{r.price_of_compatibility:.1%}",
                f"{r.state_move.total_bytes / GIB:.2f}",
                "yes" if r.restart_implied else "no",
            ]
        )
    head = [
        "nodes",
        "GPUs",
        "status",
        "used",
        "layout",
        "GiB/GPU",
        "kept",
        "price",
        "moved GiB",
        "restart",
    ]
    out += [_table(head, rows), *why]
    out += [f"note: {n}" for n in res.notes]
    return "\n".join(out)


def replan_rows(res: ReplanResult) -> list[dict]:
    return [
        {
            "delta_nodes": r.delta_nodes,
            "num_gpus": r.num_gpus,
            "status": r.status.value,
            "reason": r.reason,
            "num_gpus_used": r.num_gpus_used,
            **_config_cols(r.config),
            "global_batch_tokens": r.global_batch_tokens,
            "tokens_per_s": r.tokens_per_s,
            "memory_total_bytes": r.memory.total if r.memory else "",
            "throughput_kept": r.throughput_kept,
            "price_of_compatibility": r.price_of_compatibility,
            "state_moved_bytes": r.state_move.total_bytes if r.state_move else "",
            "restart_implied": r.restart_implied,
            "least_level": r.least_level.value if r.least_level else "",
            "min_nodes_at_level": r.min_nodes_at_level,
        }
        for r in res.rows
    ]


def admit_table(res: AdmitResult) -> str:
    rows = [
        [
            a.cluster,
            a.status.value,
            str(a.num_gpus or "-"),
            layout(a.config),
            f"{a.finish_s / 3600:,.1f}" if a.finish_s else "-",
            f"{a.gpu_hours:,.0f}" if a.gpu_hours else "-",
            f"{a.cost:,.0f}" if a.cost else "-",
            f"{a.earliest_finish_s / 3600:,.1f} on {a.earliest_finish_gpus}"
            if a.earliest_finish_s
            else "-",
        ]
        for a in res.allocations
    ]
    head = ["cluster", "status", "GPUs", "layout", "finish h", "GPU-h", "cost", "earliest h"]
    out = [
        f"deadline in {res.time_available_s / 3600:,.1f} h; objective {res.objective.value}",
        _table(head, rows),
    ]
    if res.pick:
        out.append(
            f"pick: {res.pick.num_gpus} x {res.pick.cluster}, finishes in {res.pick.finish_s / 3600:,.1f} h"
        )
    else:
        out.append(res.reason)
    return "\n".join(out)


def admit_rows(res: AdmitResult) -> list[dict]:
    return [
        {
            "cluster": a.cluster,
            "status": a.status.value,
            "reason": a.reason,
            "num_gpus": a.num_gpus,
            **_config_cols(a.config),
            "tokens_per_s": a.tokens_per_s,
            "finish_s": a.finish_s,
            "gpu_hours": a.gpu_hours,
            "cost": a.cost,
            "earliest_finish_s": a.earliest_finish_s,
            "earliest_finish_gpus": a.earliest_finish_gpus,
            "pick": res.pick is not None and res.pick.cluster == a.cluster,
        }
        for a in res.allocations
    ]


def front_table(res: FrontResult) -> str:
    on = [p for p in res.points if p.on_front_gpu_hours or p.on_front_cost]
    rows = [
        [
            p.cluster,
            str(p.num_gpus_used),
            layout(p.config),
            f"{p.days:,.2f}",
            f"{p.gpu_hours:,.0f}",
            f"{p.cost:,.0f}" if res.priced else "-",
            ("h" if p.on_front_gpu_hours else "") + ("$" if p.on_front_cost else ""),
        ]
        for p in on
    ]
    head = ["cluster", "GPUs", "layout", "days", "GPU-h", "cost", "front"]
    out = [
        f"{res.token_budget:,} tokens: {len(on)} of {len(res.points)} points on a front (h: GPU-hours, $: cost)",
        _table(head, rows),
    ]
    for c in res.clusters:
        cb = (
            f"; the critical batch caps it from {c.critical_batch_gpus} GPUs"
            if c.critical_batch_gpus
            else ""
        )
        out.append(
            f"{c.cluster}: more GPUs stop helping at {c.largest_useful_gpus} ({c.reason}){cb}"
        )
    return "\n".join(out)


def front_rows(res: FrontResult) -> list[dict]:
    return [
        {
            "cluster": p.cluster,
            "num_gpus": p.num_gpus,
            "num_gpus_used": p.num_gpus_used,
            **_config_cols(p.config),
            "days": p.days,
            "gpu_hours": p.gpu_hours,
            "cost": p.cost,
            "goodput_tokens_per_s": p.goodput_tokens_per_s,
            "binding_wall": p.binding_wall.value,
            "on_front_gpu_hours": p.on_front_gpu_hours,
            "on_front_cost": p.on_front_cost,
        }
        for p in res.points
    ]


def write_csv(out: IO[str], rows: list[dict]) -> None:
    if not rows:
        return
    w = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
