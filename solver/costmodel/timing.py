"""Time per token of a configuration, as terms (seeds 003, 004; Narayanan et al. 2021).

Step time = (M·v + pp − 1)·t_chunk + M·t_head + exposed dp/FSDP + optimizer, the interleaved
1F1B schedule of Narayanan et al. 2021 §2.2 (bubble (pp−1)/(M·v + pp − 1), seed 003 for v = 1).
Every term is divided by the step's tokens dp·b·M·s, so the objective is time per token and the
same terms serve a fixed or a chosen global batch. Collectives follow the ring α-β model.
"""

from __future__ import annotations

from fractions import Fraction

from meshplan.solver.costmodel.context import ACT_BYTES, Ctx, n_chunk, n_stage
from meshplan.solver.costmodel.memory import _extras, _layer_params
from meshplan.solver.costmodel.point import Layout
from meshplan.solver.costmodel.terms import Term, frac
from meshplan.solver.schema import Recompute


class Rates:
    """Per-layout rates and per-token times of one layer (seconds), for one request."""

    def __init__(self, c: Ctx) -> None:
        self.c = c
        A, H, K = c.A, c.H, c.K
        self.F_layer = A.layer_flops_per_token(c.s)
        self.F_head = A.head_flops_per_token
        self.F_core = A.attention_core_fwd_flops_per_token(c.s)
        gain = K.fp8_gain if c.precision.value == "FP8" else 1.0
        self.rate0 = H.peak_bf16 * K.gpu_eta(H.name, H.family) * gain
        self.moe_frac = A.n_moe_layers / A.L

    def bw(self, span: int) -> float:
        return self.c.H.link_bw(span) * self.c.K.link_eff

    def alpha(self, span: int) -> float:
        K = self.c.K
        return K.alpha_intra if span <= self.c.H.gpn else K.alpha_inter

    def rate(self, tp: int) -> float:
        """Achievable FLOP/s of one GPU: GEMM efficiency falls as the width h/tp shrinks."""
        x = self.c.A.h / tp
        return self.rate0 * x / (x + self.c.K.width0)

    # per token of a micro-batch, one layer, one GPU (seconds)
    def comp(self, lay: Layout) -> float:
        return self.F_layer / (lay.tp * self.rate(lay.tp))

    def tp(self, lay: Layout) -> float:
        T = lay.tp
        if T == 1:
            return 0.0
        # 2 all-reduces forward + 2 backward (or RS+AG pairs with sp): Megatron, Shoeybi 2019.
        vol = 4 * 2 * self.c.A.h * ACT_BYTES * (T - 1) / T
        return vol / self.bw(T) * (1.0 if self.c.recipe.tp_exposed else self.c.K.eps_tp)

    def cp(self, lay: Layout) -> float:
        C = lay.cp
        if C == 1:
            return 0.0
        A = self.c.A
        # Ring attention: K,V forward and K,V + dK,dV backward pass C-1 hops (Liu et al. 2023).
        vol = 3 * (C - 1) * 2 * A.kv * A.head_dim * ACT_BYTES / lay.tp
        return vol / self.bw(lay.tp * C) * self.c.K.eps_cp

    def ep_ref(self, lay: Layout) -> float:
        """Expert all-to-all per token at the inter-node rate; the (tp, ep) factor scales it."""
        A = self.c.A
        if not A.is_moe:
            return 0.0
        # dispatch + combine, forward and backward: 4 all-to-alls of top_k·h (Lepikhin 2020).
        vol = 4 * A.top_k * A.h * ACT_BYTES / lay.tp
        return self.moe_frac * vol / (self.c.H.inter_bw * self.c.K.link_eff) * self.c.K.eps_ep

    def ep_factor(self, te: tuple[int, int]) -> Fraction:
        tp, ep = te[0], te[1]  # te is (tp, ep, etp)
        if ep == 1:
            return Fraction(0)
        ratio = self.c.H.inter_bw / self.c.H.link_bw(tp * ep)
        return frac((ep - 1) / ep * ratio)

    def fixed(self, lay: Layout) -> tuple[float, float, float]:
        """Per layer per micro-batch: (launch overhead, tp latency, cp latency) in seconds."""
        tp_a = 4 * self.alpha(lay.tp) if lay.tp > 1 else 0.0
        cp_a = 3 * (lay.cp - 1) * self.alpha(lay.tp * lay.cp)
        return self.c.K.kappa0, tp_a, cp_a

    def recompute(self, lay: Layout, r: Recompute) -> tuple[float, float]:
        """Extra (per-token, per-micro-batch) time of recomputation, per layer."""
        if r is Recompute.SELECTIVE:  # attention core only (Korthikanti §5)
            return self.F_core / (lay.tp * self.rate(lay.tp)), 0.0
        if r is Recompute.FULL:  # the whole forward again, with its collectives
            k0, tpa, cpa = self.fixed(lay)
            per_tok = self.comp(lay) / 3 + self.tp(lay) / 2 + self.cp(lay) / 3
            return per_tok, (k0 + tpa) / 2 + cpa / 3
        return 0.0, 0.0

    def p2p(self, lay: Layout) -> tuple[float, float]:
        """Pipeline send of a chunk's output forward and its gradient back (per token, fixed)."""
        if lay.pp == 1:
            return 0.0, 0.0
        width = self.c.A.h * ACT_BYTES / (lay.tp if lay.sp else 1)
        return 2 * width / self.bw(lay.gpus), 2 * self.alpha(lay.gpus)

    def head(self, lay: Layout) -> float:
        return self.F_head / (lay.tp * self.rate(lay.tp))

    def dp_params(self, lay: Layout) -> tuple[float, float, float]:
        """(per-layer tp-sharded, per-layer expert, extra) parameters on one GPU's stage."""
        dense, expert = _layer_params(self.c, lay)
        extra = max(_extras(self.c, lay, "first"), _extras(self.c, lay, "last"))
        return dense / lay.tp, expert / lay.tp, extra


