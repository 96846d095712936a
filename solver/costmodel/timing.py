"""Time per token of a configuration, as terms ("Designing a pretraining system", "The scaling
ceiling"; Narayanan et al. 2021).

Step time = (M·v + pp − 1)·t_chunk + M·t_head + exposed dp/FSDP + optimizer, the interleaved 1F1B
schedule of Narayanan et al. 2021 §2.2 (bubble (pp−1)/(M·v + pp − 1); "Designing a pretraining
system" for v = 1). Every term is divided by the step's tokens dp·b·M·s, so the objective is time
per token and the same terms serve a fixed or a chosen global batch. The physics of a layer is in
rates.py; the overlaps a framework runs are its profile's `timing` (solver/profiles/).
"""

from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np

from meshplan.solver.costmodel.context import Ctx
from meshplan.solver.costmodel.dp_timing import dp_terms, optimizer_terms, tail_terms, tax_terms
from meshplan.solver.costmodel.point import LayoutOrRows
from meshplan.solver.costmodel.rates import Rates, _etp
from meshplan.solver.costmodel.terms import Term
from meshplan.solver.costmodel.timing_axes import _Axes, _pair, _ratio, _tp_only
from meshplan.solver.schema import Recompute

__all__ = ["Rates", "dp_terms", "objective_terms"]


