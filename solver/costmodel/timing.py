"""Time per token of a configuration, as terms (seeds 003, 004; Narayanan et al. 2021).

Step time = (M·v + pp − 1)·t_chunk + M·t_head + exposed dp/FSDP + optimizer, the interleaved
1F1B schedule of Narayanan et al. 2021 §2.2 (bubble (pp−1)/(M·v + pp − 1), seed 003 for v = 1).
Every term is divided by the step's tokens dp·b·M·s, so the objective is time per token and the
same terms serve a fixed or a chosen global batch. The physics of a layer is in rates.py; the
overlaps a framework runs are in framework_timing.py.
"""

from __future__ import annotations

import math
from fractions import Fraction

from meshplan.solver.costmodel.context import Ctx, n_chunk, n_stage
from meshplan.solver.costmodel.memory import _extras, _layer_params
from meshplan.solver.costmodel.point import Layout
from meshplan.solver.costmodel.rates import BUCKET, Rates, _etp
from meshplan.solver.costmodel.terms import Term
from meshplan.solver.schema import Recompute

__all__ = ["Rates", "dp_terms", "objective_terms"]


def _per_token(c: Ctx, lay: Layout) -> float:
    """Seconds per token-in-micro-batch -> seconds per token of the step: s/cp tokens / (dp·s)."""
    return (c.s / lay.cp) / (lay.dp * c.s)


def _ratio(x: float) -> Fraction:
    """A float factor as a dyadic rational with a 20-bit numerator (relative error < 1e-6), so
    that numerator × the integer it multiplies stays far inside CP-SAT's 62-bit range."""
    if x <= 0:
        return Fraction(0)
    shift = 20 - math.frexp(x)[1]
    return (
        Fraction(round(x * 2**shift), 1) if shift <= 0 else Fraction(round(x * 2**shift), 2**shift)
    )


class _Axes:
    """The factors terms share (one function object each, so terms with equal factors group)."""

    def __init__(self, c: Ctx) -> None:
        L = c.A.L
        self.stage = lambda pv: n_stage(L, pv[0], pv[1])
        self.bub = lambda pv: Fraction((pv[0] - 1) * n_chunk(L, pv[0], pv[1]))
        self.chunks = lambda pv: Fraction(pv[1])
        self.hops = lambda pv: Fraction(pv[0] - 1)
        self.inv_b = lambda db: Fraction(1, db[1])
        self.inv_m = lambda db: Fraction(1, db[2])
        self.inv_bm = lambda db: Fraction(1, db[1] * db[2])
        self.pt = lambda lay: _per_token(c, lay)
        self.fx = lambda lay: 1.0 / (lay.dp * c.s)  # per micro-batch -> per step token


def _tp_only(lay_tp: int) -> Layout:
    return Layout(lay_tp, 1, 1, 1, lay_tp, lay_tp > 1)


def _pair(terms: list[Term], name: str, start, x: _Axes, per_token: bool, **kw) -> None:  # noqa: ANN001
    """A per-layer item on the stage's layers, and its share of the pipeline bubble."""
    db, bub_db = (None, x.inv_m) if per_token else (x.inv_b, x.inv_bm)
    terms.append(Term(name, start, pv=x.stage, db=db, **kw))
    terms.append(Term("bubble", start, pv=x.bub, db=bub_db, **kw))


def objective_terms(c: Ctx, R: Rates) -> list[Term]:
    """Time per token (s/token), except the exposed dp/FSDP time (see dp_terms)."""
    A, x = c.A, _Axes(c)
    pt, fx = x.pt, x.fx
    terms: list[Term] = []
    per_tok = (
        ("compute", lambda lay: R.compute(lay) + R.traffic(lay)),
        ("tp_comm", R.tp),
        ("cp_comm", R.cp),
    )
    for name, fn in per_tok:
        _pair(terms, name, lambda lay, _, fn=fn: fn(lay) * pt(lay), x, True)
    for i, name in enumerate(("compute", "tp_comm", "cp_comm")):
        _pair(terms, name, lambda lay, _, i=i: R.fixed(lay)[i] * fx(lay), x, False)
    if A.is_moe:
        terms += _moe_terms(c, R, x)
    _recompute_terms(terms, c, R, x)
    terms += [
        Term("pp_comm", lambda lay, _: R.p2p(lay)[0] * pt(lay), pv=x.chunks),
        Term("pp_comm", lambda lay, _: R.p2p(lay)[1] * fx(lay), pv=x.chunks, db=x.inv_b),
        Term("bubble", lambda lay, _: R.p2p(lay)[0] * pt(lay), pv=x.hops, db=x.inv_m),
        Term("bubble", lambda lay, _: R.p2p(lay)[1] * fx(lay), pv=x.hops, db=x.inv_bm),
        Term("compute", lambda lay, _: R.head(lay) * pt(lay)),
        Term("compute", lambda lay, _: c.K.kappa0 * fx(lay), db=x.inv_b),
    ]
    terms += optimizer_terms(c, R, fx, x.stage, x.inv_bm)
    return terms


