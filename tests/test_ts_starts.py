"""Every term's start table (over a space's rows, all terms sharing one memo, and the Python-number
form of single layouts) is bit for bit what the cost model computed before its shared per-row
quantities were kept (commit 69885da): a digest of the tables per request, over the framework
profiles' recipes (FP8 weight caches, FSDP2 transients, unsharded accumulation, unfused
attention, MoE with and without the ep overlap). A change that moves the cost model's numbers on
purpose (a fidelity fix) changes these digests: print `_digest(case)` for each case and pin the
new values in the same commit, saying why."""

from __future__ import annotations

import hashlib
import math
from itertools import islice

import numpy as np
import pytest
from test_costmodel_per_rows import KEYS, _space

from meshplan.solver.costmodel.point import Rows
from meshplan.solver.costmodel.terms import Points, int_starts_many
from meshplan.solver.schema import Recompute

MEGATRON, TITAN, KF = "MEGATRON", "TORCHTITAN", "KEMPNERFORGE"
H100, A100 = "h100-sxm-80gb", "a100-sxm-80gb"
# (model, gpu, gpus, training): digest of the start tables (re-pinned with the MoE and scale
# terms: DeepEP's dispatch, fine-grained experts, the router, unforced routing, the dp tail,
# the overlap tax, stragglers; then with the memory recipe's knobs, the loss-or-recompute term,
# FP8 activation storage and the constants refitted on both; then with MLA counted as itself,
# the A100 attention constant, bf16 gradient reduction and the constants refitted on them;
# then with torchao Float8Linear's saved FP8 casts, MLA's gathered K,V widths under cp,
# torchtitan's eager blocks paying their unfused pointwise ops, nanotron's unhidden ZeRO-1
# traffic and the constants refitted on them; then with torchao's Float8 tensor parallelism
# all-gathering in FP8 and the eager blocks' MoE bytes summed as the fused path sums them; then
# with KempnerForge compiled by default, eager blocks timed for it too, and full recomputation
# stopping before the down projection under PyTorch's non-reentrant checkpoint, refitted)
CASES = [
    (("llama3-8b", H100, 16, {"seq_len": 4096}), "086ef1ae5ba3ee45530b7153d854d9aa"),
    (
        ("mixtral-8x7b", H100, 64, {"seq_len": 8192, "framework": MEGATRON, "precision": "FP8"}),
        "8efb1b997ce84a8088211555a82219fe",
    ),
    (
        ("llama3-70b", A100, 32, {"seq_len": 8192, "framework": TITAN}),
        "1d50c3b0f255ca8fc0b9a00ea368df25",
    ),
    (
        ("kempnerforge-7b", H100, 16, {"seq_len": 4096, "framework": KF}),
        "c78cbb38061884b0a88ec55214d9e0a2",
    ),
    (
        (
            "deepseek-v3",
            H100,
            128,
            {"seq_len": 4096, "framework": MEGATRON, "ep_comm_overlap": True},
        ),
        "65dce26104828725e74c9f0dbbf27c8a",
    ),
    (
        (
            "gpt3-175b",
            A100,
            64,
            {
                "seq_len": 2048,
                "framework": "DEEPSPEED",
                "fused_attention": False,
                "grad_reduce_in_bf16": True,
            },
        ),
        "1b6d481db1842d90983195cd3b3d0ff3",
    ),
    (
        (
            "qwen3-235b-a22b",
            H100,
            64,
            {
                "seq_len": 4096,
                "framework": TITAN,
                "cp_comm_overlap": False,
                "tp_comm_overlap": True,
            },
        ),
        "acafb13ba7ace566d7545a6bb417d63d",
    ),
    (
        ("llama2-7b", H100, 8, {"seq_len": 4096, "precision": "FP8", "dp_comm_overlap": False}),
        "11c02acfe84165a86c6d6efd2a2a0479",
    ),
    (
        ("mixtral-8x22b", A100, 64, {"seq_len": 4096, "framework": KF}),
        "23720721432c65743407b33c3c5d60e8",
    ),
    (
        ("llama3-405b", H100, 512, {"seq_len": 8192, "framework": MEGATRON}),
        "71b886be1515fc79e9407a7614b14ca4",
    ),
    (
        ("deepseek-v3", H100, 256, {"seq_len": 4096, "framework": TITAN, "precision": "FP8"}),
        "857c74e28340dc8a65eea8bf894b6567",
    ),
]


