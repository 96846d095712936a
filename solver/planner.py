"""plan() and evaluate(): the library the CLI and the gRPC server wrap."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import numpy as np

from meshplan.solver import cache
from meshplan.solver.arch import Arch, resolve_model
from meshplan.solver.batch_size import batch_choice
from meshplan.solver.blas import one_blas_thread
from meshplan.solver.costmodel import CostModel, Point
from meshplan.solver.cpsat.search import search
from meshplan.solver.cpsat.tables import Stopped, Tables
from meshplan.solver.explain import explain, known_feasible, known_infeasible
from meshplan.solver.greedy import greedy
from meshplan.solver.hardware import Hardware, resolve_cluster
from meshplan.solver.profiles import check_request
from meshplan.solver.results import (
    Alternative,
    Evaluation,
    NumParameters,
    PlanResult,
    PlanStatus,
    SolverInfo,
)
from meshplan.solver.rules import check_model
from meshplan.solver.schema import EvaluateRequest, PlanRequest, SearchSpec
from meshplan.solver.space import Batch, Space, violations
from meshplan.solver.walls import wall, warnings


def check_pins(A: Arch, H: Hardware, q: SearchSpec) -> None:
    """Pins that can never hold are bad input (ValueError naming the field), not infeasibility."""
    if q.tp and (A.a % q.tp or A.kv % q.tp):
        raise ValueError(
            f"search.tp ({q.tp}) must divide num_attention_heads ({A.a}) and num_kv_heads ({A.kv})"
        )
    if q.pp and q.pp > A.L:
        raise ValueError(f"search.pp ({q.pp}) exceeds num_layers ({A.L})")
    if q.ep and not A.is_moe and q.ep != 1:
        raise ValueError(f"search.ep ({q.ep}) needs an MoE model")
    if q.ep and A.is_moe and A.E % q.ep:
        raise ValueError(f"search.ep ({q.ep}) must divide num_experts ({A.E})")
    if q.etp and not A.is_moe:
        raise ValueError(f"search.etp ({q.etp}) needs an MoE model")
    if q.etp and A.is_moe and A.fe % q.etp:
        raise ValueError(
            f"search.etp ({q.etp}) must divide the expert FFN width "
            f"(model.moe.expert_ffn_hidden_size {A.fe})"
        )
    for name in ("tp", "pp", "dp", "cp"):
        v = getattr(q, name)
        if v and H.num_gpus % v and not q.allow_fewer_gpus:
            raise ValueError(f"search.{name} ({v}) must divide cluster.num_gpus ({H.num_gpus})")


def _resolve(req: PlanRequest | EvaluateRequest) -> tuple[Arch, Hardware, CostModel]:
    A = resolve_model(req.model)
    H = resolve_cluster(req.cluster)
    t = req.training
    check_request(t.framework, t.precision, H.name, H.fp8)
    check_model(A, t.framework)
    return A, H, cache.cost_model(A, H, req.training, req.search)


def _nparams(A: Arch) -> NumParameters:
    return NumParameters(total=A.total_params, active=A.active_params)


def _score(tables: Tables, p: Point) -> tuple:
    """Time and memory of a point of the space, read from the tables' rows (whose start tables
    are computed already: a point's own one-row table would compute them again); a pure
    function of the space and the point, kept with the space for a request that repeats it."""
    sp, i = tables.sp, tables.index[p.lay]

    def score() -> tuple:
        perf, mem = sp.cm.performance(p, tables.rows, i), sp.cm.memory_bill(p, tables.rows, i)
        return perf, mem, wall(sp, p, perf, mem), tuple(warnings(sp, p, perf))

    perf, mem, w, warns = sp.kept(("score", p), score)
    return perf, mem, w, list(warns)


def plan(req: PlanRequest, stop_event: threading.Event | None = None) -> PlanResult:
    """The best layout under the cost model, proven by CP-SAT (or the best found in time), with
    the rule that capped its global batch."""
    with one_blas_thread():
        res = _plan(req, stop_event)
    batch = batch_choice(req.training, res.num_parameters.active)
    return res.model_copy(update={"batch": batch})


def _plan(req: PlanRequest, stop_event: threading.Event | None = None) -> PlanResult:
    t0 = time.perf_counter()
    A, H, cm = _resolve(req)
    check_pins(A, H, req.search)
    key = (req.training.model_dump_json(), req.search.model_dump_json())
    sp = cache.space(cm, key, lambda: Space.build(A, H, req.training, req.search, cm, prune=False))
    o = req.options

    one_count = req.search.model_copy(update={"allow_fewer_gpus": False})

    def rebuild(n: int) -> Space:
        # resolve_cluster of the request's cluster on n GPUs (n is within the schema's cap)
        return Space.build(
            A,
            replace(H, num_gpus=n),
            req.training,
            one_count,
            cm,
            prune=False,  # the explanation reads each layout's least-memory point itself
        )

    deadline = t0 + o.time_limit_s  # the limit covers building the tables and models too

    def check() -> None:
        if time.perf_counter() >= deadline or (stop_event is not None and stop_event.is_set()):
            raise Stopped()

    def infeasible(status: str, solve_s: float, nvars: int = 0, ncons: int = 0) -> PlanResult:
        why = explain(sp, rebuild, o.explain, check, known)  # under the deadline and stop event
        info = SolverInfo(
            status=status,
            objective=0,
            bound=0,
            gap=0,
            wall_time_s=time.perf_counter() - t0,
            solve_time_s=solve_s,
            num_variables=nvars,
            num_constraints=ncons,
            num_layouts=len(sp.layouts),
            used_fallback=False,
        )
        return PlanResult(
            status=PlanStatus.INFEASIBLE,
            num_parameters=_nparams(A),
            explanation=why,
            solver=info,
        )

    known = cache.fits_by_count(cm, req.training, req.search, key)  # counts known to fit, or not
    if not (sp.layouts and sp.pv and sp.db and sp.te) or known_infeasible(sp, known):
        return infeasible("INFEASIBLE", 0.0)
    if not known_feasible(sp, known):
        fits = sp.some_layout_fits()
        if not sp.search.allow_fewer_gpus:  # what explain.feasible_at answers of this count
            known[sp.H.num_gpus] = fits  # (the same least-memory points): kept for the job
        if not fits:
            return infeasible("INFEASIBLE", 0.0)  # every row's bound is infinite: no search
    tables = Tables(sp, check)
    try:
        bounds = tables.coarse()
    except Stopped:
        raise TimeoutError("the solve was stopped before any plan was found") from None
    if "greedy" not in tables.memo:  # a pure function of the space's tables: once per space
        tables.memo["greedy"] = greedy(tables, np.flatnonzero(np.isfinite(bounds)))
    hint = tables.memo["greedy"]
    f = search(tables, hint, deadline, o.num_workers, o.relative_gap, o.top_k, stop_event)
    nv, nc = f.num_variables, f.num_constraints
    point, fallback = (f.points[0] if f.points else None), False
    if point is None and hint is not None and f.status == "UNKNOWN":
        point, fallback = hint, True
    if point is None:
        if f.status == "UNKNOWN":  # out of time with nothing in hand: not a proof
            raise TimeoutError("the solve was stopped before any plan was found")
        return infeasible(f.status, f.solve_time_s, nv, nc)
    at = tables.index[point.lay]
    assert cm.fits(point, tables.rows, at), "CP-SAT returned a point the cost model rejects"
    objective = cm.objective_int(point, tables.rows, at)
    bound = f.bound if not fallback else 0.0
    perf, mem, w, warns = _score(tables, point)
    alts = [(p, *_score(tables, p)) for p in f.points[1:]]
    status = PlanStatus.OPTIMAL if f.status == "OPTIMAL" else PlanStatus.FEASIBLE
    gap = max(objective - bound, 0) / max(objective, 1)  # 0 when proven; up to relative_gap
    # Made without validation: every part is a validated model already or an enum, a list of
    # str (tests/test_startup.py holds it equal to what validation makes of it); building the
    # answer's validator was 19 M instructions of the command line's first plan.
    return PlanResult.model_construct(
        status=status,
        config=point.config(),
        num_parameters=_nparams(A),
        memory=mem,
        performance=perf,
        binding_wall=w,
        warnings=warns,
        alternatives=[
            Alternative(config=p.config(), memory=m, performance=pf, binding_wall=ww)
            for p, pf, m, ww, _ in alts
        ],
        solver=SolverInfo(
            status=f.status if not fallback else "FALLBACK",
            objective=objective,
            bound=bound,
            objective_unit_s=cm.time_unit_s,
            gap=gap,
            wall_time_s=time.perf_counter() - t0,
            solve_time_s=f.solve_time_s,
            num_variables=nv,
            num_constraints=nc,
            num_layouts=len(sp.layouts),
            used_fallback=fallback,
        ),
    )


def derive_microbatches(req: EvaluateRequest, active_params: int) -> tuple[int, str]:
    """num_microbatches when the request leaves it out: the global batch over dp·b·seq_len (the
    batch identity), or the largest count under the plan's batch cap when no batch is given."""
    c, t = req.config, req.training
    per_step = c.dp * c.micro_batch_size  # sequences one micro-batch step takes
    if t.global_batch_tokens:
        seqs = t.global_batch_tokens // t.seq_len
        if seqs % per_step:
            raise ValueError(
                f"config.num_microbatches: not given, and the global batch of {seqs} sequences "
                f"does not split into dp({c.dp}) x micro_batch_size({c.micro_batch_size})"
            )
        m = seqs // per_step
        return m, (
            f"num_microbatches = {m}: training.global_batch_tokens ({t.global_batch_tokens:,}) "
            f"/ (dp({c.dp}) x micro_batch_size({c.micro_batch_size}) x seq_len({t.seq_len}))"
        )
    choice = batch_choice(t, active_params)
    m = max(choice.cap_tokens // t.seq_len // per_step, 1)
    return m, (
        f"num_microbatches = {m}: no global batch given, so the largest count under the plan's "
        f"batch cap, {choice.reason}"
    )


def evaluate(req: EvaluateRequest) -> Evaluation:
    """Score one given layout: rules it breaks, memory, time, MFU. A missing num_microbatches is
    derived from the batch (derive_microbatches) and said in `notes`."""
    A, H, cm = _resolve(req)
    t = req.training
    s = t.seq_len
    batch = Batch(t.global_batch_tokens // s, t.critical_batch_tokens // s)
    notes: list[str] = []
    if req.config.num_microbatches is None:
        m, why = derive_microbatches(req, A.active_params)
        req = req.model_copy(
            update={"config": req.config.model_copy(update={"num_microbatches": m})}
        )
        notes.append(why)
    p = Point.from_config(req.config)
    sp = Space(A, H, t, req.search, cm, batch)
    bad = violations(p, A, H, t, req.search, batch, check_pins=False)
    if req.config.sequence_parallel and req.config.tp == 1:
        bad = [v for v in bad if "sequence_parallel" not in v]
    mem = cm.memory_bill(p)
    used = mem.total - mem.reserve
    if cm.ctx.budget <= 0:  # nothing fits: said so, not as a negative amount
        bad.append(f"memory: {cm.ctx.usable_words()}")
    elif not cm.fits(p):
        bad.append(
            f"memory: {used / 2**30:.1f} GiB per GPU on the {mem.stage} stage exceeds "
            f"{cm.ctx.usable_words()}"
        )
    perf = cm.performance(p)
    return Evaluation(
        fits=not bad,
        violations=bad,
        config=req.config,
        num_parameters=_nparams(A),
        memory=mem,
        performance=perf,
        binding_wall=wall(sp, p, perf, mem),
        warnings=warnings(sp, p, perf),
        notes=notes,
    )
