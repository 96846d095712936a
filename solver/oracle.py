"""The exhaustive reference: every point of the space, scored by the same cost model.

It does not use `Space`'s generation or pruning: it walks raw ranges and keeps what the rules
(`violations`) and the memory check accept, so tests comparing it with CP-SAT check the
candidate generation, the pruning and the encoding at once. Tests and benchmarks only.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshplan.solver.arch import resolve_model
from meshplan.solver.costmodel import CostModel, Layout, Point
from meshplan.solver.hardware import resolve_cluster
from meshplan.solver.schema import PlanRequest, Recompute
from meshplan.solver.space import batch_of, divisors, fewer_gpu_counts, violations


@dataclass
class OracleResult:
    objective: int | None  # least integer objective (fs/token), None if nothing fits
    point: Point | None
    evaluated: int  # legal points scored


def oracle(req: PlanRequest) -> OracleResult:
    A, H = resolve_model(req.model), resolve_cluster(req.cluster)
    q, tr = req.search, req.training
    cm = CostModel(A, H, tr, q)
    batch = batch_of(tr)
    counts = fewer_gpu_counts(H.num_gpus, H.gpn) if q.allow_fewer_gpus else [H.num_gpus]
    bs = (
        [q.micro_batch_size]
        if q.micro_batch_size
        else [1 << k for k in range(q.max_micro_batch_size.bit_length())]
    )
    eps = divisors(A.E) if A.is_moe else [1]
    best: tuple[int, Point] | None = None
    n = 0
    for g in counts:
        for t in range(1, max(H.gpn, q.tp) + 1):
            for p in range(1, A.L + 3):  # a profile may add embedding and loss chunks
                if g % (t * p):
                    continue
                for c in divisors(g // (t * p)):
                    d = g // (t * p * c)
                    sp_on = t > 1 and q.sequence_parallel is not False
                    lay = Layout(t, p, c, d, g, sp_on)
                    for v in range(1, q.max_virtual_stages + 1):
                        for b in bs:
                            for m in batch.microbatches(d, b, q.num_microbatches):
                                # etp: 1..tp for an MoE model (no profile splits experts
                                # wider than tp); a dense model has none of its own (= tp)
                                etps = range(1, t + 1) if A.is_moe else [t]
                                for e, et in ((e, et) for e in eps for et in etps):
                                    for r in Recompute:
                                        for z in range(4):
                                            pt = Point(lay, v, b, m, e, et, r, z)
                                            if violations(pt, A, H, tr, q, batch):
                                                continue
                                            n += 1
                                            if not cm.fits(pt):
                                                continue
                                            o = cm.objective_int(pt)
                                            if best is None or o < best[0]:
                                                best = (o, pt)
    return OracleResult(best[0] if best else None, best[1] if best else None, n)
