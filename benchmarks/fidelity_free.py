"""The planner's free optimum against each published layout, under the same cost model.

For a run, plan() gets the run's model, GPUs, global batch and framework profile with nothing
pinned; where its optimum beats the published layout by more than `THRESHOLD` (tokens/s), the
report lists both layouts and the terms of the time model that make the difference (their
shares of each step). A large gain is either a layout the experts missed or, more often, a
term the model gets wrong: the list is where to look.
"""

from __future__ import annotations

from collections.abc import Sequence

from benchmarks.common import table
from meshplan.solver import evaluate, plan
from meshplan.solver.hardware import GIB
from meshplan.solver.results import Performance
from meshplan.solver.schema import Options, ParallelConfig, PlanRequest
from meshplan.tools.calibration.loaders import CalibrationRun

THRESHOLD = 0.10
TERMS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "bubble")


def layout(c: ParallelConfig) -> str:
    parts = [f"tp{c.tp}", f"pp{c.pp}" + (f"v{c.virtual_stages}" if c.virtual_stages > 1 else "")]
    parts += (
        [f"dp{c.dp}"] + ([f"cp{c.cp}"] if c.cp > 1 else []) + ([f"ep{c.ep}"] if c.ep > 1 else [])
    )
    parts += [f"b{c.micro_batch_size}x{c.num_microbatches}", c.recompute.value[:3].lower()]
    return " ".join(parts) + f" z{c.zero_stage}"


def _shares(p: Performance) -> dict[str, float]:
    b = p.breakdown.model_dump()
    return {t: b[f"{t}_s"] / p.step_time_s for t in TERMS}


def why(published: Performance, free: Performance) -> str:
    """The terms whose time per token differs most, as shares of the published step."""
    per_tok_pub = {
        t: s * published.step_time_s / published.global_batch_tokens
        for t, s in _shares(published).items()
    }
    per_tok_free = {
        t: s * free.step_time_s / free.global_batch_tokens for t, s in _shares(free).items()
    }
    step = published.step_time_s / published.global_batch_tokens
    diff = sorted(TERMS, key=lambda t: per_tok_free[t] - per_tok_pub[t])
    out = []
    for t in diff[:3]:
        d = (per_tok_free[t] - per_tok_pub[t]) / step
        if abs(d) >= 0.01:
            out.append(f"{t} {per_tok_pub[t] / step:.0%}→{per_tok_free[t] / step:.0%}")
    return ", ".join(out)


def compare(
    runs: Sequence[CalibrationRun],
    time_limit_s: float = 10.0,
    configs: Sequence[ParallelConfig] | None = None,
) -> list[dict[str, object]]:
    """Every run: published and free layouts, predicted tokens/s per GPU of each, the gain.
    `configs`: the published layouts as scored (the unstated knobs set), default as loaded."""
    out = []
    for i, r in enumerate(runs):
        config = configs[i] if configs is not None else r.config
        ev = evaluate(r.request().model_copy(update={"config": config}))
        req = PlanRequest(
            model=r.model,
            cluster=r.cluster,
            training=r.training,
            options=Options(time_limit_s=time_limit_s, explain=False),
        )
        res = plan(req)
        row: dict[str, object] = {"id": r.id, "published": layout(config), "fits": ev.fits}
        if res.performance is None or res.config is None:
            row.update(free=None, gain=None, why=f"plan {res.status.value}")
        else:
            gpus = r.cluster.num_gpus
            pub, free = ev.performance, res.performance
            q = req.search
            usable = (res.memory.hbm - q.memory_reserve_gib * GIB) / (1 + q.memory_fragmentation)
            row.update(
                free=layout(res.config),
                framework=r.training.framework.value,
                free_recompute=res.config.recompute.value,
                free_memory_share=(res.memory.total - res.memory.reserve) / usable,
                published_tps=pub.tokens_per_s / gpus,
                free_tps=free.tokens_per_s / gpus,
                gain=free.tokens_per_s / pub.tokens_per_s - 1,
                why=why(pub, free),
            )
        out.append(row)
    return out


def doubts(x: dict[str, object], margins: dict[str, float]) -> list[str]:
    """Why a free optimum may not be real: it needs more of the usable memory than the memory
    model's worst under-prediction on its framework's published peaks leaves safe, or its gain
    rests on a recomputation the time model prices as another framework's."""
    out = []
    margin = margins.get(str(x["framework"]), 0.0)
    share = float(x["free_memory_share"])  # type: ignore[arg-type]
    if share > 1 - margin:
        out.append(
            f"uses {share:.0%} of usable memory; peaks under-predicted by up to {margin:.0%}"
        )
    if x["framework"] == "TORCHTITAN" and x["free_recompute"] == "SELECTIVE":
        out.append("torchtitan's op-level selective AC is timed as attention-core recomputation")
    return out


def report(rows: Sequence[dict[str, object]], margins: dict[str, float] | None = None) -> str:
    """The runs the free optimum beats by more than THRESHOLD, with why, and whether the free
    plan is believable (`margins`: the worst under-prediction of peak memory per framework)."""
    margins = margins or {}
    big = [x for x in rows if x["gain"] is not None and x["gain"] > THRESHOLD]
    lines = [
        f"{len(big)} of {len(rows)} runs: the planner's free optimum beats the published layout "
        f"by more than {THRESHOLD:.0%} (predicted tokens/s per GPU, same cost model):"
    ]
    body = []
    for x in sorted(big, key=lambda x: -x["gain"]):  # type: ignore[operator]
        d = doubts(x, margins)
        x["doubts"] = d
        mem = f"{x['free_memory_share']:.0%}"
        row = [x["id"], x["published"], x["free"], f"{x['gain']:+.0%}", mem, x["why"] or "-"]
        body.append([*row, "; ".join(d) or "believed"])
    if body:
        heads = ["run", "published", "free optimum", "gain", "mem", "terms (share of step)"]
        lines.append(table([*heads, "doubt"], body))
        n_doubt = sum(bool(x["doubts"]) for x in big)
        lines.append(
            f"believed: {len(big) - n_doubt}; doubted: {n_doubt} (mem: the free plan's tenants / "
            "usable memory; margins, the worst in-sample under-prediction of published peaks: "
            + (", ".join(f"{k} {v:.1%}" for k, v in sorted(margins.items())) or "none")
            + ")"
        )
    failed = [x for x in rows if x["gain"] is None]
    if failed:
        lines.append("no free plan: " + ", ".join(f"{x['id']} ({x['why']})" for x in failed))
    return "\n".join(lines)
