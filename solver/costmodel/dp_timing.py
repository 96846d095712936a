"""Data-parallel time: the dp/FSDP traffic by ZeRO stage, what hides it, the step latencies of
its collectives, and the optimizer step (terms; see timing.py)."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import numpy as np

from meshplan.solver.costmodel.context import Ctx
from meshplan.solver.costmodel.memory_state import _extras, _layer_params, expert_shard, shard_group
from meshplan.solver.costmodel.point import (
    LayoutOrRows,
    column,
    dp_cp,
    maximum,
    minimum,
    per_rows,
    pick,
    tp_dp_cp,
)
from meshplan.solver.costmodel.rates import BUCKET, Rates, _etp
from meshplan.solver.costmodel.terms import Term
from meshplan.solver.costmodel.timing_axes import _Axes, _per_mb, _per_token
from meshplan.solver.schema import Framework


def optimizer_terms(c: Ctx, R: Rates, fx, stage, inv_bm) -> list[Term]:  # noqa: ANN001
    """Adam step: read/write master, m, v, read grads, write weights, over the local shard."""
    per_param = (2 * c.ob + c.gb + c.wb) / c.H.hbm_bw
    z1 = lambda z: z >= 1  # noqa: E731

    def local(lay: LayoutOrRows, i: int, sh: bool) -> np.ndarray:
        x = dp_params(c, lay)[i]
        return x / shard_group(c, lay) if sh else x  # x/1 is x

    out = [
        Term(
            "optimizer",
            lambda lay, sh: local(lay, 0, sh) * per_param * fx(lay),
            sel="z",
            key=z1,
            pv=stage,
            db=inv_bm,
        ),
        Term(
            "optimizer",
            lambda lay, sh: local(lay, 2, sh) * per_param * fx(lay),
            sel="z",
            key=z1,
            db=inv_bm,
        ),
    ]
    if c.A.is_moe:
        out += [
            Term(
                "optimizer",
                lambda lay, sh: 0.0 if sh else dp_params(c, lay)[1] * per_param * fx(lay),
                sel="z",
                key=z1,
                pv=stage,
                te=lambda te: Fraction(1, te[1] * _etp(te)),
                db=inv_bm,
            ),
            Term(
                "optimizer",
                lambda lay, sh: expert_shard(c, lay) * per_param * fx(lay) if sh else 0.0,
                sel="z",
                key=z1,
                pv=stage,
                db=inv_bm,
            ),
        ]
    return out


def dp_params(c: Ctx, lay: LayoutOrRows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(per-layer dense parameters on one GPU, per-layer expert parameters of all experts, extra
    parameters on one GPU) of the heaviest stage; a GPU holds 1/(ep·etp) of the experts. Over
    rows, computed once per request's context (kept in the rows' memo: a dozen terms read it)."""
    return per_rows(_dp_params, c, lay)


