"""Terms: how the cost model is written so that one definition serves three consumers.

A term is `start(lay, key) × f_pv × f_te × f_db`: a float table over the layout rows (optionally
selected by a key of the recomputation or ZeRO axis) times exact rational factors over the small
composite axes. The float evaluator multiplies floats; the integer form (what CP-SAT optimises
and the oracle enumerates) rounds the start once, sums the starts of terms that share their
factors, and rounds after each factor: up for costs, down for credits. `Compiled` fixes that
grouping so the CP-SAT builder and `Compiled.value` cannot disagree.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

from meshplan.solver.costmodel.point import Layout, Point

FACTOR_AXES = ("pv", "te", "db")  # order in which factors are applied
Factor = Callable[[object], Fraction]


@dataclass(frozen=True)
class Term:
    name: str  # breakdown component or memory tenant
    start: Callable[[Layout, object], float]
    sel: str | None = None  # "r" or "z": the start depends on a key of that axis
    key: Callable[[object], object] = lambda x: x  # axis value -> key passed to start
    pv: Factor | None = None
    te: Factor | None = None
    db: Factor | None = None

    def factors(self) -> tuple[Factor | None, ...]:
        return (self.pv, self.te, self.db)

    def float_value(self, p: Point) -> float:
        x = self.start(p.lay, self.key(p.axis(self.sel)) if self.sel else None)
        for ax, fn in zip(FACTOR_AXES, self.factors(), strict=True):
            if fn is not None:
                x *= float(fn(p.axis(ax)))
        return x


def ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def round_int(x: float, up: bool) -> int:
    return math.ceil(x) if up else math.floor(x)


def apply(x: int, f: Fraction, up: bool) -> int:
    return ceil_div(x * f.numerator, f.denominator) if up else (x * f.numerator) // f.denominator


@dataclass
class Group:
    """Terms sharing (sel, key, factors): their integer starts are summed, then multiplied."""

    sel: str | None
    key: Callable[[object], object]
    factors: tuple[Factor | None, ...]
    terms: list[Term] = field(default_factory=list)

    def start_int(self, lay: Layout, keyval: object, scale: float, up: bool) -> int:
        return sum(round_int(t.start(lay, keyval) * scale, up) for t in self.terms)


@dataclass
class Compiled:
    """A sum of terms in integer units (`scale` per base unit), rounded `up` or down."""

    scale: float
    up: bool
    groups: list[Group]

    @staticmethod
    def of(terms: list[Term], scale: float, up: bool, merge: bool = True) -> Compiled:
        """Group terms; `merge=False` keeps one group per term (exact per-term sums)."""
        groups: list[Group] = []
        for t in terms:
            for g in groups if merge else ():
                if g.sel == t.sel and g.key is t.key and g.factors == t.factors():
                    g.terms.append(t)
                    break
            else:
                groups.append(Group(t.sel, t.key, t.factors(), [t]))
        return Compiled(scale, up, groups)

    def group_value(self, g: Group, p: Point) -> int:
        keyval = g.key(p.axis(g.sel)) if g.sel else None
        x = g.start_int(p.lay, keyval, self.scale, self.up)
        for ax, fn in zip(FACTOR_AXES, g.factors, strict=True):
            if fn is not None:
                x = apply(x, fn(p.axis(ax)), self.up)
        return x

    def value(self, p: Point) -> int:
        return sum(self.group_value(g, p) for g in self.groups)

    def by_name(self, p: Point) -> dict[str, int]:
        """Integer value per term name (groups split back by term; used for memory tenants)."""
        out: dict[str, int] = {}
        for g in self.groups:
            keyval = g.key(p.axis(g.sel)) if g.sel else None
            for t in g.terms:
                x = round_int(t.start(p.lay, keyval) * self.scale, self.up)
                for ax, fn in zip(FACTOR_AXES, g.factors, strict=True):
                    if fn is not None:
                        x = apply(x, fn(p.axis(ax)), self.up)
                out[t.name] = out.get(t.name, 0) + x
        return out

    def float_value(self, p: Point) -> float:
        return sum(t.float_value(p) for g in self.groups for t in g.terms)


def frac(x: float, max_den: int = 1 << 20) -> Fraction:
    """A float factor as a rational (bandwidth ratios and the like)."""
    return Fraction(x).limit_denominator(max_den)
