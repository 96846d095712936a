"""The physics of one layer on one GPU: compute, memory traffic and collectives, in seconds.

Unless named otherwise a method returns seconds per token of a micro-batch (a token the tp
group processes), for one layer (the mean over dense and MoE layers), on one GPU. Methods of
`te` take the composite (tp, ep[, etp]) axis and index it (etp defaults to tp, Megatron's
expert_tensor_parallel_size default). Collectives follow the ring α-β model (Thakur et al.
2005): n ranks pay (n−1) step latencies plus (n−1)/n of the volume over the link's bandwidth;
an all-reduce may take the tree instead, 2·log2(n) latencies (NCCL).
"""

from __future__ import annotations

import math
from functools import cached_property

from meshplan.solver.costmodel.context import ACT_BYTES, Ctx
from meshplan.solver.costmodel.framework_timing import overlaps_for
from meshplan.solver.costmodel.point import Layout
from meshplan.solver.profiles import profile_of
from meshplan.solver.schema import Precision, TrainingSpec

CAUSAL = 0.5  # FlashAttention skips masked blocks: causal attention does half the work (Dao 2022)
# Bytes of memory traffic per GEMM element, forward + backward: x and y forward, dy and dx for
# the input gradient, x and dy for the weight gradient, 2 bytes each (3 passes of k + n per
# token); per weight: read twice (forward, dgrad) in BF16 and the FP32 main gradient read and
# written by the accumulating wgrad GEMM (Megatron's gradient_accumulation_fusion): 2+2+4+4.
ACT_TRAFFIC = 3 * ACT_BYTES
WEIGHT_TRAFFIC = 12
# Elementwise kernels of a layer, unfused, elements read + written per token: the two norms,
# the bias-dropout-residual adds and the MLP activation forward (~10·h + the activation's input
# and output), about twice that backward: 30·h + 3·(activation input + output).
ELEM_H = 30
ELEM_ACT = 3
# Unfused attention's passes over the a·s scores of a token: scale-mask-softmax and dropout
# forward (write the scores, read them, write the probabilities, the mask and the dropped),
# about as many backward.
UNFUSED_SCORE_PASSES = 10
BUCKET = 40_000_000  # dp bucket (elements): Megatron DDP max(4e7, 1e6·dp) (distributed/ddp)


def _etp(te: tuple[int, ...]) -> int:
    return te[2] if len(te) > 2 else te[0]


