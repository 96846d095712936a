"""The binding wall and the warnings of a scored plan (the README defines each wall)."""

from __future__ import annotations

from meshplan.solver.costmodel import Point
from meshplan.solver.results import MemoryBill, Performance, Wall
from meshplan.solver.space import Space

BUBBLE_WARN = 0.20  # a bubble over 20% of the step is the wall
COMM_WALL = 0.25  # exposed communication above a quarter of the step


def dp_cap_binds(sp: Space, p: Point) -> bool:
    """The critical batch caps dp below what the cluster could feed: the model parallelism that
    the weights force (their bytes over the usable memory), times the most replicas the cap
    allows (one sequence each), leaves GPUs over."""
    cap = sp.batch.cap_seqs
    if not cap or sp.cm.ctx.budget <= 0:  # no usable memory: memory binds, not the cap
        return False
    mp_floor = -(-sp.A.total_params * sp.cm.ctx.wb // sp.cm.ctx.budget)
    return sp.H.num_gpus > cap * mp_floor


def wall(sp: Space, p: Point, perf: Performance, mem: MemoryBill) -> Wall:
    bd = perf.breakdown
    comm = bd.tp_comm_s + bd.cp_comm_s + bd.ep_comm_s + bd.pp_comm_s + bd.dp_comm_s
    A, budget = sp.A, sp.cm.ctx.budget
    if dp_cap_binds(sp, p):
        return Wall.DP_CAP
    if perf.bubble_fraction > BUBBLE_WARN:
        return Wall.BUBBLE
    if comm > COMM_WALL * perf.step_time_s:
        return Wall.COMMUNICATION
    if p.lay.tp * p.lay.pp > 1 and A.total_params * sp.cm.ctx.wb > budget:
        return Wall.WEIGHTS
    rc = sp.cm.ctx.recipe  # static bytes per parameter, the accumulation buffer included
    state = rc.weights + rc.gradients + rc.optimizer + rc.accumulation
    if A.total_params * state > budget or mem.total > 0.9 * mem.hbm:
        return Wall.MEMORY
    return Wall.NONE


def warnings(sp: Space, p: Point, perf: Performance) -> list[str]:
    out = []
    n, s = sp.H.num_gpus, sp.training.seq_len
    if dp_cap_binds(sp, p):
        cap = sp.batch.cap_seqs
        out.append(
            f"past the DP cap: the critical batch of {cap * s:,} tokens allows at most {cap} "
            f"sequences per step: at most {cap}-way data parallel, so GPUs beyond that are "
            f"wasted on model parallelism the memory does not need (this plan: "
            f"tp*pp*cp={p.lay.tp * p.lay.pp * p.lay.cp} on {p.lay.gpus:,} of {n:,} GPUs)"
        )
    if p.lay.tp > sp.H.gpn:
        out.append(f"tp={p.lay.tp} crosses the node boundary ({sp.H.gpn} GPUs per node)")
    if perf.bubble_fraction > BUBBLE_WARN:
        out.append(f"the pipeline bubble is {perf.bubble_fraction:.0%} of the step (over 20%)")
    if p.lay.gpus < n:
        out.append(f"the plan uses {p.lay.gpus:,} of the {n:,} GPUs")
    return out
