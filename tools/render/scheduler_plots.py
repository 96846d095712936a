"""PNG pictures of the scheduler queries: a scaling curve (goodput and its envelope per GPU type,
the band, the knee) and a training front (days against GPU-hours and cost)."""

from __future__ import annotations

from pathlib import Path

from meshplan.solver.scheduler.answers import CellStatus, CurveResult, FrontResult
from meshplan.tools.render.plots import _figure, _save

COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")


def curve_plot(path: str | Path, curve: CurveResult, title: str) -> Path:
    """Goodput against GPUs per type (dots: cells; line: envelope; band shaded; knee marked)."""
    fig = _figure(8.5, 5.0)
    ax = fig.add_subplot()
    for i, s in enumerate(curve.clusters):
        colour = COLOURS[i % len(COLOURS)]
        cells = [c for c in curve.cells if c.cluster == s.cluster]
        ok = [c for c in cells if c.status is CellStatus.PLANNED]
        if not ok:
            continue
        xs = [c.num_gpus for c in ok]
        ax.plot(xs, [c.goodput_tokens_per_s for c in ok], "o", ms=3, color=colour, alpha=0.6)
        env = [c for c in cells if c.envelope_goodput_tokens_per_s > 0]
        ax.step(
            [c.num_gpus for c in env],
            [c.envelope_goodput_tokens_per_s for c in env],
            where="post",
            color=colour,
            label=f"{s.cluster} (envelope)",
        )
        eff = [c.statistical_efficiency for c in ok]
        ax.fill_between(
            xs,
            [c.band_low_tokens_per_s * e for c, e in zip(ok, eff, strict=True)],
            [c.band_high_tokens_per_s * e for c, e in zip(ok, eff, strict=True)],
            color=colour,
            alpha=0.12,
            linewidth=0,
        )
        if s.knee_gpus:
            y = max(c.envelope_goodput_tokens_per_s for c in cells if c.num_gpus <= s.knee_gpus)
            ax.plot([s.knee_gpus], [y], "v", color=colour, ms=9)
            ax.annotate(f"knee {s.knee_gpus}", (s.knee_gpus, y), textcoords="offset points",
                        xytext=(4, 6), fontsize=8, color=colour)  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("goodput (tokens/s)")
    ax.set_title(
        f"{title}: cells (dots), envelope (steps), uncertainty band (shaded)\n"
        f"knee (triangle): < {curve.knee_gain:.0%} gain per doubling"
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def front_plot(path: str | Path, front: FrontResult, title: str) -> Path:
    """Days against GPU-hours (and against cost when priced); the front joined by a line."""
    panels = [("gpu_hours", "GPU-hours", "on_front_gpu_hours")]
    if front.priced:
        panels.append(("cost", "cost", "on_front_cost"))
    fig = _figure(6.0 * len(panels), 4.8)
    labels = list(dict.fromkeys(p.cluster for p in front.points))
    for k, (field, name, flag) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), k + 1)
        for i, label in enumerate(labels):
            pts = [p for p in front.points if p.cluster == label]
            ax.plot([p.days for p in pts], [getattr(p, field) for p in pts], "o", ms=4,
                    color=COLOURS[i % len(COLOURS)], alpha=0.7, label=label)  # fmt: skip
        on = sorted((p for p in front.points if getattr(p, flag)), key=lambda p: p.days)
        ax.plot([p.days for p in on], [getattr(p, field) for p in on], "-", color="black",
                lw=1.2, label="Pareto front")  # fmt: skip
        for p in on:
            ax.annotate(f"{p.num_gpus_used}", (p.days, getattr(p, field)), fontsize=7,
                        textcoords="offset points", xytext=(3, 3))  # fmt: skip
        ax.set_xscale("log")
        ax.set_xlabel("days")
        ax.set_ylabel(name)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{title}: {front.token_budget:,} tokens")
    return _save(fig, path)
