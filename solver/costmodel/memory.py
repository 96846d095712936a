"""Per-GPU memory on the first and last pipeline stage, by tenant (bytes).

Static state per parameter: the request's recipe (context.py: seed 002's 16 B BF16 and 9 B FP8,
or a framework profile such as KempnerForge's); ZeRO-1/2/3 shard optimizer / +grads / +weights
over the dp·cp group (Rajbhandari et al. 2020). In flight on the first stage: min(pp, M)
micro-batches under 1F1B, L·(1 + (pp-1)/(pp·v)) layers when interleaved (Korthikanti §4.2.3).

Activations: seed 002's 12·L·B·S·d·b_a (12·h elements of 2 bytes per token per layer under
selective recomputation), with Korthikanti et al. 2022 eq. 2 supplying what that form leaves
out: the attention scores without recomputation (5·a·s bytes per token), the split across tp
with and without sequence parallelism, and the MoE/dense ratio. Kept over Korthikanti's own
s·b·h·34 (generalised to GQA and gated MLPs: 43·h per token for Llama shapes) because it
predicts torchtitan's published peaks better where the two differ, the seven selective-recompute
runs: median |error| 26% (+17…+31% on the Dec-2024 runs) against Korthikanti's 83% (+68…+99%),
neither under-predicting. Under full recomputation both keep the 2·s·b·h checkpoint and differ
only in the block being recomputed (benchmarks/fidelity.py prints the comparison).
"""

from __future__ import annotations

from fractions import Fraction

from meshplan.solver.costmodel.context import ACT_BYTES, Ctx, n_chunk, n_stage
from meshplan.solver.costmodel.point import Layout
from meshplan.solver.costmodel.terms import Term
from meshplan.solver.schema import Recompute

TENANTS = ("weights", "gradients", "optimizer", "activations")


def _layer_params(c: Ctx, lay: Layout) -> tuple[float, float]:
    """(tp-sharded, expert) parameters of one layer on the heaviest stage: mean if pp=1."""
    A = c.A
    if lay.pp == 1:
        dense = A.n_dense_layers * A.dense_layer_params + A.n_moe_layers * A.moe_layer_dense_params
        return dense / A.L, A.n_moe_layers * A.moe_layer_expert_params / A.L
    if not A.is_moe:
        return float(A.dense_layer_params), 0.0
    return float(max(A.dense_layer_params, A.moe_layer_dense_params)), float(
        A.moe_layer_expert_params
    )


SEED002_ELEMENTS = 12  # activation elements per token per layer, in units of h (seed 002)


def _act_per_token(c: Ctx, lay: Layout, r: Recompute) -> float:
    """Activation bytes per token per layer on one GPU (seed 002's form; Korthikanti's split)."""
    A, T = c.A, lay.tp
    if r is Recompute.FULL:
        return 2.0 * A.h / (T if lay.sp else 1)  # the layer input checkpoint only
    score = 0.0 if r is Recompute.SELECTIVE else 5.0 * A.a * c.s  # Korthikanti eq. 2
    nonpar = 10.0 * A.h  # layer-norm inputs, dropout masks: replicated across tp without sp
    gate = 8 if A.gated else 4

    def korthikanti(mlp: float) -> float:  # eq. 1 generalised to GQA and gated MLPs
        return nonpar + (4.0 + 4.0 * A.kv / A.a) * A.h + mlp

    scale = 1.0
    if c.recipe.activations == "seed002":
        # seed 002: 12·h elements of 2 bytes per token for the model's dense block; Korthikanti's
        # terms only share it out (tp split, MoE/dense ratio)
        scale = SEED002_ELEMENTS * ACT_BYTES * A.h / korthikanti(gate * A.f)

    def per_layer(mlp: float) -> float:
        par = scale * (korthikanti(mlp) - nonpar) + score
        return (scale * nonpar + par) / T if lay.sp else scale * nonpar + par / T

    dense = per_layer(gate * A.f)
    if not A.is_moe:
        return dense
    moe = per_layer(gate * A.fe * (A.top_k + A.shared) + 2.0 * A.top_k * A.h)
    if lay.pp == 1:
        return (A.n_dense_layers * dense + A.n_moe_layers * moe) / A.L
    return max(dense, moe)


def _extras(c: Ctx, lay: Layout, stage: str) -> float:
    """Embedding (first stage) and output layer + final norm (last stage), parameters per GPU.

    The output layer is column-parallel over tp; the embedding is vocab-parallel unless the
    recipe replicates it (KempnerForge)."""
    A = c.A
    embed = A.embed_params / (lay.tp if c.recipe.vocab_parallel else 1)
    head = (A.h if (A.tied and lay.pp == 1) else A.V * A.h + A.h) / lay.tp
    if lay.pp == 1:
        return embed + head
    return embed if stage == "first" else head


