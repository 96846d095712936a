"""Per-GPU memory on the first and last pipeline stage, by tenant (bytes).

Static state per parameter: the recipe of the request's framework profile (solver/profiles/: 16 B
BF16 and 9 B FP8 for the textbook, from "Why one GPU is not enough" (DeepSeek-V3 book, ch. 11),
Megatron's 2 + 4 + 12, ...); ZeRO-1/2/3 shard optimizer / +grads / +weights over the data-parallel
group (Rajbhandari et al. 2020). Dense and attention weights are split over tp; expert weights over
the expert group ep·etp, and sharded over the expert-data-parallel group tp·cp·dp/(ep·etp)
(Megatron-Core's MoE parallel folding), so a sharded expert shard is el/(tp·cp·dp) whatever ep and
etp are. In flight on the first stage: min(pp, M) micro-batches under 1F1B, L·(1 + (pp-1)/(pp·v))
layers when interleaved (Korthikanti et al. 2022 §4.2.3). Activations per token per layer:
costmodel/activations.py.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np

from meshplan.solver.costmodel import activations
from meshplan.solver.costmodel.context import Ctx, n_chunk
from meshplan.solver.costmodel.factors import BatchFactor
from meshplan.solver.costmodel.memory_parts import (
    gather_buffers,
    kv_gathered,
    logits_held,
    rows_layers,
    seq_shard,
    stage_boundary,
    stage_layers,
)
from meshplan.solver.costmodel.memory_state import (
    _bytes,
    _dualpipe,
    _exp_sharded,
    _held_if,
    _state,
)
from meshplan.solver.costmodel.point import (
    LayoutOrRows,
    dp_cp,
    maximum,
    per_rows,
    pick,
)
from meshplan.solver.costmodel.terms import Term
from meshplan.solver.profiles import profile_of
from meshplan.solver.schema import Recompute

TENANTS = ("weights", "gradients", "optimizer", "activations")


def _act(c: Ctx, lay: LayoutOrRows, r: Recompute) -> np.ndarray:
    return seq_shard(c, lay) * activations.per_token(c, lay, r)


def _full_transient(c: Ctx, lay: LayoutOrRows) -> np.ndarray:
    # Full recomputation: the block being back-propagated holds its recomputed activations
    # and their gradients, about as large (Korthikanti §5 keeps one block's worth).
    return 2 * c.s / lay.cp * activations.block(c, lay)


def _is_full(r: Recompute) -> bool:
    return r is Recompute.FULL


def _loss_or_recompute(c: Ctx, lay: LayoutOrRows, stage: str, full: bool) -> np.ndarray:
    """The loss's logits (on the last stage) and, under full recomputation, the block being
    recomputed: the larger of the two, as autograd frees the loss's saved tensors once their
    node has run, before the backward reaches the first block to recompute. Under DTensor's
    loss_parallel (`Recipe.loss_parallel_held`, tp > 1) both are counted: its decomposed
    log-softmax and fused nll/log-softmax backward run through DTensor's dispatch (pytorch
    torch/distributed/tensor/parallel/loss.py), and torchtitan's 70B 2-D runs print a peak 14 GiB
    above the larger of the two."""
    held = per_rows(logits_held, c, lay)
    if stage == "first" and not _dualpipe(c):  # DualPipeV: the loss is on rank 0 too
        held = pick(lay.pp > 1, 0.0, held)
    if not full:
        return held
    block = per_rows(_full_transient, c, lay)
    both = held + block
    if not c.recipe.loss_parallel_held:
        return maximum(held, block)
    return pick(lay.tp > 1, both, maximum(held, block))


def _backward_excess(c: Ctx, lay: LayoutOrRows, stage: str, r: Recompute) -> np.ndarray:
    """What the end of a micro-batch's backward holds beyond the forward side's peak (never
    below 0): the stage's dense and extra parameters' bf16 .grad (`Recipe.backward_grads`) and,
    under full recomputation, the first block's recomputed transient, in place of the micro-batch's
    activations (freed as its backward ran) and of the loss's logits or the transient billed at
    the loss. The micro-batch's terms are taken at b = 1, their least: never under the peak of
    max(forward side, backward end), equal to it at b = 1 (over by at most (b - 1) micro-batches
    otherwise). No interleaving: a profile with `backward_grads` has v = 1."""
    layers = per_rows(rows_layers, c, lay, stage)
    bg = c.recipe.backward_grads
    grads = _bytes(c, lay, "dense", bg) * layers + _bytes(c, lay, stage, bg)
    full = r is Recompute.FULL
    freed = per_rows(_act, c, lay, r) * layers + per_rows(_loss_or_recompute, c, lay, stage, full)
    held = grads + per_rows(_full_transient, c, lay) if full else grads
    return maximum(0.0, held - freed)


def _fsdp_transients(c: Ctx, terms: list[Term], inv_group) -> None:  # noqa: ANN001
    """A recipe's transients of one unit: beyond the gathered copies at ZeRO-3
    (`gather_transient`), and at the one reduction of a pipelined step (`pipelined_reduce`)."""
    rc, A = c.recipe, c.A
    for nbytes, on in ((rc.gather_transient, lambda z: z >= 3), (rc.pipelined_reduce, None)):
        if not nbytes:
            continue

        def start(lay: LayoutOrRows, z_on: bool, nb=nbytes, pp_only=on is None) -> np.ndarray:
            return per_rows(_held_if, c, lay, "dense", nb, pp_only) if z_on else 0.0

        key = on or (lambda z: z < 3)
        terms.append(Term("gradients", start, sel="z", key=key))
        if A.is_moe:

            def exp(lay: LayoutOrRows, z_on: bool, nb=nbytes, pp_only=on is None) -> np.ndarray:
                return per_rows(_held_if, c, lay, "expert", nb, pp_only) if z_on else 0.0

            terms.append(Term("gradients", exp, sel="z", key=key, te=inv_group))


def memory_terms(c: Ctx, stage: str) -> tuple[list[Term], list[tuple[Term, Term]]]:
    """Terms summing to the stage's bytes, and pairs of which only the smaller counts."""
    terms: list[Term] = []
    A, rc = c.A, c.recipe
    pv_stage = stage_layers(c, stage)
    inv_group = lambda te: Fraction(1, te[1] * te[2])  # noqa: E731  experts over ep·etp

    def experts_at(nb: float) -> Term:
        """Gradients of every local expert parameter of the stage at `nb` bytes each."""
        return Term(
            "gradients", lambda lay, _: _bytes(c, lay, "expert", nb), pv=pv_stage, te=inv_group
        )

    for tenant, nbytes, k in (("weights", c.wb, 3), ("gradients", c.gb, 2), ("optimizer", c.ob, 1)):
        if nbytes == 0:
            continue
        key = lambda z, k=k: z >= k  # noqa: E731
        # FSDP2 keeps the fp32 master as the sharded parameter: no sharded compute copy.
        keep = 0.0 if (tenant == "weights" and rc.sharded_master_only) else 1.0

        def dense(lay: LayoutOrRows, sh: bool, nb=nbytes, keep=keep) -> np.ndarray:
            return _state(c, lay, "dense", nb, keep, sh)

        enb = rc.extra_weights if (tenant == "weights" and rc.extra_weights) else nbytes

        def extra(lay: LayoutOrRows, sh: bool, nb=enb, keep=keep) -> np.ndarray:
            return _state(c, lay, stage, nb, keep, sh)

        terms.append(Term(tenant, dense, sel="z", key=key, pv=pv_stage))
        terms.append(Term(tenant, extra, sel="z", key=key))
        if A.is_moe:
            # Expert state: el/(ep·etp) per GPU; sharded over the expert-data-parallel group
            # tp·cp·dp/(ep·etp), that is el/(tp·cp·dp) whatever ep and etp are.
            def exp_full(lay: LayoutOrRows, sh: bool, nb=nbytes) -> np.ndarray | float:
                return 0.0 if sh else _bytes(c, lay, "expert", nb)

            def exp_shard(lay: LayoutOrRows, sh: bool, nb=nbytes, keep=keep) -> np.ndarray | float:
                return per_rows(_exp_sharded, c, lay, nb, keep) if sh else 0.0

            terms.append(Term(tenant, exp_full, sel="z", key=key, pv=pv_stage, te=inv_group))
            terms.append(Term(tenant, exp_shard, sel="z", key=key, pv=pv_stage))
    acc = rc.accumulation
    if acc:
        # Unsharded gradient accumulation (FSDP2 without sync): every TP/EP-local parameter.
        terms.append(Term("gradients", lambda lay, _: _bytes(c, lay, "dense", acc), pv=pv_stage))
        terms.append(Term("gradients", lambda lay, _: _bytes(c, lay, stage, acc)))
        if A.is_moe:
            terms.append(experts_at(acc))
    if rc.backward_grads:
        # the bf16 .grad of every stage-local parameter, alive once a micro-batch's backward has
        # run and until the fp32 accumulator adds and frees them (nanotron @ e24d248
        # optim/gradient_accumulator.py FP32GradientAccumulator.backward; DDP's buckets are
        # copies, not views: trainer.py DistributedDataParallel without gradient_as_bucket_view)
        def excess(lay: LayoutOrRows, r: Recompute) -> np.ndarray:
            return per_rows(_backward_excess, c, lay, stage, r)

        terms.append(Term("gradients", excess, sel="r"))
        if A.is_moe:  # the experts' grads counted whole (no more than the larger peak)
            terms.append(experts_at(rc.backward_grads))
    if rc.ddp_grads:
        # torch DDP's gradient buckets, full size beside the main gradients, with dp·cp > 1
        ddp = rc.ddp_grads

        below = rc.ddp_zero_below
        on_z = lambda z: z < below  # noqa: E731

        def ddp_part(part: str) -> Callable[[LayoutOrRows, bool], np.ndarray | float]:
            return lambda lay, on: (
                pick(dp_cp(lay) > 1, _bytes(c, lay, part, ddp), 0.0) if on else 0.0
            )

        terms.append(Term("gradients", ddp_part("dense"), sel="z", key=on_z, pv=pv_stage))
        terms.append(Term("gradients", ddp_part(stage), sel="z", key=on_z))
        if A.is_moe:
            terms.append(
                Term("gradients", ddp_part("expert"), sel="z", key=on_z, pv=pv_stage, te=inv_group)
            )
    if rc.fp8_weight_cache:
        # FP8 copies of the layers' linear weights cached across micro-batches; a weight-sharding
        # stage drops them (Megatron-FSDP).
        cache = rc.fp8_weight_cache
        below3 = lambda z: z < 3  # noqa: E731
        terms.append(
            Term(
                "weights",
                lambda lay, on: _bytes(c, lay, "dense", cache) if on else 0.0,
                sel="z",
                key=below3,
                pv=pv_stage,
            )
        )
        if A.is_moe:
            terms.append(
                Term(
                    "weights",
                    lambda lay, on: _bytes(c, lay, "expert", cache) if on else 0.0,
                    sel="z",
                    key=below3,
                    pv=pv_stage,
                    te=inv_group,
                )
            )
    # ZeRO-3 gathers two layers' weights (current + prefetch) and one layer's gradients, and at
    # the loss the unit holding the output layer (with the embedding when pp = 1).
    z3 = lambda z: z >= 3  # noqa: E731
    g = 2 * c.wb + (rc.unit_grad or c.gb)  # FSDP1 reduce-scatters the bf16 flat gradient
    # torchao's float8 all-gather gathers the layers' Float8Linear weights in fp8
    g_dense = 2 * (rc.gathered_weights or c.wb) + (rc.unit_grad or c.gb)

    def gathered(lay: LayoutOrRows, on: bool) -> np.ndarray | float:
        if not on:
            return 0.0
        held = _bytes(c, lay, "dense", g_dense)  # g·x is x·g; x + 0.0 is x (x >= 0)
        return held + _bytes(c, lay, stage, rc.extra_weights or c.wb) if rc.root_gather else held

    terms.append(Term("weights", gathered, sel="z", key=z3))
    if A.is_moe:
        terms.append(
            Term(
                "weights",
                lambda lay, on: _bytes(c, lay, "expert", g) if on else 0.0,
                sel="z",
                key=z3,
                te=inv_group,
            )
        )
    _fsdp_transients(c, terms, inv_group)

    # Activations (over rows computed once, for both stages).
    def act(lay: LayoutOrRows, r: Recompute) -> np.ndarray:
        return per_rows(_act, c, lay, r)

    def at_loss(lay: LayoutOrRows, full: bool) -> np.ndarray:
        return per_rows(_loss_or_recompute, c, lay, stage, full)

    mb = BatchFactor.of(1, 0)
    terms.append(Term("activations", at_loss, sel="r", key=_is_full, db=mb))
    if not (c.overlaps.cp_ring if c.overlaps else profile_of(c.framework).timing.cp_ring):
        terms.append(Term("activations", lambda lay, _: per_rows(kv_gathered, c, lay), db=mb))
    if rc.tp_gather_buffers:
        terms.append(Term("activations", lambda lay, _: per_rows(gather_buffers, c, lay), db=mb))
    if rc.pipeline_buffers:
        # One receive buffer per micro-batch and chunk (gradients on the first stage, inputs on
        # the last): the stage boundary, split over tp by sequence parallelism and over cp.
        def boundary(lay: LayoutOrRows, _: object) -> np.ndarray:
            return per_rows(stage_boundary, c, lay)

        chunks = lambda pv: Fraction(pv[1])  # noqa: E731
        terms.append(Term("activations", boundary, pv=chunks, db=BatchFactor.of(1, 1)))
    pairs: list[tuple[Term, Term]] = []
    dual = _dualpipe(c)
    saved = _fp8_saved(c)
    if stage == "first":

        def q_first(pv: tuple[int, int]) -> Fraction:
            p, v = pv
            nc = n_chunk(A.L, p, v) if v > 1 else int(pv_stage(pv))
            if dual and v > 1:
                return Fraction(nc * (2 * p + 1))  # DualPipeV: see q_last
            return Fraction(nc * p if v == 1 else nc * (v * p + p - 1))

        pairs.append(
            (
                Term("activations", act, sel="r", pv=q_first, db=mb),
                Term("activations", act, sel="r", pv=pv_stage, db=BatchFactor.of(1, 1)),
            )
        )
        if saved is not None:  # a copy per micro-batch in flight, as the activations
            # two gates of the same bytes: the smaller of the pair is their AND (see _fp8_saved)
            (fa, sa), (fb, sb) = saved if len(saved) == 2 else saved * 2
            pairs.append(
                (
                    Term("weights", fa, sel=sa, pv=q_first),
                    Term("weights", fb, sel=sb, pv=pv_stage, db=BatchFactor.of(0, 1)),
                )
            )
    else:

        def q_last(pv: tuple[int, int]) -> Fraction:
            p, v = pv
            nc = n_chunk(A.L, p, v) if v > 1 else int(pv_stage(pv))
            if dual and v > 1:
                # DualPipeV: every rank holds 2·pp + 1 chunks' micro-batches at its peak, one
                # more than 1F1B's pp stages' worth: (2pp − 1) warm-up forwards of its first
                # chunk, one of its second, and the forward of each overlapped forward-backward
                # pair before the backward frees (DeepSeek-V3 report table 2: PP + 1;
                # deepseek-ai/DualPipe @ 3da1bbe README.md, dualpipe/dualpipev.py step)
                return Fraction(nc * (2 * p + 1))
            return Fraction(nc if v == 1 else nc * ((v - 1) * p + 1))

        terms.append(Term("activations", act, sel="r", pv=q_last, db=mb))
        if saved is not None and len(saved) == 2:  # both gates: the smaller is their AND
            (fa, sa), (fb, sb) = saved
            pairs.append(
                (Term("weights", fa, sel=sa, pv=q_last), Term("weights", fb, sel=sb, pv=q_last))
            )
        elif saved is not None:
            terms.append(Term("weights", saved[0][0], sel=saved[0][1], pv=q_last))
    return terms, pairs