def _per_token(c: Ctx, lay: Layout) -> float:
    """Seconds per token-in-micro-batch -> seconds per token of the step: s/cp tokens / (dp·s)."""
    return (c.s / lay.cp) / (lay.dp * c.s)


def objective_terms(c: Ctx, R: Rates) -> list[Term]:
    """Time per token (s/token), except the exposed dp/FSDP time (see dp_terms)."""
    A = c.A
    stage = lambda pv: n_stage(A.L, pv[0], pv[1])  # noqa: E731
    bub = lambda pv: Fraction((pv[0] - 1) * n_chunk(A.L, pv[0], pv[1]))  # noqa: E731
    chunks = lambda pv: Fraction(pv[1])  # noqa: E731
    hops = lambda pv: Fraction(pv[0] - 1)  # noqa: E731
    inv_b = lambda db: Fraction(1, db[1])  # noqa: E731
    inv_m = lambda db: Fraction(1, db[2])  # noqa: E731
    inv_bm = lambda db: Fraction(1, db[1] * db[2])  # noqa: E731
    pt = lambda lay: _per_token(c, lay)  # noqa: E731
    fx = lambda lay: 1.0 / (lay.dp * c.s)  # noqa: E731  per micro-batch -> per step token
    ep_f = R.ep_factor
    terms: list[Term] = []
    per_tok = (("compute", R.comp), ("tp_comm", R.tp), ("cp_comm", R.cp))
    for name, fn in per_tok:
        terms.append(Term(name, lambda lay, _, fn=fn: fn(lay) * pt(lay), pv=stage))
        terms.append(Term("bubble", lambda lay, _, fn=fn: fn(lay) * pt(lay), pv=bub, db=inv_m))
    for i, name in enumerate(("compute", "tp_comm", "cp_comm")):
        terms.append(Term(name, lambda lay, _, i=i: R.fixed(lay)[i] * fx(lay), pv=stage, db=inv_b))
        terms.append(
            Term("bubble", lambda lay, _, i=i: R.fixed(lay)[i] * fx(lay), pv=bub, db=inv_bm)
        )
    if A.is_moe:
        terms.append(Term("ep_comm", lambda lay, _: R.ep_ref(lay) * pt(lay), pv=stage, te=ep_f))
        terms.append(
            Term("bubble", lambda lay, _: R.ep_ref(lay) * pt(lay), pv=bub, te=ep_f, db=inv_m)
        )
    rec_tok = lambda lay, r: R.recompute(lay, r)[0] * pt(lay)  # noqa: E731
    rec_fix = lambda lay, r: R.recompute(lay, r)[1] * fx(lay)  # noqa: E731
    terms += [
        Term("recompute", rec_tok, sel="r", pv=stage),
        Term("bubble", rec_tok, sel="r", pv=bub, db=inv_m),
        Term("recompute", rec_fix, sel="r", pv=stage, db=inv_b),
        Term("bubble", rec_fix, sel="r", pv=bub, db=inv_bm),
        Term("pp_comm", lambda lay, _: R.p2p(lay)[0] * pt(lay), pv=chunks),
        Term("pp_comm", lambda lay, _: R.p2p(lay)[1] * fx(lay), pv=chunks, db=inv_b),
        Term("bubble", lambda lay, _: R.p2p(lay)[0] * pt(lay), pv=hops, db=inv_m),
        Term("bubble", lambda lay, _: R.p2p(lay)[1] * fx(lay), pv=hops, db=inv_bm),
        Term("compute", lambda lay, _: R.head(lay) * pt(lay)),
        Term("compute", lambda lay, _: c.K.kappa0 * fx(lay), db=inv_b),
    ]
    terms += optimizer_terms(c, R, fx, stage, inv_bm)
    return terms


