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


def test_float_matrix_kept_and_exact() -> None:
    """Row 0 ones, then each factor's numerator / denominator as floats; micro-batch factors'
    matrices shared by every cost model, others' by equal domains of one cost model."""
    one, two = Fractions(), Fractions()
    fns = (BatchFactor.of(1, 0), BatchFactor.of(-1, 1), BatchFactor.of(0, -1))
    got = one.float_matrix(fns, list(SHAPES))
    assert got.shape == (4, len(SHAPES)) and (got[0] == 1.0).all()
    for i, f in enumerate(fns):
        assert got[1 + i].tolist() == [f(v).numerator / f(v).denominator for v in SHAPES]
    assert two.float_matrix(fns, list(SHAPES)) is got and not got.flags.writeable
    assert one.float_matrix(fns[:2], list(SHAPES)) is not got
    half = lambda v: Fraction(v[0], 2)  # noqa: E731  a cost model's own factor
    dom = [(1, 2), (3, 1)]
    mine = one.float_matrix((half,), dom)
    assert mine[1].tolist() == [0.5, 1.5] and one.float_matrix((half,), list(dom)) is mine
    assert two.float_matrix((half,), dom) is not mine  # another cost model's


def test_float_matrix_of_other_domains_reads_each_factor_value_once() -> None:
    """A cost model's own factors: each (factor, value) is computed once, whatever domains hold
    it (spaces at other GPU counts), and every entry is numerator / denominator as floats, past
    the table's first size too."""
    fr, calls = Fractions(), []

    def exact(k: int, v: tuple[int, int]) -> Fraction:
        return Fraction(v[0] * (k + 1), v[1] + 2 * k)

    def factor(k: int):  # noqa: ANN202
        def fn(v: tuple[int, int]) -> Fraction:
            calls.append((k, v))
            return exact(k, v)

        return fn

    fns = tuple(factor(k) for k in range(12))  # more factors than the table's first rows
    doms = [[(p, q) for p in range(1, 9) for q in range(1, 1 + w)] for w in (3, 5, 12)]
    for dom in doms:
        got = fr.float_matrix(fns, dom)
        assert (got[0] == 1.0).all() and not got.flags.writeable
        want = [[exact(k, v).numerator / exact(k, v).denominator for v in dom] for k in range(12)]
        assert got[1:].tolist() == want
    assert sorted(calls) == sorted({(k, v) for k in range(12) for d in doms for v in d})