def _moe_terms(c: Ctx, R: Rates, x: _Axes) -> list[Term]:
    """Expert traffic, all-to-all, permutation and their latencies: functions of (tp, ep, etp)
    carried by te factors over a start of one reference layer time per token."""
    pt, fx = x.pt, x.fx
    unit = R.F_layer / R.rate_gemm  # s per token of one layer at tp 1: factors stay O(1)
    unit_mb = unit * c.s

    def exposed(te: tuple[int, ...]) -> Fraction:
        lay = _tp_only(te[0])
        hide = R.compute(lay) + R.traffic(lay)  # another micro-batch's layer (1F1B a2a overlap)
        return _ratio(R.ep_exposed(te, hide) / unit)

    permute = lambda te: _ratio(R.permute(te) / unit)  # noqa: E731
    etp = lambda te: Fraction(_etp(te))  # noqa: E731
    inv_ep = lambda te: Fraction(1, te[1] * _etp(te))  # noqa: E731
    latency = lambda te: _ratio(R.ep_latency(te) / unit_mb)  # noqa: E731
    terms: list[Term] = []
    _pair(terms, "ep_comm", lambda lay, _: unit * pt(lay), x, True, te=exposed)
    _pair(terms, "compute", lambda lay, _: unit * pt(lay), x, True, te=permute)
    _pair(terms, "compute", lambda lay, _: R.expert_traffic_ref(lay) * pt(lay), x, True, te=etp)
    _pair(
        terms,
        "compute",
        lambda lay, _: R.expert_weight_traffic_ref() * fx(lay),
        x,
        False,
        te=inv_ep,
    )
    _pair(terms, "ep_comm", lambda lay, _: unit_mb * fx(lay), x, False, te=latency)
    # Full recomputation replays the forward: half the all-to-alls and permutations.
    half = lambda te: _ratio(float(exposed(te) + permute(te)) / 2)  # noqa: E731
    full = lambda r: r is Recompute.FULL  # noqa: E731
    _pair(
        terms,
        "recompute",
        lambda lay, on: unit * pt(lay) if on else 0.0,
        x,
        True,
        te=half,
        sel="r",
        key=full,
    )
    return terms


def _recompute_terms(terms: list[Term], c: Ctx, R: Rates, x: _Axes) -> None:
    """Extra time of recomputation: the attention core again (selective, Korthikanti §5), or
    the whole forward with its collectives (full)."""
    pt, fx = x.pt, x.fx

    def per_token(lay: Layout, r: Recompute) -> float:
        if r is Recompute.SELECTIVE:
            return R.attention(lay) / 3 * pt(lay)
        if r is Recompute.FULL:
            fwd = (R.compute(lay) + R.traffic(lay)) / 3 + R.tp(lay) / 2 + R.cp(lay) / 3
            return fwd * pt(lay)
        return 0.0

    def per_mb(lay: Layout, r: Recompute) -> float:
        if r is not Recompute.FULL:
            return 0.0
        k0, tpa, cpa = R.fixed(lay)
        return ((k0 + tpa) / 2 + cpa / 3) * fx(lay)

    _pair(terms, "recompute", per_token, x, True, sel="r")
    _pair(terms, "recompute", per_mb, x, False, sel="r")


def optimizer_terms(c: Ctx, R: Rates, fx, stage, inv_bm) -> list[Term]:  # noqa: ANN001
    """Adam step: read/write master, m, v, read grads, write weights, over the local shard."""
    per_param = (2 * c.ob + c.gb + c.wb) / c.H.hbm_bw
    shard = lambda lay, sh: lay.dp * lay.cp if sh else 1  # noqa: E731
    z1 = lambda z: z >= 1  # noqa: E731
    out = [
        Term(
            "optimizer",
            lambda lay, sh: dp_params(c, lay)[0] / shard(lay, sh) * per_param * fx(lay),
            sel="z",
            key=z1,
            pv=stage,
            db=inv_bm,
        ),
        Term(
            "optimizer",
            lambda lay, sh: dp_params(c, lay)[2] / shard(lay, sh) * per_param * fx(lay),
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
                lambda lay, sh: (
                    dp_params(c, lay)[1] / (lay.tp * lay.dp * lay.cp) * per_param * fx(lay)
                    if sh
                    else 0.0
                ),
                sel="z",
                key=z1,
                pv=stage,
                db=inv_bm,
            ),
        ]
    return out


def dp_params(c: Ctx, lay: Layout) -> tuple[float, float, float]:
    """(per-layer dense parameters on one GPU, per-layer expert parameters of all experts, extra
    parameters on one GPU) of the heaviest stage; a GPU holds 1/(ep·etp) of the experts."""
    dense, expert = _layer_params(c, lay)
    extra = max(_extras(c, lay, "first"), _extras(c, lay, "last"))
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
    return {
        0: (2.0 * c.gb, 0.0),
        1: (float(c.gb + c.wb), 0.0),
        2: (float(c.wb), float(c.gb)),
        3: (0.0, float(2 * c.wb + c.gb)),
    }[z]


