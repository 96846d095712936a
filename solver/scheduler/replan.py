"""Replan: the layout after losing or gaining nodes, at a compatibility level.

Each size is planned twice: with the level's pins (SAME_MODEL_PARALLEL keeps tp, pp, cp, ep and
the virtual stages; SAME_TP keeps tp) and free, so the answer carries the price of
compatibility. The memory bill decides: with a sharded optimizer, fewer replicas hold larger
shards, so "same tp*pp on fewer nodes" can overflow.
"""

from __future__ import annotations

import math

from meshplan.solver.hardware import resolve_cluster
from meshplan.solver.planner import evaluate
from meshplan.solver.results import Evaluation
from meshplan.solver.scheduler.answers import CellStatus, ReplanResult, ReplanRow
from meshplan.solver.scheduler.cache import AnswerCache
from meshplan.solver.scheduler.cells import Budget, CellOutcome, CellSolver, CellTask, solve_cells
from meshplan.solver.scheduler.key import cache_key, cost_model_version
from meshplan.solver.scheduler.requests import (
    BatchPolicy,
    BatchPolicyKind,
    CheckpointReshard,
    CompatibilityLevel,
    ReplanRequest,
)
from meshplan.solver.scheduler.state import restart, state_move
from meshplan.solver.scheduler.validate import (
    SchedulerInputError,
    check_batch,
    check_model,
    check_pins_for_model,
    check_precision,
)
from meshplan.solver.schema import EvaluateRequest, ParallelConfig, SearchSpec

LEVELS = (
    CompatibilityLevel.SAME_MODEL_PARALLEL,
    CompatibilityLevel.SAME_TP,
    CompatibilityLevel.FREE,
)
# Which field of the running layout a rule it breaks is about (space.violations' wording).
_RULE_FIELD = (
    ("is not the GPU count", "dp"),
    ("the cluster has", "dp"),
    ("virtual_stages > 1", "virtual_stages"),
    ("pp*virtual_stages", "pp"),
    ("with pp > 1", "pp"),
    ("sequence_parallel", "sequence_parallel"),
    ("context parallelism", "cp"),
    ("ep (", "ep"),
    ("tp (", "tp"),
    ("with tp > 1", "tp"),
    ("2*tp*cp", "tp"),
)


def level_pins(level: CompatibilityLevel, cfg: ParallelConfig) -> dict[str, object]:
    """The search pins a level keeps from the running layout."""
    keep = {"tp": cfg.tp}
    if cfg.tp > 1:
        keep["sequence_parallel"] = cfg.sequence_parallel
    if level is CompatibilityLevel.SAME_MODEL_PARALLEL:
        keep |= {"pp": cfg.pp, "cp": cfg.cp, "ep": cfg.ep, "virtual_stages": cfg.virtual_stages}
    return {} if level is CompatibilityLevel.FREE else keep


def honours(level: CompatibilityLevel, before: ParallelConfig, after: ParallelConfig) -> bool:
    """True if `after` keeps what `level` keeps of `before`."""
    return all(getattr(after, k) == v for k, v in level_pins(level, before).items())


