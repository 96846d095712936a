"""The shape and fine bounds of a row do not depend on the rows bounded with it: shape bounds
of many rows (their micro-batch shapes of every db class on one axis, one `_combine`) and fine
bounds of many rows (in padded batches, laid out per batch) equal, bit for bit, those of each
row alone, and the shape bounds equal those computed one db class at a time with the margins
of `_margin`."""

from __future__ import annotations

import numpy as np
import pytest

from meshplan.solver.cpsat import bounds
from meshplan.solver.cpsat.tables import Tables
from meshplan.solver.planner import _resolve
from meshplan.solver.schema import PlanRequest
from meshplan.solver.space import Space

SPECS = {
    "dense": {
        "model": {"preset": "llama3-8b"},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 32},
        "training": {"seq_len": 4096, "global_batch_tokens": 4096 * 128},
    },
    "moe": {
        "model": {"preset": "mixtral-8x7b"},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 64},
        "training": {"seq_len": 4096, "global_batch_tokens": 4096 * 256},
    },
}


def tables_of(spec: dict) -> Tables:
    """The tables of the request `spec` (a PlanRequest as a dict), its space unpruned."""
    req = PlanRequest.model_validate(spec)
    A, H, cm = _resolve(req)
    return Tables(Space.build(A, H, req.training, req.search, cm, prune=False))


def _tables(name: str) -> Tables:
    return tables_of(SPECS[name])