def _dp_latency(c: Ctx, R: Rates, z: int, x: _Axes) -> list[Term]:
    """Step latencies of the dp collectives: per layer per micro-batch under ZeRO-3 (FSDP
    gathers each layer forward and backward and reduce-scatters it), else per bucket."""
    fx = x.fx

    def ring(lay: Layout) -> float:
        n = lay.dp * lay.cp
        return 0.0 if n == 1 else R.ring_latency(n, lay.tp * lay.cp * lay.dp)

    def buckets(params: float, lay: Layout) -> float:
        return params / max(BUCKET, 1_000_000 * lay.dp * lay.cp)

    if z == 3:
        per_mb, once = (2, 1) if c.recipe.reduce_bytes else (3, 0)
        out = [Term("dp_comm", lambda lay, _: per_mb * ring(lay) * fx(lay), pv=x.stage, db=x.inv_b)]
        if once:
            out.append(Term("dp_comm", lambda lay, _: ring(lay) * fx(lay), pv=x.stage, db=x.inv_bm))
        return out

    def coll(lay: Layout) -> float:
        if z == 0:
            n = lay.dp * lay.cp
            return 0.0 if n == 1 else R.allreduce_latency(n, lay.tp * lay.cp * lay.dp)
        return 2 * ring(lay)

    layer = lambda lay, _: buckets(dp_params(c, lay)[0], lay) * coll(lay) * fx(lay)  # noqa: E731
    rest = lambda lay, _: (buckets(dp_params(c, lay)[2], lay) + 1) * coll(lay) * fx(lay)  # noqa: E731
    db = x.inv_b if z == 2 else x.inv_bm  # ZeRO-2 reduce-scatters every micro-batch
    return [Term("dp_comm", layer, pv=x.stage, db=db), Term("dp_comm", rest, db=db)]


def dp_terms(c: Ctx, R: Rates, z: int) -> tuple[list[Term], list[Term]]:
    """(comm, credit) terms per token for ZeRO stage z: exposed = max(0, comm − credit)."""
    A, K, x = c.A, c.K, _Axes(c)
    inv_group = lambda te: Fraction(1, te[1] * _etp(te))  # noqa: E731
    fx, pt = x.fx, x.pt

    def coef(lay: Layout, nb: float) -> float:
        g = lay.dp * lay.cp
        return 0.0 if g == 1 else nb * (g - 1) / g / R.group_bw(g, lay.tp) * fx(lay)

    # Expert-data-parallel group tp·cp·dp/(ep·etp): a ring moves (1/(ep·etp) − 1/(tp·cp·dp)) of
    # the experts' parameters per GPU (Megatron-Core MoE parallel folding).
    def coef_exp(lay: Layout, nb: float) -> float:
        g = lay.dp * lay.cp
        return 0.0 if g == 1 else nb / R.group_bw(g, lay.tp) * fx(lay)

    once, per_mb = _dp_volume(c, z)
    comm: list[Term] = []
    credit: list[Term] = []
    for nb, dbf in ((once, x.inv_bm), (per_mb, x.inv_b)):
        if nb == 0:
            continue
        comm.append(
            Term(
                "dp_comm",
                lambda lay, _, nb=nb: dp_params(c, lay)[0] * coef(lay, nb),
                pv=x.stage,
                db=dbf,
            )
        )
        comm.append(
            Term("dp_comm", lambda lay, _, nb=nb: dp_params(c, lay)[2] * coef(lay, nb), db=dbf)
        )
        if A.is_moe:
            comm.append(
                Term(
                    "dp_comm",
                    lambda lay, _, nb=nb: dp_params(c, lay)[1] * coef_exp(lay, nb),
                    pv=x.stage,
                    te=inv_group,
                    db=dbf,
                )
            )
            credit.append(
                Term(
                    "dp_comm",
                    lambda lay, _, nb=nb: (
                        dp_params(c, lay)[1] * coef_exp(lay, nb) / (lay.tp * lay.dp * lay.cp)
                    ),
                    pv=x.stage,
                    db=dbf,
                )
            )
    comm += _dp_latency(c, R, z, x)
    if z not in R.ov.dp_stages:
        return comm, credit
    # What hides it (Megatron --overlap-grad-reduce / --overlap-param-gather, FSDP prefetch):
    # the last micro-batch's backward (z0), and the next step's first forward (z1), every
    # backward (z2), every forward and backward (z3), at overlap efficiency omega.
    share = K.omega * {0: 2.0 / 3.0, 1: 1.0, 2: 2.0 / 3.0, 3: 1.0}[z]
    tok_db, fix_db = (x.inv_m, x.inv_bm) if z <= 1 else (None, x.inv_b)
    credit.append(
        Term("dp_credit", lambda lay, _: share * R.layer(lay) * pt(lay), pv=x.stage, db=tok_db)
    )
    credit.append(
        Term("dp_credit", lambda lay, _: share * sum(R.fixed(lay)) * fx(lay), pv=x.stage, db=fix_db)
    )
    return comm, credit