def running_layout(req: ReplanRequest) -> ParallelConfig:
    """The running layout with its micro-batch count: as given, or from a FIXED_GLOBAL batch
    (global = dp * micro_batch_size * num_microbatches * seq_len); without either the running
    batch is unknown, which is bad input."""
    cfg, b = req.config, req.batch
    if cfg.num_microbatches is not None:
        return cfg
    per_step = cfg.dp * cfg.micro_batch_size * req.training.seq_len
    if b.kind is BatchPolicyKind.FIXED_GLOBAL and b.global_batch_tokens:
        if b.global_batch_tokens % per_step:
            raise SchedulerInputError(
                "config.num_microbatches",
                f"unset, and batch.global_batch_tokens ({b.global_batch_tokens}) is not a "
                f"multiple of dp*micro_batch_size*seq_len ({per_step}): give num_microbatches",
            )
        return cfg.model_copy(update={"num_microbatches": b.global_batch_tokens // per_step})
    raise SchedulerInputError(
        "config.num_microbatches",
        "required: the running layout's micro-batches per step per replica (count), or a "
        "FIXED_GLOBAL batch.global_batch_tokens to derive it from",
    )


def _before(req: ReplanRequest) -> tuple[Evaluation, list[str]]:
    """The running layout scored on the running cluster; a layout that breaks the model's or
    the framework's rules is bad input (memory and the critical batch are only noted)."""
    cfg, s = req.config, req.training.seq_len
    tokens = cfg.dp * cfg.micro_batch_size * cfg.num_microbatches * s
    training = req.training.model_copy(
        update={"global_batch_tokens": tokens, "critical_batch_tokens": 0}
    )
    ev = evaluate(
        EvaluateRequest(
            model=req.model,
            cluster=req.cluster,
            training=training,
            config=cfg,
            search=req.search.model_copy(update={"allow_fewer_gpus": True}),
        )
    )
    notes = []
    counts = ("is not the GPU count", "the cluster has")  # after the rules about the model
    for v in sorted(ev.violations, key=lambda v: any(c in v for c in counts)):
        if v.startswith("memory:"):
            notes.append(f"the cost model says the running layout does not fit ({v})")
            continue
        name = next((f for text, f in _RULE_FIELD if text in v), "")
        raise SchedulerInputError(
            f"config.{name}" if name else "config",
            f"the running layout breaks a rule on {req.cluster.num_gpus} GPUs: {v}",
        )
    crit = req.training.critical_batch_tokens
    if crit and tokens > crit:
        notes.append(f"the running batch ({tokens} tokens) exceeds critical_batch_tokens ({crit})")
    return ev, notes


def _events(req: ReplanRequest, gpn: int) -> list[int]:
    ev, n = req.event, req.cluster.num_gpus
    if bool(ev.delta_nodes) == bool(ev.precompute_nodes):
        raise SchedulerInputError("event", "set exactly one of delta_nodes and precompute_nodes")
    nodes = n // gpn
    if ev.precompute_nodes:
        if ev.precompute_nodes >= max(nodes, 1):
            raise SchedulerInputError(
                "event.precompute_nodes",
                f"{ev.precompute_nodes} is not below the {nodes} whole nodes of {gpn} GPUs running now",
            )
        return [-k for k in range(1, ev.precompute_nodes + 1)]
    if n + ev.delta_nodes * gpn < 1:
        raise SchedulerInputError(
            "event.delta_nodes",
            f"losing {-ev.delta_nodes} nodes of {gpn} GPUs leaves no GPU of the {n} running now",
        )
    if n + ev.delta_nodes * gpn > 1_048_576:
        raise SchedulerInputError(
            "event.delta_nodes", f"{ev.delta_nodes} nodes exceeds 1,048,576 GPUs"
        )
    return [ev.delta_nodes]


def _batch(req: ReplanRequest) -> BatchPolicy:
    """The policy with 0 meaning the running layout's batch."""
    b, cfg, s = req.batch, req.config, req.training.seq_len
    if b.kind is BatchPolicyKind.FIXED_GLOBAL and not b.global_batch_tokens:
        tokens = cfg.dp * cfg.micro_batch_size * cfg.num_microbatches * s
        return b.model_copy(update={"global_batch_tokens": tokens})
    if b.kind is BatchPolicyKind.FIXED_PER_REPLICA and not b.per_replica_batch_tokens:
        return b.model_copy(
            update={"per_replica_batch_tokens": cfg.micro_batch_size * cfg.num_microbatches * s}
        )
    return b


def _task(
    req: ReplanRequest, n: int, batch: BatchPolicy, level: CompatibilityLevel, explain: bool
) -> CellTask:
    pins = level_pins(level, req.config)
    search: SearchSpec = req.search.model_copy(
        update={**pins, "allow_fewer_gpus": req.allow_idle_gpus}
    )
    return CellTask(
        model=req.model,
        training=req.training,
        search=search,
        cluster=req.cluster.model_copy(update={"num_gpus": n}),
        batch=batch,
        time_limit_s=req.options.cell_time_limit_s,
        explain=explain,
    )


def _row(
    req: ReplanRequest,
    delta: int,
    n: int,
    gpn: int,
    before: Evaluation,
    out: CellOutcome,
    free: CellOutcome,
) -> ReplanRow:
    row = ReplanRow(delta_nodes=delta, num_gpus=n, status=out.status, reason=out.reason)
    if free.status is CellStatus.PLANNED:
        row.free_config = free.result.config
        row.free_tokens_per_s = free.result.performance.tokens_per_s
    if out.status is not CellStatus.PLANNED:
        why = out.result.explanation if out.result is not None else None
        if why is not None and why.min_gpus:
            row.min_nodes_at_level = math.ceil(why.min_gpus / gpn)
        return row
    res, perf = out.result, out.result.performance
    row.config, row.memory = res.config, res.memory
    row.num_gpus_used = perf.num_gpus_used
    row.global_batch_tokens = perf.global_batch_tokens
    row.step_time_s, row.tokens_per_s, row.mfu = perf.step_time_s, perf.tokens_per_s, perf.mfu
    row.throughput_kept = perf.tokens_per_s / before.performance.tokens_per_s
    if row.free_tokens_per_s:
        row.price_of_compatibility = max(0.0, 1 - perf.tokens_per_s / row.free_tokens_per_s)
    row.state_move = state_move(req.config, res.config, res.memory)
    row.restart_implied, row.restart_reason = restart(req.config, res.config)
    return row


def replan(
    req: ReplanRequest,
    budget: Budget | None = None,
    cache: AnswerCache[ReplanResult] | None = None,
    solver: CellSolver = solve_cells,
) -> ReplanResult:
    """The new layout for each event of `req` (from `cache` when asked before)."""
    key = cache_key("replan", req)
    if cache is not None and (hit := cache.get(key)) is not None:
        return hit
    req = req.model_copy(update={"config": running_layout(req)})
    arch = check_model(req.model)
    check_pins_for_model(arch, req.search)
    try:
        hw = resolve_cluster(req.cluster)
    except KeyError as err:
        raise SchedulerInputError("cluster.gpu", str(err.args[0])) from None
    check_precision(req.training, [hw], "cluster", labels=False)
    level = req.compatibility
    if (
        req.checkpoint_reshard is CheckpointReshard.DP_ONLY
        and level is not CompatibilityLevel.SAME_MODEL_PARALLEL
    ):
        raise SchedulerInputError(
            "compatibility",
            f"{level.value} may change tp or pp, which a checkpoint that reshards across data "
            "parallelism only cannot reload: use SAME_MODEL_PARALLEL or checkpoint_reshard FULL",
        )
    check_batch(req.batch, req.training, keep_ok=True)
    before, notes = _before(req)
    deltas = _events(req, hw.gpn)
    replica = req.config.tp * req.config.pp * req.config.cp
    if len(deltas) == 1 and level is CompatibilityLevel.SAME_MODEL_PARALLEL:
        n = req.cluster.num_gpus + deltas[0] * hw.gpn
        if replica > n:
            raise SchedulerInputError(
                "compatibility",
                f"SAME_MODEL_PARALLEL needs tp*pp*cp = {replica} GPUs per replica but {n} remain; "
                "SAME_TP or FREE can use them",
            )
    batch = _batch(req)
    sizes = [req.cluster.num_gpus + d * hw.gpn for d in deltas]
    tasks = []
    for n in sizes:
        tasks.append(_task(req, n, batch, level, explain=True))
        if level is not CompatibilityLevel.FREE:
            tasks.append(_task(req, n, batch, CompatibilityLevel.FREE, explain=False))
    outs = solver(tasks, budget or Budget())
    step = 1 if level is CompatibilityLevel.FREE else 2
    rows = []
    for i, (d, n) in enumerate(zip(deltas, sizes, strict=True)):
        mine, free = outs[i * step], outs[i * step + step - 1]
        row = _row(req, d, n, hw.gpn, before, mine, free)
        if row.status is not CellStatus.PLANNED:
            row.least_level = _least_level(req, n, batch, level, free, budget or Budget(), solver)
        rows.append(row)
    result = ReplanResult(
        cache_key=key,
        cost_model_version=cost_model_version(),
        compatibility=level,
        before_num_gpus=req.cluster.num_gpus,
        before_tokens_per_s=before.performance.tokens_per_s,
        before_memory=before.memory,
        before_global_batch_tokens=before.performance.global_batch_tokens,
        rows=rows,
        notes=notes,
    )
    if cache is not None:
        cache.put(key, result)
    return result


def _least_level(
    req: ReplanRequest,
    n: int,
    batch: BatchPolicy,
    level: CompatibilityLevel,
    free: CellOutcome,
    budget: Budget,
    solver: CellSolver,
) -> CompatibilityLevel | None:
    """The first looser level that plans at n (only if the checkpoint can reshard fully)."""
    if req.checkpoint_reshard is CheckpointReshard.DP_ONLY:
        return None
    for looser in LEVELS[LEVELS.index(level) + 1 :]:
        if looser is CompatibilityLevel.FREE:
            return looser if free.status is CellStatus.PLANNED else None
        (out,) = solver([_task(req, n, batch, looser, explain=False)], budget)
        if out.status is CellStatus.PLANNED:
            return looser
    return None