def optimizer_terms(c: Ctx, R: Rates, fx, stage, inv_bm) -> list[Term]:  # noqa: ANN001
    """Adam step: read/write master, m, v, read grads, write weights, over the local shard."""
    per_param = (2 * c.ob + c.gb + c.wb) / c.H.hbm_bw
    shard = lambda lay, sh: lay.dp * lay.cp if sh else 1  # noqa: E731
    z1 = lambda z: z >= 1  # noqa: E731
    out = [
        Term(
            "optimizer",
            lambda lay, sh: R.dp_params(lay)[0] / shard(lay, sh) * per_param * fx(lay),
            sel="z",
            key=z1,
            pv=stage,
            db=inv_bm,
        ),
        Term(
            "optimizer",
            lambda lay, sh: R.dp_params(lay)[2] / shard(lay, sh) * per_param * fx(lay),
            sel="z",
            key=z1,
            db=inv_bm,
        ),
    ]
    if c.A.is_moe:
        out += [
            Term(
                "optimizer",
                lambda lay, sh: 0.0 if sh else R.dp_params(lay)[1] * per_param * fx(lay),
                sel="z",
                key=z1,
                pv=stage,
                te=lambda te: Fraction(1, te[1]),
                db=inv_bm,
            ),
            Term(
                "optimizer",
                lambda lay, sh: (
                    R.dp_params(lay)[1] / (lay.dp * lay.cp) * per_param * fx(lay) if sh else 0.0
                ),
                sel="z",
                key=z1,
                pv=stage,
                db=inv_bm,
            ),
        ]
    return out


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


def dp_terms(c: Ctx, R: Rates, z: int) -> tuple[list[Term], list[Term]]:
    """(comm, credit) terms per token for ZeRO stage z: exposed = max(0, comm − credit)."""
    A, K = c.A, c.K
    stage = lambda pv: n_stage(A.L, pv[0], pv[1])  # noqa: E731
    inv_b = lambda db: Fraction(1, db[1])  # noqa: E731
    inv_m = lambda db: Fraction(1, db[2])  # noqa: E731
    inv_bm = lambda db: Fraction(1, db[1] * db[2])  # noqa: E731
    inv_ep = lambda te: Fraction(1, te[1])  # noqa: E731
    fx = lambda lay: 1.0 / (lay.dp * c.s)  # noqa: E731
    pt = lambda lay: _per_token(c, lay)  # noqa: E731

    def coef(lay: Layout, nb: float) -> float:
        g = lay.dp * lay.cp
        return 0.0 if g == 1 else nb * (g - 1) / g / R.bw(lay.tp * lay.cp * lay.dp) * fx(lay)

    def coef_exp(lay: Layout, nb: float) -> float:  # expert group dp·cp/ep: (1/ep − 1/(dp·cp))
        g = lay.dp * lay.cp
        return 0.0 if g == 1 else nb / R.bw(lay.tp * lay.cp * lay.dp) * fx(lay)

    once, per_mb = _dp_volume(c, z)
    comm: list[Term] = []
    credit: list[Term] = []
    for nb, dbf in ((once, inv_bm), (per_mb, inv_b)):
        if nb == 0:
            continue
        comm.append(
            Term(
                "dp_comm",
                lambda lay, _, nb=nb: R.dp_params(lay)[0] * coef(lay, nb),
                pv=stage,
                db=dbf,
            )
        )
        comm.append(
            Term("dp_comm", lambda lay, _, nb=nb: R.dp_params(lay)[2] * coef(lay, nb), db=dbf)
        )
        if A.is_moe:
            comm.append(
                Term(
                    "dp_comm",
                    lambda lay, _, nb=nb: R.dp_params(lay)[1] * coef_exp(lay, nb),
                    pv=stage,
                    te=inv_ep,
                    db=dbf,
                )
            )
            credit.append(
                Term(
                    "dp_comm",
                    lambda lay, _, nb=nb: (
                        R.dp_params(lay)[1] * coef_exp(lay, nb) / (lay.dp * lay.cp)
                    ),
                    pv=stage,
                    db=dbf,
                )
            )
    # What hides it: the last micro-batch's backward (z0, z1), every backward (z2), every
    # forward and backward (z3), at overlap efficiency omega.
    share = K.omega * (1.0 if z == 3 else 2.0 / 3.0)
    tok_db, fix_db = (inv_m, inv_bm) if z <= 1 else (None, inv_b)
    if comm:
        work = lambda lay: R.comp(lay) + R.tp(lay) + R.cp(lay)  # noqa: E731
        credit.append(
            Term("dp_credit", lambda lay, _: share * work(lay) * pt(lay), pv=stage, db=tok_db)
        )
        credit.append(
            Term(
                "dp_credit", lambda lay, _: share * sum(R.fixed(lay)) * fx(lay), pv=stage, db=fix_db
            )
        )
    return comm, credit