def _fp8_saved(
    c: Ctx,
) -> list[tuple[Callable[[LayoutOrRows, object], np.ndarray | float], str]] | None:
    """One layer's FP8 weights an eager torchao Float8Linear saves for backward
    (`Recipe.fp8_saved_weights`), per micro-batch in flight, as gates of the same bytes on the
    axes it depends on (two gates: billed where both are open, the smaller of a pair). Only
    where nothing recomputes the layer (a checkpointed layer, whole or op-level, discards the
    cast and casts again in its backward: torchtitan's op-level policy saves matmul outputs, not
    casts). Where FSDP2 gathers the weights in FP8 (`gathered_weights` 1) the saved weight is the
    gathered unit itself, freed when FSDP2 reshards it (ZeRO-3) or kept as the gathered weights
    (under pipelining): then only ZeRO-0, with no FSDP2 to gather, saves casts, and only on the
    layers nothing recomputes (pytorch/ao @ 0afa4c1 torchao/float8/float8_linear.py: the cast is
    saved by matmul_with_hp_or_float8_args; torch.utils.checkpoint frees what the forward saved).
    None where the recipe saves none. The routed experts are not Float8Linear modules."""
    rc = c.recipe
    nb = rc.fp8_saved_weights
    if not nb:
        return None

    def saved(lay: LayoutOrRows, r: object) -> np.ndarray | float:
        return _bytes(c, lay, "dense", nb) if r is Recompute.NONE else 0.0

    if rc.gathered_weights == 1:

        def unsharded(lay: LayoutOrRows, z: object) -> np.ndarray | float:
            return _bytes(c, lay, "dense", nb) if z == 0 else 0.0

        return [(unsharded, "z"), (saved, "r")]
    return [(saved, "r")]
