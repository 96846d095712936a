"""Pictures (matplotlib, Agg, no pyplot state; PNG, SVG or PDF by the file's suffix): a plan's
memory bill against HBM as stacked bars, the scaling-efficiency curve and the scaling ladder."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from meshplan.solver.results import Evaluation, MemoryBill, PlanResult
from meshplan.solver.schema import ParallelConfig
from meshplan.tools.cli.flags import plot_format
from meshplan.tools.render.tables import verdict
from meshplan.tools.sweep.scaling import Series

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from meshplan.tools.sweep.ladder import Rung

GIB = 1 << 30
TENANTS = (  # (MemoryBill field, label, colour)
    ("weights", "weights", "#4c72b0"),
    ("gradients", "gradients", "#dd8452"),
    ("optimizer", "optimizer state", "#55a868"),
    ("activations", "activations (incl. logits)", "#d46a8c"),
    ("reserve", "reserve (CUDA, NCCL, fragmentation)", "#9b9b9b"),
)
AXIS_COLOURS = {"tp": "#4c72b0", "pp": "#dd8452", "cp": "#8172b3", "dp": "#55a868"}


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _save(fig: Figure, path: str | Path) -> Path:
    out = Path(path)
    fmt = plot_format(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format=fmt)  # a bare Figure saves through the Agg (or SVG, PDF) canvas
    return out


def short_config(c: ParallelConfig) -> str:
    """'tp2 pp4 dp8\\nb1 M16 ZeRO-1 SELECTIVE' for an axis label."""
    axes = " ".join(
        f"{k}{getattr(c, k)}" for k in ("tp", "pp", "cp", "ep", "dp") if getattr(c, k) > 1
    )
    v = f" v{c.virtual_stages}" if c.virtual_stages > 1 else ""
    return (
        f"{axes or 'single GPU'}{v}\nb{c.micro_batch_size} M{c.num_microbatches} "
        f"ZeRO-{c.zero_stage} {c.recompute.value}"
    )


def memory_plot(
    path: str | Path,
    bars: Sequence[tuple[str, MemoryBill]],
    hbm: int,
    title: str,
    note: str = "",
    floor: int = 0,
) -> Path:
    """Stacked bars of per-GPU memory by tenant (one bar per plan) against the HBM line.

    With no bars (an infeasible plan), `floor` is drawn as the least any layout needs.
    """
    fig = _figure(max(7.0, 1.6 * len(bars) + 5.0), 5.0)
    ax = fig.add_subplot()
    names = [n for n, _ in bars] or ["least any layout needs\n(before the reserve)"]
    for i, (_, bill) in enumerate(bars):
        bottom = 0.0
        for fld, label, colour in TENANTS:
            v = getattr(bill, fld) / GIB
            ax.bar(i, v, bottom=bottom, color=colour, width=0.6, label=label if i == 0 else None)
            bottom += v
        ax.text(
            i,
            bottom,
            f"{bottom:.1f} GiB\n({bill.stage} stage)",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    if not bars and floor:
        ax.bar(
            0,
            floor / GIB,
            color="none",
            edgecolor="#d62728",
            hatch="//",
            width=0.6,
            label="least any layout needs\n(before the reserve)",
        )
        ax.text(0, floor / GIB, f"{floor / GIB:.1f} GiB", ha="center", va="bottom", fontsize=8)
    ax.axhline(
        hbm / GIB, color="#d62728", linestyle="--", linewidth=1.5, label=f"HBM {hbm / GIB:.0f} GiB"
    )
    top = max([hbm] + [b.total for _, b in bars] + [floor]) / GIB
    ax.set_ylim(0, top * 1.18)
    ax.set_xticks(range(len(names)), names, fontsize=8)
    ax.set_xlim(-0.8, len(names) - 0.2)
    ax.set_ylabel("memory per GPU (GiB)")
    ax.set_title(textwrap.fill(title, 80), fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if note:
        ax.set_xlabel(textwrap.fill(note, 90), fontsize=8)
    return _save(fig, path)


def plan_memory_plot(
    path: str | Path, model: str, gpu: str, num_gpus: int, hbm: int, res: PlanResult | Evaluation
) -> Path:
    """The memory bill of a plan and its alternatives (or of an evaluation) against HBM."""
    title = f"{model} on {num_gpus:,} x {gpu}: memory per GPU"
    if isinstance(res, Evaluation):
        return memory_plot(
            path, [(short_config(res.config), res.memory)], hbm, f"{title} ({verdict(res)})"
        )
    if res.config is None or res.memory is None:
        e = res.explanation
        return memory_plot(
            path,
            [],
            hbm,
            f"{title}: INFEASIBLE",
            note=e.reason if e else "",
            floor=e.min_memory_bytes if e else 0,
        )
    bars = [(f"plan\n{short_config(res.config)}", res.memory)]
    bars += [
        (f"alt {i}\n{short_config(a.config)}", a.memory) for i, a in enumerate(res.alternatives, 1)
    ]
    return memory_plot(path, bars, hbm, f"{title}, wall {res.binding_wall.value}")


def scaling_plot(path: str | Path, series: Sequence[Series], title: str = "") -> Path:
    """Tokens/s and scaling efficiency against GPU count; the DP cap and the critical batch marked."""
    fig = _figure(9.0, 7.5)
    top, bottom = fig.subplots(2, 1, sharex=True)
    colours = [f"C{i}" for i in range(10)]
    for i, s in enumerate(series):
        if not s.points:
            continue
        colour = "black" if s.kind == "weak" else colours[i % 10]
        style = dict(
            color=colour, linestyle="--" if s.kind == "weak" else "-", marker="o", markersize=4
        )
        xs = [p.gpus for p in s.points]
        top.plot(
            xs,
            [p.tokens_per_s for p in s.points],
            label=f"{s.kind}: {s.label}" if s.kind == "strong" else s.label,
            **style,
        )
        if s.kind == "strong":
            p0 = s.points[0]
            top.plot(
                xs,
                [p0.tokens_per_s * x / p0.gpus for x in xs],
                color=colour,
                linestyle=":",
                linewidth=0.8,
            )
        bottom.plot(xs, [p.efficiency for p in s.points], **style)
        if s.dp_cap_gpus:
            for ax in (top, bottom):
                ax.axvline(s.dp_cap_gpus, color=colour, linestyle="-.", linewidth=1.0)
                ax.axvspan(s.dp_cap_gpus, max(xs), color=colour, alpha=0.06)
            cap = s.critical_batch_tokens // max(s.seq_len, 1)  # dp <= B_crit/(b·M·s)
            bottom.annotate(
                f"DP cap at {s.dp_cap_gpus:,} GPUs\nB_crit {s.critical_batch_tokens:,} tokens"
                f"\n= {cap:,} sequences: dp ≤ {cap:,}",
                (s.dp_cap_gpus, 0.05),
                fontsize=7,
                color=colour,
                rotation=90,
                va="bottom",
                ha="right",
            )
    from matplotlib.ticker import FuncFormatter

    for ax in (top, bottom):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
        ax.grid(True, which="both", alpha=0.3)
    top.set_yscale("log")
    top.set_ylabel("tokens/s (dotted: linear from the first point)")
    bottom.axhline(1.0, color="grey", linewidth=0.8)
    bottom.set_ylim(0, max([1.1] + [p.efficiency * 1.1 for s in series for p in s.points]))
    bottom.set_ylabel("scaling efficiency")
    bottom.set_xlabel("GPUs")
    top.legend(fontsize=7, loc="upper left")
    top.set_title(
        title or "scaling: strong (solid) and weak (dashed); DP cap dash-dotted", fontsize=10
    )
    return _save(fig, path)


def ladder_plot(path: str | Path, rungs: Sequence[Rung], title: str = "") -> Path:
    """One bar per rung: log2 of each parallel degree stacked (height = log2 GPUs used), the
    binding wall, the axes added and the MFU on top; infeasible rungs hatched."""
    import math

    fig = _figure(max(6.0, 1.9 * len(rungs) + 2), 5.5)
    ax = fig.add_subplot()
    seen: set[str] = set()
    for i, r in enumerate(rungs):
        cfg = r.result.config if r.result is not None else None
        if cfg is None:
            h = math.log2(max(r.num_gpus, 1))
            ax.bar(i, h, color="none", edgecolor="#d62728", hatch="xx", width=0.6)
            need = f"≥ {r.min_gpus:,} GPUs" if r.min_gpus else (r.error or "no layout")
            ax.text(
                i, h, textwrap.fill(f"{r.wall}\n{need}", 22), ha="center", va="bottom", fontsize=7
            )
            continue
        bottom = 0.0
        for axis, degree in (("tp", cfg.tp), ("pp", cfg.pp), ("cp", cfg.cp), ("dp", cfg.dp)):
            if degree > 1:
                name = "fsdp" if axis == "dp" and cfg.zero_stage == 3 else axis
                label = name if name not in seen else None
                seen.add(name)
                hatch = "//" if name == "fsdp" else None
                ax.bar(
                    i,
                    math.log2(degree),
                    bottom=bottom,
                    color=AXIS_COLOURS[axis],
                    hatch=hatch,
                    width=0.6,
                    label=label,
                )
                ax.text(
                    i,
                    bottom + math.log2(degree) / 2,
                    f"{name}={degree}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white",
                )
                bottom += math.log2(degree)
        adds = " ".join(f"+{a}" for a in r.added) or "(no new axis)"
        ep = f"\nep={cfg.ep}" if cfg.ep > 1 else ""
        perf = r.result.performance if r.result is not None else None
        mfu = f"\nMFU {perf.mfu:.0%}" if perf is not None else ""
        ax.text(i, bottom, f"{r.wall}\n{adds}{ep}{mfu}", ha="center", va="bottom", fontsize=7)
    labels = [f"{r.model}\n{r.params / 1e9:.3g}B\n{r.num_gpus:,} GPUs" for r in rungs]
    ax.set_xticks(range(len(rungs)), labels, fontsize=8)
    top = max([math.log2(max(r.num_gpus, 2)) for r in rungs])
    ax.set_ylim(0, top * 1.35 + 1)
    ax.set_ylabel("log2 GPUs, split by parallel degree")
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title(
        title or "the scaling ladder: the wall that binds and the axis it adds", fontsize=10
    )
    return _save(fig, path)


def describe(path: Path, what: str) -> str:
    """'wrote scaling.png (scaling curve, 48 KiB)' for stderr."""
    return f"wrote {path} ({what}, {path.stat().st_size / 1024:.0f} KiB)"