def objective_terms(c: Ctx, R: Rates) -> list[Term]:
    """Time per token (s/token), except the exposed dp/FSDP time (see dp_terms)."""
    A, x = c.A, _Axes(c)
    pt, fx = x.pt, x.fx
    terms: list[Term] = []
    per_tok = (
        ("compute", R.compute_traffic),
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
    p2p_tok = lambda lay, _: R.p2p(lay)[0] * pt(lay)  # noqa: E731  (one start: two terms)
    p2p_mb = lambda lay, _: R.p2p(lay)[1] * fx(lay)  # noqa: E731
    terms += [
        Term("pp_comm", p2p_tok, pv=x.chunks),
        Term("pp_comm", p2p_mb, pv=x.chunks, db=x.inv_b),
        Term("bubble", p2p_tok, pv=x.hops, db=x.inv_m),
        Term("bubble", p2p_mb, pv=x.hops, db=x.inv_bm),
        Term("compute", lambda lay, _: R.head(lay) * pt(lay)),
        Term("compute", lambda lay, _: c.K.kappa0 * fx(lay), db=x.inv_b),
    ]
    terms += optimizer_terms(c, R, fx, x.stage, x.inv_bm)
    terms += tail_terms(c, R, x)
    terms += tax_terms(c, R, x)
    # Stragglers: every step ends in a collective that waits for the slowest GPU; with per-GPU
    # step times spread by jitter (a coefficient of variation), the slowest of n sits ~sqrt(2 ln
    # n) deviations above the mean (the expected maximum of n normal draws).
    terms.append(
        Term(
            "dp_comm",
            lambda lay, _: R.straggle(lay) * R.compute_traffic(lay) * pt(lay),
            pv=x.stage,
        )
    )
    return terms


def _moe_terms(c: Ctx, R: Rates, x: _Axes) -> list[Term]:
    """Expert traffic, all-to-all, permutation and their latencies: functions of (tp, ep, etp)
    carried by te factors over a start of one reference layer time per token."""
    pt, fx = x.pt, x.fx
    unit = R.F_layer / R.rate_gemm  # s per token of one layer at tp 1: factors stay O(1)
    unit_mb = unit * c.s

    # the overlap holds on some layouts only (Megatron's rules, or DualPipeV's pp > 1)
    restricted = (R.ov.ep and R.ov.ep_needs_chunks) or R.ov.dualpipe

    @functools.cache  # a function of tp alone: once per tp, not per expert group
    def layer(tp: int) -> tuple[float, float]:
        lay = _tp_only(tp)  # one row: Python floats; the other micro-batch's layer hides
        experts = R.expert_gemm(lay)
        return R.compute(lay) + R.traffic(lay) - experts, experts  # the rest, the experts

    @functools.cache  # read again by `half` below: computed once per te
    def exposed(te: tuple[int, ...]) -> Fraction:
        attn, experts = layer(te[0])
        return _ratio(R.ep_exposed(te, attn, experts, True if restricted else None) / unit)

    permute = functools.cache(lambda te: _ratio(R.permute(te) / unit))  # as `exposed`
    etp = lambda te: Fraction(_etp(te))  # noqa: E731
    inv_ep = lambda te: Fraction(1, te[1] * _etp(te))  # noqa: E731
    latency = lambda te: _ratio(R.ep_latency(te) / unit_mb)  # noqa: E731
    terms: list[Term] = []
    if restricted:
        _ep_where_legal(terms, c, R, x, exposed)
    else:
        _pair(terms, "ep_comm", lambda lay, _: unit * pt(lay), x, True, te=exposed)
    _pair(terms, "compute", lambda lay, _: unit * pt(lay), x, True, te=permute)
    # the busiest ep rank's extra routed tokens through the experts' GEMMs (unforced routing)
    excess = lambda te: _ratio(R.imbalance(te))  # noqa: E731
    _pair(terms, "compute", lambda lay, _: R.expert_gemm(lay) * pt(lay), x, True, te=excess)
    _pair(terms, "compute", lambda lay, _: R.expert_traffic_ref(lay) * pt(lay), x, True, te=etp)
    _pair(
        terms,
        "compute",
        lambda lay, _: (R.expert_weight_traffic_ref() + R.expert_tail_ref()) * fx(lay),
        x,
        False,
        te=inv_ep,
    )
    if not restricted:
        _pair(terms, "ep_comm", lambda lay, _: unit_mb * fx(lay), x, False, te=latency)
    # Full recomputation replays the forward: a third of the experts' per-GEMM tail, half the
    # all-to-alls and permutations (never overlapped where the overlap refuses full recompute).
    _pair(
        terms,
        "recompute",
        lambda lay, on: R.expert_tail_ref() / 3 * fx(lay) if on else 0.0,
        x,
        False,
        te=inv_ep,
        sel="r",
        key=lambda r: r is Recompute.FULL,
    )
    replayed = _raw_a2a(R, unit) if restricted else exposed
    half = lambda te: _ratio(float(replayed(te) + permute(te)) / 2)  # noqa: E731
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


def _raw_a2a(R: Rates, unit: float):  # noqa: ANN202
    return lambda te: _ratio(R.ep_exposed(te, 0.0, 0.0, overlap=False) / unit)


def _ep_where_legal(terms: list[Term], c: Ctx, R: Rates, x: _Axes, exposed) -> None:  # noqa: ANN001
    """The all-to-all and its latencies under an ep overlap the framework runs only with
    virtual stages when pp > 1 and without full recomputation (Megatron-Core's
    overlap_moe_expert_parallel_comm), or DualPipeV's with pp > 1 (Overlaps.ep_runs):
    overlapped there, exposed elsewhere."""
    pt, fx = x.pt, x.fx
    unit = R.F_layer / R.rate_gemm
    unit_mb = unit * c.s
    raw = _raw_a2a(R, unit)
    lat = lambda te: _ratio(R.ep_latency(te, overlap=True) / unit_mb)  # noqa: E731
    lat_raw = lambda te: _ratio(R.ep_latency(te, overlap=False) / unit_mb)  # noqa: E731
    legal = lambda pv: R.ov.ep_runs(pv[0], pv[1], False)  # noqa: E731

    def gate(f, want: bool):  # noqa: ANN001, ANN202
        return lambda pv: f(pv) if legal(pv) == want else Fraction(0)

    full = lambda r: r is Recompute.FULL  # noqa: E731
    not_full = lambda r: r is not Recompute.FULL  # noqa: E731
    for base, db, bub_db, ov, ex in (
        (lambda lay: unit * pt(lay), None, x.inv_m, exposed, raw),
        (lambda lay: unit_mb * fx(lay), x.inv_b, x.inv_bm, lat, lat_raw),
    ):

        def on(lay, flag: bool, base=base):  # noqa: ANN001, ANN202
            return base(lay) if flag else 0.0

        for pv_fn, name, d in ((x.stage, "ep_comm", db), (x.bub, "bubble", bub_db)):
            terms.append(Term(name, on, sel="r", key=not_full, pv=gate(pv_fn, True), db=d, te=ov))
            terms.append(Term(name, on, sel="r", key=full, pv=gate(pv_fn, True), db=d, te=ex))
            terms.append(
                Term(name, lambda lay, _, base=base: base(lay), pv=gate(pv_fn, False), db=d, te=ex)
            )


def _recompute_terms(terms: list[Term], c: Ctx, R: Rates, x: _Axes) -> None:
    """Extra time of recomputation: the attention core again (selective, Korthikanti §5), or
    the whole forward with its collectives (full), less what a checkpoint that stops early
    does not replay (Rates.early_stop_saving)."""
    pt, fx = x.pt, x.fx

    def per_token(lay: LayoutOrRows, r: Recompute) -> np.ndarray | float:
        if r is Recompute.SELECTIVE:
            return R.attention(lay) / 3 * pt(lay)
        if r is Recompute.FULL:
            fwd = R.compute_traffic(lay) / 3 + R.tp(lay) / 2 + R.cp(lay) / 3
            if c.recipe.recompute_stops_early:
                fwd = fwd - R.early_stop_saving(lay)
            return fwd * pt(lay)
        return 0.0

    def per_mb(lay: LayoutOrRows, r: Recompute) -> np.ndarray | float:
        if r is not Recompute.FULL:
            return 0.0
        k0, tpa, cpa = R.fixed(lay)
        return ((k0 + tpa) / 2 + cpa / 3) * fx(lay)

    _pair(terms, "recompute", per_token, x, True, sel="r")
    _pair(terms, "recompute", per_mb, x, False, sel="r")