def _shape_by_class(tb: Tables, rows: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Shape bounds one db class at a time (each class's own `_combine`, margins by `_margin`)."""
    out = [(np.zeros(0, np.int64), np.zeros(0))] * len(rows)
    split = bounds._split(tb, rows)
    low, phi, cls = tb.sums().low, tb.factor_matrix("db", "dom"), tb.cls["db"][rows]
    for c in np.unique(cls).tolist():
        ds = tb.members["db"][c]
        if not len(ds):
            continue
        ix = np.flatnonzero(cls == c)
        x = split[:, ix].transpose(0, 1, 3, 4, 2)
        v = (x.reshape(-1, x.shape[-1]) @ phi[:, ds]).reshape(*x.shape[:-1], len(ds))
        z_ok = tb.z_ok[tb.cls["z"][rows[ix]]][:, None, :, None]
        per = bounds._combine(tb, bounds._margin(v, low).__getitem__, z_ok).min(axis=(1, 2))
        for j, i in enumerate(ix.tolist()):
            out[i] = (ds, per[j])
    return out


@pytest.mark.parametrize("name", SPECS)
def test_shape_bounds_of_many_rows_are_those_of_each_row(name: str) -> None:
    tb = _tables(name)
    rows = np.arange(tb.n, dtype=np.int64)[::-1]  # every row, classes interleaved
    assert len(np.unique(tb.cls["db"][rows])) > 2  # several db classes in one call
    got = bounds.shape_bounds(tb, rows)
    ref = _shape_by_class(tb, rows)
    assert any(np.isfinite(b).any() for _, b in got)
    for i, r in enumerate(rows.tolist()):
        ((alone_d, alone_b),) = bounds.shape_bounds(tb, np.array([r]))
        for d, b in (ref[i], (alone_d, alone_b)):
            assert np.array_equal(got[i][0], d) and got[i][1].tobytes() == b.tobytes(), r


@pytest.mark.parametrize("name", SPECS)
def test_fine_bounds_of_many_rows_are_those_of_each_row(name: str) -> None:
    tb = _tables(name)
    rows = np.argsort(tb.coarse(), kind="stable")[:48].tolist()
    tb._shapes(rows)  # the shape bounds the fine bounds read
    finite = [tb.coarse()[r] for r in rows if np.isfinite(tb.coarse()[r])]
    for cap in (np.inf, float(np.median(finite))):  # a cap leaves some rows with no cell
        got = bounds.fine_bounds(tb, rows, cap)
        cells = [len(got[r].db) for r in rows]
        assert max(cells) > 0 and (cap == np.inf or min(cells) == 0)
        for r in rows:
            alone, f = bounds.fine_bounds(tb, [r], cap)[r], got[r]
            for a, b in zip(alone, f, strict=True):
                if isinstance(a, np.ndarray):
                    assert a.dtype == b.dtype and a.shape == b.shape, r
                    assert a.tobytes() == b.tobytes(), r
                else:
                    assert a == b, r


@pytest.mark.parametrize("name", SPECS)
def test_zero_stages_a_row_does_not_run_have_no_fine_bound(name: str) -> None:
    """Rows that run only some ZeRO stages (no pipeline or no data parallelism), batched with
    rows that run them all: inf at the others, at the row's first pipeline; finite somewhere."""
    tb = _tables(name)
    nz = len(tb.sp.zs)
    rows = np.argsort(tb.coarse(), kind="stable")[:48].tolist()
    tb._shapes(rows)
    got = bounds.fine_bounds(tb, rows)
    some = [r for r in rows if len(tb.members["z"][tb.cls["z"][r]]) < nz]
    assert some and len(some) < len(rows)
    for r in some:
        f = got[r]
        off = np.setdiff1d(np.arange(nz), tb.members["z"][tb.cls["z"][r]])
        assert np.isinf(f.by_rz[:, :, off]).all()
        assert (f.pv[:, :, off] == tb.agree("pv", r)[0]).all()
    assert any(np.isfinite(got[r].by_rz).any() for r in some)


def test_margin_of_all_sums_at_once_is_the_margin_of_each() -> None:
    rng = np.random.default_rng(1)
    v = rng.standard_normal((5, 1, 3, 4, 50)) * 10.0 ** rng.integers(-3, 12, (5, 1, 3, 4, 50))
    low = np.array([True, False, True, True, False])
    each = v.copy()
    for k, lk in enumerate(low.tolist()):
        bounds._margin_own(each[k], lk)
    v = bounds._margin(v, low)
    assert np.array_equal(v, each) and (np.signbit(v) == np.signbit(each)).all()


def test_one_group_outer_product_is_the_matrix_product() -> None:
    """bounds._Batch.value multiplies one-group operands elementwise instead of by np.matmul:
    the same numbers, entry by entry (one product each, no sum)."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(5, 12, 1)) * rng.integers(0, 2, size=(5, 12, 1))  # zeros, both signs
    y = rng.normal(size=(5, 1, 9)) * 1e12
    assert np.array_equal(x * y, np.matmul(x, y))


def test_a_sum_with_no_groups_is_zero_moved_by_its_margin() -> None:
    """A tiny model on one GPU has memory sums with no group of terms at all: their fine bound
    is 0 moved by its margin at every entry (an unfilled array before)."""
    tb = tables_of(
        {
            "model": {
                "num_layers": 2,
                "hidden_size": 128,
                "num_attention_heads": 4,
                "num_kv_heads": 1,
                "ffn_hidden_size": 256,
                "vocab_size": 1024,
                "gated_mlp": False,
            },
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 1, "gpus_per_node": 2, "hbm_gib": 0.25},
            "training": {"seq_len": 256, "global_batch_tokens": 256, "framework": "DEEPSPEED"},
            "search": {"max_micro_batch_size": 1, "max_virtual_stages": 1},
        }
    )
    sums = tb.sums()
    held = {int(c) for _, _, owner in sums.groups.values() for c in owner.tolist()}
    empty = [c for c in range(len(sums.low)) if c not in held]
    assert empty  # the case this test is about
    row = 0
    lists = {"pv": [tb.agree("pv", row)], "te": [tb.agree("te", row)], "db": [tb.agree("db", row)]}
    zpos = tb.members["z"][tb.cls["z"][row]].tolist()
    batch = bounds._Batch(tb, [row], lists, zpos)
    for c in empty:
        got = batch.value(c)
        zero = bounds._margin_own(np.zeros_like(got), bool(sums.low[c]))
        assert got.shape[:3] == (1, 1, 1) and np.array_equal(got, zero), c
