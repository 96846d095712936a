"""Readable tables for the CLI: the layout, the memory bill against HBM, time, the wall."""

from __future__ import annotations

from meshplan.solver.results import Evaluation, MemoryBill, Performance, PlanResult, SolverInfo
from meshplan.solver.schema import EvaluateRequest, ParallelConfig, PlanRequest

GIB = 1 << 30
MEMORY_VIOLATION = "memory:"  # how evaluate() starts the violation of the memory budget


def _layout(c: ParallelConfig) -> str:
    # sequence parallelism splits the tp group's activations: with tp = 1 there is none to show
    sp = f" sequence_parallel={str(c.sequence_parallel).lower()}" if c.tp > 1 else ""
    return (
        f"tp={c.tp} pp={c.pp} dp={c.dp} cp={c.cp} ep={c.ep} virtual_stages={c.virtual_stages}"
        f"\n  micro_batch_size={c.micro_batch_size} num_microbatches={c.num_microbatches} "
        f"zero_stage={c.zero_stage} recompute={c.recompute.value}{sp}"
    )


_BAR_CAP = 60  # a bar's characters at most (30: the whole HBM); "+" marks one cut there


def _memory(m: MemoryBill) -> str:
    rows = [
        ("weights", m.weights),
        ("gradients", m.gradients),
        ("optimizer", m.optimizer),
        ("activations", m.activations),
        ("reserve", m.reserve),
        ("total", m.total),
    ]
    out = [f"memory per GPU ({m.stage} stage) against {m.hbm / GIB:.1f} GiB HBM:"]
    for name, v in rows:
        width = int(round(30 * v / m.hbm)) if m.hbm > 0 else _BAR_CAP + 1
        bar = "#" * min(width, _BAR_CAP) + ("+" if width > _BAR_CAP else "")
        out.append(f"  {name:<12}{v / GIB:>8.2f} GiB  {bar}")
    return "\n".join(out)


def _time(p: Performance) -> str:
    bd = p.breakdown.model_dump()
    out = [
        f"step {p.step_time_s:.3f} s   {p.tokens_per_s:,.0f} tokens/s   MFU {p.mfu:.1%} "
        f"(HFU {p.hfu:.1%})   batch {p.global_batch_tokens:,} tokens on {p.num_gpus_used:,} GPUs"
    ]
    for k, v in bd.items():
        if v > 0:
            out.append(f"  {k[:-2]:<12}{v:>9.4f} s  {v / p.step_time_s:>6.1%}")
    if (e := p.error_band) is not None:
        out.append(
            f"expected error ({e.category}, {e.num_runs} published runs left out of the fit): "
            f"median {e.median_error:.1%}, p90 {e.p90_error:.1%}: {e.low_tokens_per_s:,.0f} to "
            f"{e.high_tokens_per_s:,.0f} tokens/s"
        )
    return "\n".join(out)


def render_plan(req: PlanRequest, r: PlanResult, label: str | None = None) -> str:
    """The plan as a table: layout, memory bill, time, wall, warnings, solver, alternatives."""
    n = r.num_parameters
    head = (
        f"{label or req.model.preset or 'custom model'} ({n.total / 1e9:.1f}B params, "
        f"{n.active / 1e9:.1f}B active) on {req.cluster.num_gpus:,} x {req.cluster.gpu}: "
        f"{r.status.value}"
    )
    batch = [f"batch: {r.batch.reason}"] if r.batch else []
    if r.config is None:
        e = r.explanation
        return "\n".join([head, f"  {e.reason}" if e else "", *batch])
    s = r.solver
    lines = [
        head,
        _layout(r.config),
        _memory(r.memory),
        _time(r.performance),
        *batch,
        f"binding wall: {r.binding_wall.value}",
    ]
    lines += [f"warning: {w}" for w in r.warnings]
    if s:
        lines.append(
            f"solver: {s.status} objective={s.objective:.0f} bound={s.bound:.0f} "
            f"gap={s.gap:.2%} in {s.wall_time_s * 1e3:.0f} ms "
            f"({s.num_layouts} layouts, {_proof(s)})"
        )
    for i, a in enumerate(r.alternatives, 1):
        c = a.config
        lines.append(
            f"alt {i}: tp={c.tp} pp={c.pp} dp={c.dp} cp={c.cp} ep={c.ep} "
            f"v={c.virtual_stages} b={c.micro_batch_size} M={c.num_microbatches} "
            f"zero={c.zero_stage} {c.recompute.value}: MFU {a.performance.mfu:.1%}, "
            f"{a.performance.tokens_per_s:,.0f} tok/s"
        )
    return "\n".join(lines)


def verdict(r: Evaluation) -> str:
    """'fits', 'does NOT fit in memory', 'breaks the rules', or both: "does NOT fit" is said of
    memory only; a broken rule (tp not dividing the heads, a batch that does not add up) is not
    a question of fit."""
    memory = any(v.startswith(MEMORY_VIOLATION) for v in r.violations)
    rules = any(not v.startswith(MEMORY_VIOLATION) for v in r.violations)
    if r.fits:
        return "fits"
    return " and ".join(
        w for w, on in (("does NOT fit in memory", memory), ("breaks the rules", rules)) if on
    )


def render_evaluation(req: EvaluateRequest, r: Evaluation, label: str | None = None) -> str:
    """The evaluation as a table: the verdict, layout, memory bill, time, what it breaks."""
    memory = [v for v in r.violations if v.startswith(MEMORY_VIOLATION)]
    rules = [v for v in r.violations if not v.startswith(MEMORY_VIOLATION)]
    name = label or req.model.preset or "custom model"
    head = f"{name} on {req.cluster.num_gpus:,} x {req.cluster.gpu}: {verdict(r)}"
    lines = [head, _layout(r.config), _memory(r.memory)]
    if r.performance:
        lines.append(_time(r.performance))
    lines += [f"binding wall: {r.binding_wall.value}"]
    lines += [f"does NOT fit: {v}" for v in memory]
    lines += [f"rule violation: {v}" for v in rules]
    lines += [f"warning: {w}" for w in r.warnings]
    lines += [f"note: {n}" for n in r.notes]
    return "\n".join(lines)


def _proof(s: SolverInfo) -> str:
    """How the answer was proven: the CP-SAT model's size, or the bounds alone."""
    if s.num_variables:
        return f"{s.num_variables} vars"
    return "no CP-SAT model: the bounds and exact scores proved it"
