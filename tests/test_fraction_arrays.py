"""`Fractions.arrays`: a factor's (numerators, denominators) over a domain, kept by the domain's
values (another list with the same values reads them back) and exact for each value."""

from __future__ import annotations

from fractions import Fraction

from meshplan.solver.costmodel.factors import BatchFactor, Fractions


def _fn(v: tuple[int, int]) -> Fraction:
    return Fraction(v[0], 2 * v[1])


def test_kept_by_values_and_exact() -> None:
    fr = Fractions()
    a, b, c = [(1, 1), (2, 3), (4, 2)], [(1, 1), (2, 3), (4, 2)], [(1, 1), (2, 5)]
    num, den = fr.arrays(_fn, a)
    assert [Fraction(n, d) for n, d in zip(num.tolist(), den.tolist(), strict=True)] == [
        _fn(v) for v in a
    ]
    again = fr.arrays(_fn, b)  # equal values, another list: the same arrays
    assert again[0] is num and again[1] is den
    other = fr.arrays(_fn, c)
    assert other[0].tolist() == [1, 1] and other[1].tolist() == [2, 5]  # 2/10 = 1/5


def test_batch_factor_by_domain() -> None:
    fr, f = Fractions(), BatchFactor.of(1, -1)  # b / M
    dom = [(2, 4, 8), (2, 3, 9)]
    num, den = fr.arrays(f, dom)
    assert num.tolist() == [1, 1] and den.tolist() == [2, 3]
    assert fr.arrays(f, list(dom))[1].tolist() == [2, 3]
