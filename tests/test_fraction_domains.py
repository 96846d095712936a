"""Factor arrays kept by a domain's values: equal domains (other lists) share one number and one
pair of arrays, micro-batch factors across cost models too; every entry is the exact factor."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from meshplan.solver.costmodel.factors import BatchFactor, Fractions

SHAPES = [(2, 4, 8), (2, 3, 9), (4, 6, 4), (1, 1, 1), (8, 12, 10)]


def test_domain_numbers_follow_values() -> None:
    fr = Fractions()
    a, b, c = [(1, 2), (2, 2)], [(1, 2), (2, 2)], [(1, 2), (2, 3)]
    assert fr.domain_number(a) == fr.domain_number(b) == fr.domain_number(a)
    assert fr.domain_number(c) != fr.domain_number(a)
    assert fr.domain_number(a[:1]) != fr.domain_number(a)


@pytest.mark.parametrize("b,m", [(i, j) for i in (-1, 0, 1) for j in (-1, 0, 1)])
def test_batch_arrays_exact_and_shared(b: int, m: int) -> None:
    f = BatchFactor.of(b, m)
    one, two = Fractions(), Fractions()  # two cost models
    num, den = one.arrays(f, list(SHAPES))
    got = [Fraction(n, d) for n, d in zip(num.tolist(), den.tolist(), strict=True)]
    assert got == [f(v) for v in SHAPES]
    assert all(np.gcd(n, d) == 1 for n, d in zip(num.tolist(), den.tolist(), strict=True))
    again = two.arrays(f, list(SHAPES))  # another cost model, another list of the same values
    assert again[0] is num and again[1] is den
    assert not num.flags.writeable and not den.flags.writeable
    other = two.arrays(f, SHAPES[::-1])
    assert [Fraction(n, d) for n, d in zip(*map(np.ndarray.tolist, other), strict=True)] == [
        f(v) for v in SHAPES[::-1]
    ]


def test_other_factor_not_mixed_up_after_clears() -> None:
    fr = Fractions()

    def half(v: int) -> Fraction:
        return Fraction(v, 2)

    doms = [list(range(1, k + 2)) for k in range(fr.ARRAYS * 5)]  # past every memo's size
    for d in doms:
        num, den = fr.arrays(half, d)
        assert [Fraction(n, q) for n, q in zip(num.tolist(), den.tolist(), strict=True)] == [
            half(v) for v in d
        ]