def memory_terms(c: Ctx, stage: str) -> tuple[list[Term], list[tuple[Term, Term]]]:
    """Terms summing to the stage's bytes, and pairs of which only the smaller counts."""
    terms: list[Term] = []
    A = c.A
    pv_stage = lambda pv: n_stage(A.L, pv[0], pv[1])  # noqa: E731
    inv_ep = lambda te: Fraction(1, te[1])  # noqa: E731
    for tenant, nbytes, k in (("weights", c.wb, 3), ("gradients", c.gb, 2), ("optimizer", c.ob, 1)):
        if nbytes == 0:
            continue
        key = lambda z, k=k: z >= k  # noqa: E731

        def dense(lay: Layout, sh: bool, nb=nbytes) -> float:
            return _layer_params(c, lay)[0] / lay.tp * nb / (lay.dp * lay.cp if sh else 1)

        def extra(lay: Layout, sh: bool, nb=nbytes) -> float:
            return _extras(c, lay, stage) * nb / (lay.dp * lay.cp if sh else 1)

        terms.append(Term(tenant, dense, sel="z", key=key, pv=pv_stage))
        terms.append(Term(tenant, extra, sel="z", key=key))
        if A.is_moe:
            # Expert state: ep·tp ranks share the experts; ZeRO shards it over dp·cp/ep replicas,
            # so a sharded expert shard is el/(tp·dp·cp) whatever ep is.
            def exp_full(lay: Layout, sh: bool, nb=nbytes) -> float:
                return 0.0 if sh else _layer_params(c, lay)[1] / lay.tp * nb

            def exp_shard(lay: Layout, sh: bool, nb=nbytes) -> float:
                return _layer_params(c, lay)[1] / (lay.tp * lay.dp * lay.cp) * nb if sh else 0.0

            terms.append(Term(tenant, exp_full, sel="z", key=key, pv=pv_stage, te=inv_ep))
            terms.append(Term(tenant, exp_shard, sel="z", key=key, pv=pv_stage))
    acc = c.recipe.accumulation
    if acc:
        # Unsharded gradient accumulation (FSDP2 without sync): every TP/EP-local parameter.
        terms.append(
            Term("gradients", lambda lay, _: _layer_params(c, lay)[0] / lay.tp * acc, pv=pv_stage)
        )
        terms.append(Term("gradients", lambda lay, _: _extras(c, lay, stage) * acc))
        if A.is_moe:
            terms.append(
                Term(
                    "gradients",
                    lambda lay, _: _layer_params(c, lay)[1] / lay.tp * acc,
                    pv=pv_stage,
                    te=inv_ep,
                )
            )
    # ZeRO-3 gathers two layers' weights (current + prefetch) and one layer's gradients.
    z3 = lambda z: z >= 3  # noqa: E731
    g = 2 * c.wb + c.gb
    terms.append(
        Term(
            "weights",
            lambda lay, on: g * _layer_params(c, lay)[0] / lay.tp if on else 0.0,
            sel="z",
            key=z3,
        )
    )
    if A.is_moe:
        terms.append(
            Term(
                "weights",
                lambda lay, on: g * _layer_params(c, lay)[1] / lay.tp if on else 0.0,
                sel="z",
                key=z3,
                te=inv_ep,
            )
        )

    # Activations.
    def act(lay: Layout, r: Recompute) -> float:
        return c.s / lay.cp * _act_per_token(c, lay, r)

    def transient(lay: Layout, r: Recompute) -> float:
        # Full recomputation: the block being back-propagated holds its recomputed activations
        # and their gradients, about as large (Korthikanti §5 keeps one block's worth).
        if r is not Recompute.FULL:
            return 0.0
        return 2 * c.s / lay.cp * _act_per_token(c, lay, Recompute.SELECTIVE)

    def logits(lay: Layout, _: object) -> float:
        if stage == "first" and lay.pp > 1:
            return 0.0
        vocab = A.V / (lay.tp if c.recipe.vocab_parallel else 1)
        return c.s / lay.cp * vocab * c.recipe.logits

    mb = lambda db: Fraction(db[1])  # noqa: E731
    terms.append(Term("activations", transient, sel="r", db=mb))
    terms.append(Term("activations", logits, db=mb))
    pairs: list[tuple[Term, Term]] = []
    if stage == "first":

        def q_first(pv: tuple[int, int]) -> Fraction:
            p, v = pv
            nc = n_chunk(A.L, p, v)
            return Fraction(nc * p if v == 1 else nc * (v * p + p - 1))

        pairs.append(
            (
                Term("activations", act, sel="r", pv=q_first, db=mb),
                Term(
                    "activations", act, sel="r", pv=pv_stage, db=lambda db: Fraction(db[1] * db[2])
                ),
            )
        )
    else:

        def q_last(pv: tuple[int, int]) -> Fraction:
            p, v = pv
            nc = n_chunk(A.L, p, v)
            return Fraction(nc if v == 1 else nc * ((v - 1) * p + 1))

        terms.append(Term("activations", act, sel="r", pv=q_last, db=mb))
    return terms, pairs