def _dp_params(c: Ctx, lay: LayoutOrRows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    dense, expert = _layer_params(c, lay)
    extra = maximum(_extras(c, lay, "first"), _extras(c, lay, "last"))
    return dense / lay.tp, expert, extra


# Bytes per parameter moved per step by ZeRO stage, and whether it recurs per micro-batch:
# 0: all-reduce grads once; 1: reduce-scatter grads + all-gather weights once; 2: reduce-scatter
# every micro-batch + all-gather once; 3: all-gather weights forward and backward + reduce-scatter
# grads every micro-batch (Rajbhandari et al. 2020, §5; PyTorch FSDP). A recipe that accumulates
# unsharded (FSDP2 without sync, KempnerForge) reduce-scatters its fp32 grads once per step.
def _dp_volume(c: Ctx, z: int) -> tuple[float, float]:
    """(bytes per parameter once per step, bytes per parameter per micro-batch)."""
    if z == 3 and c.recipe.reduce_bytes:
        return float(c.recipe.reduce_bytes), float(2 * c.wb)
    if z == 1 and c.framework is Framework.NANOTRON:
        # nanotron's ZeRO-1 (huggingface/nanotron @ e24d248 trainer.py train_step:
        # sync_gradients_across_dp(reduce_scatter=False); optim/zero.py _all_gather_params):
        # an all-reduce of the fp32 gradients and an all-gather of the fp32 master parameters
        return float(2 * c.rb + c.recipe.master), 0.0
    return {
        0: (2.0 * c.rb, 0.0),
        1: (float(c.rb + c.wb), 0.0),
        2: (float(c.wb), float(c.rb)),
        3: (0.0, float(2 * c.wb + c.rb)),
    }[z]


def _ring(R: Rates, lay: LayoutOrRows) -> np.ndarray:
    """Latency of one all-gather or reduce-scatter over the shard group (dp·cp; in the node
    with hybrid sharding)."""
    n = shard_group(R.c, lay)
    return pick(n == 1, 0.0, R.ring_latency(n, lay.tp * n))  # the span tp·n: integers


def _dp_group(R: Rates, lay: LayoutOrRows) -> tuple[np.ndarray, np.ndarray]:
    """(size, bandwidth per GPU) of the shard group's ring (dp·cp; in the node with hybrid
    sharding)."""
    g = shard_group(R.c, lay)
    return g, R.group_bw(g, lay.tp)


def _replicas(c: Ctx, lay: LayoutOrRows, R: Rates, nb: float) -> np.ndarray:
    """Hybrid sharding: seconds per token per parameter of nb gradient bytes all-reduced across
    the n = dp·cp/S replicas of each rank's 1/S shard (2(n − 1)/n of it, Thakur et al. 2005),
    on the NICs (pytorch torch/distributed/fsdp/_runtime_utils.py _post_backward_reshard: the
    reduce-scatter in the node, then an all-reduce over the inter-node group)."""
    S = shard_group(c, lay)
    n = dp_cp(lay) // S
    bw = R.group_bw(n, lay.tp * S)
    return pick(n == 1, 0.0, 2.0 * nb / S * (n - 1) / n / bw * per_rows(_per_mb, c, lay))


def _coll(R: Rates, lay: LayoutOrRows, z0: bool) -> np.ndarray:
    """Latency of a bucket's collectives: an all-reduce (ZeRO-0), else a reduce-scatter and an
    all-gather."""
    if z0:
        n = dp_cp(lay)
        return pick(n == 1, 0.0, R.allreduce_latency(n, tp_dp_cp(lay)))
    return 2 * per_rows(_ring, R, lay)


def _buckets_of(lay: LayoutOrRows) -> np.ndarray:
    # Megatron DDP's bucket: max(4e7, 1e6·dp) elements, over the dp·cp group
    return maximum(BUCKET, 1_000_000 * lay.dp * lay.cp)


def _bucket_latency(c: Ctx, lay: LayoutOrRows, R: Rates, i: int, z0: bool) -> np.ndarray:
    """Per micro-batch: the buckets of `dp_params(c, lay)[i]` (one more for the extras, i = 2),
    each paying `_coll` (over rows computed once: ZeRO stages 1 and 2 share it)."""
    buckets = dp_params(c, lay)[i] / column(_buckets_of, lay)
    if i == 2:
        buckets = buckets + 1
    return buckets * per_rows(_coll, R, lay, z0) * per_rows(_per_mb, c, lay)


def _comm(c: Ctx, lay: LayoutOrRows, R: Rates, i: int, nb: float) -> np.ndarray:
    """`dp_params(c, lay)[i]` times the dp ring's cost per byte (`_coef`; i = 1: the expert
    group's), over rows computed once (ZeRO stages of equal bytes share it)."""
    return dp_params(c, lay)[i] * per_rows(_coef, c, lay, R, nb, i == 1)


def _coef(c: Ctx, lay: LayoutOrRows, R: Rates, nb: float, experts: bool) -> np.ndarray:
    """Seconds per token of the step per parameter of nb bytes moved over the dp·cp ring: a
    ring moves (g − 1)/g of its volume (Thakur et al. 2005); the expert-data-parallel group
    tp·cp·dp/(ep·etp) moves (1/(ep·etp) − 1/(tp·cp·dp)) of the experts' parameters per GPU
    (Megatron-Core MoE parallel folding): here nb, the rest is in the terms' factors."""
    g, bw = per_rows(_dp_group, R, lay)
    fx = per_rows(_per_mb, c, lay)
    if experts:
        return pick(g == 1, 0.0, nb / bw * fx)
    return pick(g == 1, 0.0, nb * (g - 1) / g / bw * fx)


def _credit(c: Ctx, lay: LayoutOrRows, R: Rates, share: float, tok: bool) -> np.ndarray:
    """share of a layer's per-token time (tok) or of its fixed per-micro-batch time, per token
    of the step (over rows computed once: ZeRO stages of equal shares share it)."""
    if tok:
        return share * R.layer(lay) * per_rows(_per_token, c, lay)
    return share * sum(R.fixed(lay)) * per_rows(_per_mb, c, lay)


def _dp_latency(c: Ctx, R: Rates, z: int, x: _Axes) -> list[Term]:
    """Step latencies of the dp collectives: per layer per micro-batch under ZeRO-3 (FSDP
    gathers each layer forward and backward and reduce-scatters it), else per bucket."""
    fx = x.fx
    ring = lambda lay: per_rows(_ring, R, lay)  # noqa: E731
    if z == 3:
        per_mb, once = (2, 1) if c.recipe.reduce_bytes else (3, 0)
        out = [Term("dp_comm", lambda lay, _: per_mb * ring(lay) * fx(lay), pv=x.stage, db=x.inv_b)]
        if once:
            out.append(Term("dp_comm", lambda lay, _: ring(lay) * fx(lay), pv=x.stage, db=x.inv_bm))
        return out

    layer = lambda lay, _: per_rows(_bucket_latency, c, lay, R, 0, z == 0)  # noqa: E731
    rest = lambda lay, _: per_rows(_bucket_latency, c, lay, R, 2, z == 0)  # noqa: E731
    db = x.inv_b if z == 2 else x.inv_bm  # ZeRO-2 reduce-scatters every micro-batch
    return [Term("dp_comm", layer, pv=x.stage, db=db), Term("dp_comm", rest, db=db)]


def _tail(c: Ctx, lay: LayoutOrRows, R: Rates, z: int) -> np.ndarray:
    """Seconds per micro-batch of the dp traffic no overlap can hide (times 1/(dp·s)): the last
    bucket's gradient reduction starts after the last micro-batch's backward, and the next
    step's first forward waits for its first bucket's parameters (Megatron-LM @ d98e8a6
    distributed/param_and_grad_buffer.py: a bucket's collective starts once its last gradient is
    ready; finish_grad_sync waits for the last); under ZeRO-3 one layer's gather and reduction
    (FSDP's first unit and last reduce-scatter). One bucket: Megatron's max(4e7, 1e6·dp·cp)
    elements, at most the stage's parameters."""
    per_layer = dp_params(c, lay)[0]
    if z == 3:
        elems = per_layer
    else:
        stage = per_layer * c.A.L / lay.pp + dp_params(c, lay)[2]
        elems = minimum(column(_buckets_of, lay), stage)
    nb = 2.0 * c.rb if z == 0 else float(c.rb + c.wb)  # an all-reduce, or RS + AG
    return elems * per_rows(_coef, c, lay, R, nb, False) + per_rows(_coll, R, lay, z == 0) * (
        per_rows(_per_mb, c, lay)
    )


def _scaled(t: Term, f: float) -> Term:
    return Term(t.name, lambda lay, k, t=t: f * t.start(lay, k), t.sel, t.key, t.pv, t.te, t.db)


def _inv_expert_group(te: tuple[int, ...]) -> Fraction:
    """1/(ep·etp): a GPU's share of the experts (one function: terms of every stage share it)."""
    return Fraction(1, te[1] * _etp(te))


def _zero_stage(z: int) -> int:
    """The key of the terms charged for one ZeRO stage: the stage itself (one function, so that
    terms of every stage with equal factors are one group)."""
    return z


def tax_terms(c: Ctx, R: Rates, x: _Axes) -> list[Term]:
    """What overlapped dp traffic costs the compute it hides behind: its collectives' kernels
    hold SMs and memory bandwidth while the GEMMs run (NCCL runs one thread block per channel
    on an SM of its own), a share overlap_tax of the traffic's time, charged for the chosen ZeRO
    stage where it is overlapped; dp_terms times the rest, (1 − overlap_tax) of it, against the
    credit, so traffic that nothing hides still costs its time once."""
    out = []
    tax = c.K.overlap_tax
    for z in sorted(R.ov.dp_stages) if tax else ():
        for t in dp_terms(c, R, z, taxed=False, x=x)[0]:
            out.append(
                Term(
                    t.name,
                    lambda lay, zz, t=t, z=z: tax * t.start(lay, None) if zz == z else 0.0,
                    sel="z",
                    key=_zero_stage,
                    pv=t.pv,
                    te=t.te,
                    db=t.db,
                )
            )
    return out


def tail_terms(c: Ctx, R: Rates, x: _Axes) -> list[Term]:
    """The exposed dp tail of the chosen ZeRO stage where its traffic is overlapped (dp_terms
    credits it back, so the exposed dp time is max(tail, comm − credit))."""
    return [
        Term(
            "dp_comm",
            lambda lay, zz, z=z: per_rows(_tail, c, lay, R, z) if zz == z else 0.0,
            sel="z",
            key=_zero_stage,
            db=x.inv_bm,
        )
        for z in sorted(R.ov.dp_stages)
    ]


def dp_terms(
    c: Ctx, R: Rates, z: int, taxed: bool = True, x: _Axes | None = None
) -> tuple[list[Term], list[Term]]:
    """(comm, credit) terms per token for ZeRO stage z: exposed = max(0, comm − credit); where
    it is overlapped, comm is (1 − overlap_tax) of the traffic (`taxed`; see tax_terms). `x`:
    the factors to use (tax_terms passes the objective's, so that equal factors group)."""
    A, K, x = c.A, c.K, x or _Axes(c)
    inv_group = _inv_expert_group

    def comm_of(i: int, nb: float):  # noqa: ANN202
        return lambda lay, _: per_rows(_comm, c, lay, R, i, nb)

    once, per_mb = _dp_volume(c, z)
    comm: list[Term] = []
    credit: list[Term] = []
    for nb, dbf in ((once, x.inv_bm), (per_mb, x.inv_b)):
        if nb == 0:
            continue
        comm.append(Term("dp_comm", comm_of(0, nb), pv=x.stage, db=dbf))
        comm.append(Term("dp_comm", comm_of(2, nb), db=dbf))
        if A.is_moe:
            experts = comm_of(1, nb)
            comm.append(Term("dp_comm", experts, pv=x.stage, te=inv_group, db=dbf))
            credit.append(
                Term(
                    "dp_comm",
                    lambda lay, _, e=experts: e(lay, None) / tp_dp_cp(lay),
                    pv=x.stage,
                    db=dbf,
                )
            )
    if c.recipe.hybrid_shard and z >= 1:
        # the gradient shards' all-reduce across nodes, as often as the reduce-scatter
        if z == 3 and c.recipe.reduce_bytes:  # unsharded accumulation: reduced once a step
            rb, rdb = float(c.recipe.reduce_bytes), x.inv_bm
        else:
            rb, rdb = float(c.rb), x.inv_bm if z == 1 else x.inv_b
        for i, pv in ((0, x.stage), (2, None)):
            comm.append(
                Term(
                    "dp_comm",
                    lambda lay, _, i=i, rb=rb: (
                        dp_params(c, lay)[i] * per_rows(_replicas, c, lay, R, rb)
                    ),
                    pv=pv,
                    db=rdb,
                )
            )
    comm += _dp_latency(c, R, z, x)
    if z not in R.ov.dp_stages:
        return comm, credit
    if taxed and K.overlap_tax:
        comm = [_scaled(t, 1.0 - K.overlap_tax) for t in comm]  # tax_terms charge the rest
    if z <= 1 and R.ov.dp_per_chunk:  # every chunk but the last hides its own (timing_axes)
        comm = [replace(t, pv=x.stage_dp) if t.pv is x.stage else t for t in comm]
    # What hides it (Megatron --overlap-grad-reduce / --overlap-param-gather, FSDP prefetch):
    # the last micro-batch's backward (z0), and the next step's first forward (z1), every
    # backward (z2), every forward and backward (z3), at overlap efficiency omega.
    share = K.omega * {0: 2.0 / 3.0, 1: 1.0, 2: 2.0 / 3.0, 3: 1.0}[z]
    tok_db, fix_db = (x.inv_m, x.inv_bm) if z <= 1 else (None, x.inv_b)
    credit.append(
        Term(
            "dp_credit",
            lambda lay, _: per_rows(_credit, c, lay, R, share, True),
            pv=x.stage,
            db=tok_db,
        )
    )
    credit.append(
        Term(
            "dp_credit",
            lambda lay, _: per_rows(_credit, c, lay, R, share, False),
            pv=x.stage,
            db=fix_db,
        )
    )
    # the tail the objective charges (tail_terms) is not charged twice
    credit.append(Term("dp_credit", lambda lay, _: per_rows(_tail, c, lay, R, z), db=x.inv_bm))
    return comm, credit