def _digest(case: tuple) -> str:
    """The start of every term of every sum at each key value, in the sums' order: over all rows
    (one memo), then of every fifth layout alone."""
    sp = _space(*case)
    lays = sp.layouts
    rows = Rows.of(lays)
    h = hashlib.sha256()
    for comp, _ in sp.cm.sums():
        for g in comp.groups:
            kvs = sorted({g.key(v) for v in KEYS[g.sel]}, key=repr) if g.sel else [None]
            for t in g.terms:
                for kv in kvs:
                    h.update(np.ascontiguousarray(t.starts(rows, kv)).tobytes())
                    for i in range(0, len(lays), 5):
                        h.update(np.float64(t.start(lays[i], kv)).tobytes())
    return h.hexdigest()[:32]


@pytest.mark.parametrize(("case", "want"), CASES, ids=[f"{c[0]}-{c[2]}" for c, _ in CASES])
def test_start_tables_are_those_of_69885da(case: tuple, want: str) -> None:
    assert _digest(case) == want


def test_shared_quantities_are_computed_once() -> None:
    """Terms of both stages' memory and of every ZeRO stage's dp time that compute the same
    thing read one table: at 69885da every (start, key) had a table of its own (86 for this
    space), then 63. The dp tail and overlap-tax terms (one start per ZeRO stage) and the memory
    recipe's extra tenants brought 112 pairs and 90 tables, 11 of them equal in content to
    another (the tax of stages 0 and 3, 1 and 2; the tail of 1 and 2; dense and extra memory):
    no more tables than that, and fewer once those share."""
    sp = _space(*CASES[2][0])
    rows = Rows.of(sp.layouts)
    pairs, arrays = set(), set()
    for comp, _ in sp.cm.sums():
        for g in comp.groups:
            kvs = sorted({g.key(v) for v in KEYS[g.sel]}, key=repr) if g.sel else [None]
            for t in g.terms:
                for kv in kvs:
                    a = t.starts(rows, kv)
                    if a.base is None:  # an array of its own (not a broadcast constant)
                        pairs.add((t.start, kv))
                        arrays.add(id(a))
    assert len(arrays) <= 90 and len(arrays) < 0.81 * len(pairs)


def _reference(comp, p, rows: Rows, i: int) -> int:  # noqa: ANN001
    """A sum's integer value the slow way: each term's start rounded alone, summed by group,
    then the group's factors applied (terms.py's definition, no memo of integers)."""
    total = 0
    for g in comp.groups:
        kv = g.key(p.axis(g.sel)) if g.sel else None
        x = 0
        for t in g.terms:
            v = float(t.starts(rows, kv)[i]) * comp.scale
            x += math.ceil(v) if comp.up else math.floor(v)
        total += comp._chain(x, g.factors, p)
    return total


@pytest.mark.parametrize("k", [1, 4, 6])
def test_values_on_fresh_rows_compute_missing_starts_together(k: int) -> None:
    """Compiled.value and .values on rows whose integer starts are not computed yet (they
    compute a sum's missing ones in one int_starts_many) give the reference integers."""
    sp = _space(*CASES[k][0])
    at = {lay: i for i, lay in enumerate(sp.layouts)}
    pts = list(islice(sp.points(), 0, 40000, 331))
    assert len(pts) > 20
    ref_rows = Rows.of(sp.layouts)
    for comp, _ in sp.cm.sums():
        rows = Rows.of(sp.layouts)  # nothing computed: every value computes its sum's starts
        for p in pts:
            assert comp.value(p, rows, at[p.lay]) == _reference(comp, p, ref_rows, at[p.lay])
        many = Points.of(pts, [at[p.lay] for p in pts])
        got = comp.values(Rows.of(sp.layouts), many)
        assert [int(v) for v in got] == [_reference(comp, p, ref_rows, at[p.lay]) for p in pts]


def test_one_missing_group_is_rounded_as_int_starts_does() -> None:
    sp = _space(*CASES[1][0])
    for comp, _ in sp.cm.sums():
        for g in comp.groups:
            kv = g.key(0) if g.sel == "z" else (g.key(Recompute.FULL) if g.sel else None)
            a = int_starts_many(Rows.of(sp.layouts), [(g, kv, comp.scale, comp.up)])[0]
            b = g.int_starts(Rows.of(sp.layouts), kv, comp.scale, comp.up)
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
