"""A cost model's float factor table (solver/costmodel/factors.py `_FloatTable`) is shared by
the threads that solve with that cost model (a scheduler query's cells on the server's solver
threads): growing it from two threads at once raised "could not broadcast input array from
shape (16,128) into shape (8,64)", and two new factors could take one row."""

from __future__ import annotations

import sys
import threading
from fractions import Fraction

from meshplan.solver.costmodel.factors import _FloatTable


class Scale:
    """A factor: v * k (hashable, one object per k)."""

    def __init__(self, k: int) -> None:
        self.k = k

    def __call__(self, v: object) -> Fraction:
        return Fraction(int(v) * self.k)  # type: ignore[call-overload]


def pairs(keys: list[tuple[Scale, object]]) -> list[tuple[int, int]]:
    out = []
    for fn, v in keys:
        f = fn(v)
        out.append((f.numerator, f.denominator))
    return out


def test_one_table_filled_and_grown_from_many_threads_gives_every_value() -> None:
    errors: list[BaseException] = []
    wrong: list[tuple[int, int, float]] = []
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads interleave between almost every bytecode
    try:
        for _ in range(20):
            table = _FloatTable()
            start = threading.Barrier(8)

            def fill(t: int, table: _FloatTable = table, start: threading.Barrier = start) -> None:
                try:
                    start.wait()
                    for step in range(12):
                        fns = [Scale(100 * t + step + i) for i in range(3)]
                        domain = list(range(t * 1000 + step * 40, t * 1000 + step * 40 + 40))
                        got = table.matrix(fns, domain, pairs)
                        for i, fn in enumerate(fns):
                            for j, v in enumerate(domain):
                                if got[i, j] != v * fn.k:
                                    wrong.append((fn.k, v, float(got[i, j])))
                except BaseException as err:  # noqa: BLE001  reported below
                    errors.append(err)

            threads = [threading.Thread(target=fill, args=(t,)) for t in range(8)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            if errors or wrong:
                break
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[:3]
    assert not wrong, wrong[:5]