class Rates:
    """Per-layout times of one request (model, cluster, precision, framework, overlaps)."""

    def __init__(self, c: Ctx) -> None:
        self.c = c
        A, H, K = c.A, c.H, c.K
        self.ov = c.overlaps or overlaps_for(TrainingSpec(framework=c.framework))
        family = profile_of(c.framework).timing.kernels
        kernels = K.kernels(family)
        eta = K.gpu_eta(H.name, H.family)
        self.rate_bf16 = H.peak_bf16 * eta * kernels  # FLOP/s of a large BF16 GEMM
        fp8 = c.precision is Precision.FP8
        self.rate_gemm = H.peak_fp8 * eta * kernels * K.fp8_eff if fp8 else self.rate_bf16
        self.rate_attn = H.peak_bf16 * eta * K.attention(family)  # BF16 flash attention
        self.moe = A.n_moe_layers / A.L
        self.dense = A.n_dense_layers / A.L
        g = 3 if A.gated else 2
        # FLOPs per token per layer (all GPUs of the layer), mean over layer types.
        self.F_proj = 6.0 * A.attn_params
        self.F_mlp = self.dense * 6.0 * A.mlp_params(A.f)
        if A.is_moe:
            self.F_mlp += self.moe * 6.0 * (A.shared * A.mlp_params(A.fe) + A.h * A.E)
        self.F_expert = self.moe * 6.0 * A.top_k * A.mlp_params(A.fe) if A.is_moe else 0.0
        self.F_attn = 12.0 * A.a * A.head_dim * c.s  # QK^T and AV, forward + backward
        self.F_layer = A.layer_flops_per_token(c.s)  # = F_proj + F_mlp + F_expert + F_attn
        self.F_core = A.attention_core_fwd_flops_per_token(c.s)
        self.F_head = A.head_flops_per_token
        self.gate = g
        # Elements of the tp-split and unsplit GEMM dims of a layer (for the memory traffic).
        qkv = (A.a + 2 * A.kv) * A.head_dim
        self.dims_full = 4.0 * A.h * (self.dense + self.moe * (1 if A.shared else 0.5))
        self.dims_split = (qkv + A.a * A.head_dim) + self.dense * g * A.f
        if A.is_moe:
            self.dims_split += self.moe * A.shared * g * A.fe
        self.params_dense = self.F_proj / 6 + self.F_mlp / 6  # per layer, before tp
        self.params_expert = self.moe * A.E * A.mlp_params(A.fe) if A.is_moe else 0.0

    # -- links --------------------------------------------------------------------------
    def bw(self, span: int) -> float:
        return self.c.H.link_bw(span) * self.c.K.link_eff

    def group_bw(self, n: int, inner: int) -> float:
        """Bandwidth per GPU of a ring over n ranks spaced `inner` GPUs apart: in-node if the
        group fits a node, else the NICs of the group's ranks in one node, which NCCL's
        rings (one per NIC) use together, up to the in-node link."""
        H = self.c.H
        if n * inner <= H.gpn:
            return self.bw(1)
        per_node = max(1, H.gpn // inner)
        return min(H.intra_bw, H.inter_bw * per_node) * self.c.K.link_eff

    def alpha(self, span: int) -> float:
        K = self.c.K
        return K.alpha_intra if span <= self.c.H.gpn else K.alpha_inter

    def ring_latency(self, n: int, span: int) -> float:
        """Latency of one all-gather or reduce-scatter over n ranks spanning `span` GPUs."""
        return (n - 1) * self.alpha(span)

    def allreduce_latency(self, n: int, span: int) -> float:
        """Ring (2(n−1) steps) or tree (2·log2 n), whichever NCCL's tuner would take."""
        return min(2 * (n - 1), 2 * math.ceil(math.log2(max(n, 2)))) * self.alpha(span)

    # -- compute ------------------------------------------------------------------------
    def gemm(self, lay: Layout) -> float:
        """Dense GEMMs (attention projections, dense or shared MLP, router) at the GEMM rate."""
        return (self.F_proj + self.F_mlp) / (lay.tp * self.rate_gemm)

    def expert_gemm(self, lay: Layout) -> float:
        """Routed experts: balanced, each group token's top_k copies split over the tp GPUs."""
        return self.F_expert / (lay.tp * self.rate_gemm)

    def attention(self, lay: Layout) -> float:
        """Attention scores and values, timed with the causal halving (flash attention); an
        unfused attention (Megatron before FlashAttention, Dao et al. 2022) computes every
        score as batched GEMMs and passes over them for the masked softmax and dropout."""
        if self.c.fused_attention:
            return self.F_attn * CAUSAL / (lay.tp * self.rate_attn)
        A = self.c.A
        passes = UNFUSED_SCORE_PASSES * A.a * self.c.s * ACT_BYTES / self.c.H.hbm_bw
        return (self.F_attn / self.rate_bf16 + passes) / lay.tp

    def compute(self, lay: Layout) -> float:
        return self.gemm(lay) + self.expert_gemm(lay) + self.attention(lay) + self.elementwise(lay)

    def traffic(self, lay: Layout) -> float:
        """GEMM operand traffic per token not hidden behind the math (roofline, Williams 2009)."""
        elems = self.dims_full + self.dims_split / lay.tp
        if self.F_expert:
            A = self.c.A
            elems += self.moe * A.top_k * self.gate * A.fe / lay.tp  # routed copies' fe
        return self.c.K.mem_exposed * ACT_TRAFFIC * elems / self.c.H.hbm_bw

    def elementwise(self, lay: Layout) -> float:
        """Memory-bound elementwise kernels per token: the h-wide ones are split over tp with
        sequence parallelism (else replicated), the activation's over tp."""
        A = self.c.A
        h_part = ELEM_H * A.h / (lay.tp if lay.sp else 1)
        act = self.dense * self.gate * A.f
        if A.is_moe:
            act += self.moe * self.gate * A.fe * (A.top_k + A.shared)
        return ACT_BYTES * (h_part + ELEM_ACT * act / lay.tp) / self.c.H.hbm_bw

    def expert_traffic_ref(self, lay: Layout) -> float:
        """Routed copies' h-wide operands per token at etp = 1; scaled by etp (te factor)."""
        A = self.c.A
        per = 2.0 * A.h * A.top_k * self.moe / lay.tp
        return self.c.K.mem_exposed * ACT_TRAFFIC * per / self.c.H.hbm_bw

    def weight_traffic(self, lay: Layout) -> float:
        """Per micro-batch per layer: the dense weights read and their FP32 gradient updated."""
        return self.c.K.mem_exposed * WEIGHT_TRAFFIC * self.params_dense / lay.tp / self.c.H.hbm_bw

    def expert_weight_traffic_ref(self) -> float:
        """Per micro-batch per layer, all experts of a layer; the te factor is 1/(ep·etp)."""
        return self.c.K.mem_exposed * WEIGHT_TRAFFIC * self.params_expert / self.c.H.hbm_bw

    def head(self, lay: Layout) -> float:
        """Output layer GEMM and the cross-entropy's passes over the logits, per token."""
        A = self.c.A
        ce = self.c.recipe.logits * A.V / lay.tp / self.c.H.hbm_bw
        return self.F_head / (lay.tp * self.rate_gemm) + ce

    # -- tensor parallelism ---------------------------------------------------------------
    def tp_raw(self, lay: Layout) -> float:
        """AG/RS pairs with sequence parallelism (or all-reduces), forward and backward, of
        the attention block and of every dense or shared MLP (Korthikanti et al. 2022 §4)."""
        T = lay.tp
        if T == 1:
            return 0.0
        A = self.c.A
        blocks = 1.0 + self.dense + (self.moe if A.shared else 0.0)
        return blocks * 4 * A.h * ACT_BYTES * (T - 1) / T / self.bw(T)

    def tp(self, lay: Layout) -> float:
        raw = self.tp_raw(lay)
        if not self.ov.tp:
            return raw
        return max(self.c.K.eps_tp * raw, raw - self.gemm(lay))

    def tp_latency(self, lay: Layout) -> float:
        """Per micro-batch per layer: 8 ring collectives' step latencies."""
        T = lay.tp
        if T == 1:
            return 0.0
        share = self.c.K.eps_tp if self.ov.tp else 1.0
        return share * 8 * self.ring_latency(T, T)

    # -- context parallelism ----------------------------------------------------------------
    def cp_hop(self, lay: Layout) -> float:
        """One ring step: K,V forward, K,V and dK,dV backward (Liu et al. 2023)."""
        A = self.c.A
        vol = 3 * 2 * A.kv * A.head_dim * ACT_BYTES / lay.tp
        return vol / self.group_bw(lay.cp, lay.tp)

    def cp(self, lay: Layout) -> float:
        C = lay.cp
        if C == 1:
            return 0.0
        hop = self.cp_hop(lay)
        if not self.ov.cp:
            return (C - 1) * hop
        block = self.attention(lay) / C  # the attention of one block
        if self.ov.cp_ring:  # each hop hides behind one block
            return (C - 1) * max(self.c.K.eps_cp * hop, hop - block)
        return max(self.c.K.eps_cp * (C - 1) * hop, (C - 1) * hop - block)  # behind the first

    def cp_latency(self, lay: Layout) -> float:
        C = lay.cp
        if C == 1:
            return 0.0
        share = self.c.K.eps_cp if self.ov.cp else 1.0
        return share * 3 * (C - 1) * self.alpha(lay.tp * C)

    # -- expert parallelism (functions of the te axis) ----------------------------------------
    def a2a(self, te: tuple[int, ...]) -> float:
        """Dispatch and combine, forward and backward: 4 all-to-alls of top_k·h per token
        (Lepikhin et al. 2020) between the ep ranks (stride etp, Megatron's expert order), the
        in-node and inter-node peers in parallel; plus the etp all-gather / reduce-scatter of
        the routed tokens (Megatron's alltoall dispatcher)."""
        A, H = self.c.A, self.c.H
        tp, ep, etp = te[0], te[1], _etp(te)
        copies = 4 * A.top_k * A.h * ACT_BYTES / tp  # every routed copy, per group token
        span = ep * etp
        inside = ep - 1 if span <= H.gpn else max(H.gpn // etp - 1, 0)
        outside = ep - 1 - inside
        into, out = copies * inside / ep, copies * outside / ep
        if self.ov.ep_dedup and outside:
            # One copy per remote node that holds any of the token's experts, forwarded there
            # over NVLink (DeepEP, Zhao et al. 2025): E[remote nodes hit] by top_k of E experts.
            nodes = -(-span // H.gpn)
            miss = math.comb(A.E - A.E // nodes, A.top_k) / math.comb(A.E, A.top_k)
            out = 4 * A.h * ACT_BYTES / tp * (nodes - 1) * (1 - miss)
            into = copies * (ep - 1) / ep
        t = max(into / self.bw(1), out / self.bw(H.gpn + 1))
        if etp > 1:
            t += 4 * A.top_k * A.h * ACT_BYTES * (etp - 1) / tp / self.bw(etp)
        return self.moe * t

    def permute(self, te: tuple[int, ...]) -> float:
        """Token permutation and unpermutation around the experts, forward and backward: memory
        bound, (1 + top_k)·h read and written per token (Megatron's moe_utils.permute)."""
        A = self.c.A
        per = 2 * 2 * 2 * (1 + A.top_k) * A.h * ACT_BYTES * _etp(te) / te[0]
        return self.moe * per / self.c.H.hbm_bw

    def ep_exposed(self, te: tuple[int, ...], layer: float) -> float:
        """Exposed all-to-all: all of it, or with the 1F1B overlap what another micro-batch's
        compute `layer` (s per token) does not hide."""
        raw = self.a2a(te)
        if not self.ov.ep:
            return raw
        return max(self.c.K.eps_ep * raw, raw - layer)

    def ep_latency(self, te: tuple[int, ...]) -> float:
        """Per micro-batch per layer: 4 all-to-alls of ep−1 messages each."""
        ep = te[1]
        if ep == 1:
            return 0.0
        share = self.c.K.eps_ep if self.ov.ep else 1.0
        return share * self.moe * 4 * (ep - 1) * self.alpha(ep * _etp(te))

    # -- pipeline ---------------------------------------------------------------------------
    def p2p(self, lay: Layout) -> tuple[float, float]:
        """A chunk's output forward and its gradient back: (per token, per micro-batch)."""
        if lay.pp == 1:
            return 0.0, 0.0
        width = self.c.A.h * ACT_BYTES / (lay.tp if lay.sp else 1)
        vol = 0.0 if self.ov.pp else 2 * width / self.bw(lay.gpus)
        return vol, 2 * self.alpha(lay.gpus)

    # -- per layer totals ---------------------------------------------------------------------
    def fixed(self, lay: Layout) -> tuple[float, float, float]:
        """Per layer per micro-batch: (launches + weight traffic, tp latency, cp latency)."""
        return (
            self.c.K.kappa0 + self.weight_traffic(lay),
            self.tp_latency(lay),
            self.cp_latency(lay),
        )

    @cached_property
    def _layer_cache(self) -> dict[Layout, float]:
        return {}

    def layer(self, lay: Layout) -> float:
        """Per token: compute and exposed tp/cp traffic of a layer (what hides dp traffic)."""
        x = self._layer_cache.get(lay)
        if x is None:
            x = self.compute(lay) + self.traffic(lay) + self.tp(lay) + self.cp(lay)
            self._layer_cache[lay] = x
        return x
