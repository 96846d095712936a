"""What the time terms share: the per-token normalisation and the factors over the composite
axes (one function object each, so that terms with equal factors share one start table)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from meshplan.solver.costmodel.context import Ctx, n_chunk, n_stage
from meshplan.solver.costmodel.factors import BatchFactor
from meshplan.solver.costmodel.point import Layout, LayoutOrRows, per_rows
from meshplan.solver.costmodel.terms import Term


def _per_token(c: Ctx, lay: LayoutOrRows) -> np.ndarray:
    """Seconds per token-in-micro-batch -> seconds per token of the step: s/cp tokens / (dp·s)."""
    return (c.s / lay.cp) / (lay.dp * c.s)


def _per_mb(c: Ctx, lay: LayoutOrRows) -> np.ndarray:
    """Seconds per micro-batch -> seconds per token of the step: 1/(dp·s)."""
    return 1.0 / (lay.dp * c.s)


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
        if c.overlaps is not None and c.overlaps.dualpipe:
            # DualPipeV: (pp − 1)(F&B + B − 3W) over a rank's two stages, F&B ≈ F + B and
            # W ≈ F (F:B = 1:2), so 2F of a stage, 2/3 of the interleaved 1F1B's (pp − 1)(F + B)
            # (deepseek-ai/DualPipe @ 3da1bbe README.md, "Pipeline Bubbles" table)
            self.bub = lambda pv: Fraction(2 * (pv[0] - 1) * n_chunk(L, pv[0], pv[1]), 3)
        # ZeRO 0/1 traffic of a stage whose v chunks reduce (and gather) one by one: the last
        # chunk's share waits for the step's end, the other v − 1 hide behind the remaining
        # chunks' compute at overlap efficiency omega (FrameworkTiming.dp_per_chunk)
        omega = c.K.omega
        self.stage_dp = lambda pv: self.stage(pv) * _ratio((1 + (pv[1] - 1) * (1 - omega)) / pv[1])
        self.chunks = lambda pv: Fraction(pv[1])
        self.hops = lambda pv: Fraction(pv[0] - 1)
        self.inv_b = BatchFactor.of(-1, 0)
        self.inv_m = BatchFactor.of(0, -1)
        self.inv_bm = BatchFactor.of(-1, -1)
        self.pt = lambda lay: per_rows(_per_token, c, lay)
        self.fx = lambda lay: per_rows(_per_mb, c, lay)


def _tp_only(lay_tp: int) -> Layout:
    return Layout(lay_tp, 1, 1, 1, lay_tp, lay_tp > 1)


def _pair(terms: list[Term], name: str, start, x: _Axes, per_token: bool, **kw) -> None:  # noqa: ANN001
    """A per-layer item on the stage's layers, and its share of the pipeline bubble."""
    db, bub_db = (None, x.inv_m) if per_token else (x.inv_b, x.inv_bm)
    terms.append(Term(name, start, pv=x.stage, db=db, **kw))
    terms.append(Term("bubble", start, pv=x.bub, db=bub_db, **kw))
