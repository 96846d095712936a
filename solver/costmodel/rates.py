"""The physics of one layer on one GPU: compute, memory traffic and collectives, in seconds.

Unless named otherwise a method returns seconds per token of a micro-batch (a token the tp
group processes), for one layer (the mean over dense and MoE layers), on one GPU. Methods of a
layout take `Rows` (every layout row at once, as arrays; branches are `pick`, `np.where` over
rows, and only exactly rounded arithmetic is used, so one row computes the same bits alone or
among others) or a single `Layout` (the same code on Python numbers). Methods of
`te` take the composite (tp, ep[, etp]) axis and index it (etp defaults to tp, Megatron's
expert_tensor_parallel_size default). Collectives follow the ring α-β model (Thakur et al.
2005): n ranks pay (n−1) step latencies plus (n−1)/n of the volume over the link's bandwidth;
an all-reduce may take the tree instead, 2·log2(n) latencies (NCCL).
"""

from __future__ import annotations

import math

import numpy as np

from meshplan.solver.costmodel.context import ACT_BYTES, Ctx
from meshplan.solver.costmodel.framework_timing import overlaps_for
from meshplan.solver.costmodel.point import (
    LayoutOrRows,
    maximum,
    minimum,
    pick,
    rowwise,
)
from meshplan.solver.costmodel.pointwise import (
    EAGER_FRAMEWORKS,
    ELEM_ACT,
    ELEM_H,
    FLOAT8_TP_BYTES,
    UNFUSED_SCORE_PASSES,
    eager_elementwise,
)
from meshplan.solver.profiles import profile_of
from meshplan.solver.schema import Precision, TrainingSpec

CAUSAL = 0.5  # FlashAttention skips masked blocks: causal attention does half the work (Dao 2022)
# Bytes of memory traffic per GEMM element, forward + backward: x and y forward, dy and dx for
# the input gradient, x and dy for the weight gradient, 2 bytes each (3 passes of k + n per
# token); per weight: read twice (forward, dgrad) in BF16 and the FP32 main gradient read and
# written by the accumulating wgrad GEMM (Megatron's gradient_accumulation_fusion): 2+2+4+4.
ACT_TRAFFIC = 3 * ACT_BYTES
WEIGHT_TRAFFIC = 12
GEMM_REF_H = 8192  # hidden size at which eta is the GEMM rate (constants.py gemm_h0)
BUCKET = 40_000_000  # dp bucket (elements): Megatron DDP max(4e7, 1e6·dp) (distributed/ddp)
# The router's passes over its E logits per token, fp32 (--moe-router-dtype fp32): the logits
# written, softmax (read, write), top-k (read), the probabilities scattered (write) and the
# load-balancing loss's softmax and sum (read, write, read) forward, as many backward
# (Megatron-LM @ d98e8a6 transformer/moe/router.py TopKRouter.routing, moe_utils.topk_softmax_
# with_capacity and switch_load_balancing_loss_func).
ROUTER_PASSES = 16
ROUTER_BYTES = 4
# FP8 dispatch (DeepEP under FP8 training): the tokens sent to the experts travel in FP8 with
# one fp32 scale per 128 elements, the combines in BF16 (deepseek-ai/DeepEP @ dd758ca README.md
# "FP8 dispatching and BF16 combining", csrc/kernels/legacy/internode.cu get_num_bytes_per_token;
# DeepSeek-V3 report §3.3.2: the activations before the up-projections and the gradients before
# the down-projections are dispatched in FP8, both combines kept in BF16).
FP8_DISPATCH_BYTES = 1 + 4 / 128


def _etp(te: tuple[int, ...]) -> int:
    return te[2] if len(te) > 2 else te[0]


def ceil_log2(n):  # noqa: ANN001, ANN201
    """ceil(log2(n)) of integers n ≥ 1, exactly (the bit length of n − 1; frexp is exact)."""
    if isinstance(n, np.ndarray):
        return np.frexp((n - 1).astype(np.float64))[1].astype(np.int64)
    return int(n - 1).bit_length()


class Rates:
    """Per-layout times of one request (model, cluster, precision, framework, overlaps)."""

    def __init__(self, c: Ctx) -> None:
        self.c = c
        A, H, K = c.A, c.H, c.K
        self.ov = c.overlaps or overlaps_for(TrainingSpec(framework=c.framework))
        family = profile_of(c.framework).timing.kernels
        kernels = K.kernels(family)
        eta = K.gpu_eta(H.name, H.family)
        # GEMMs of a small hidden size run below the rate eta states (at h = GEMM_REF_H)
        size = A.h * (GEMM_REF_H + K.gemm_h0) / (GEMM_REF_H * (A.h + K.gemm_h0))
        self.rate_bf16 = H.peak_bf16 * eta * kernels * size  # FLOP/s of the layers' BF16 GEMMs
        fp8 = c.precision is Precision.FP8
        fp8_rate = H.peak_fp8 * eta * kernels * K.fp8_eff * size
        self.rate_gemm = fp8_rate if fp8 else self.rate_bf16
        # Routed experts run one GEMM per local expert (Megatron-LM @ 1e05700 moe/experts.py
        # TEGroupedMLP: TE GroupedLinear over m_splits = tokens_per_expert), of m tokens: the
        # same law over m, m/(m + gemm_h0) relative to m = GEMM_REF_H; expert_tail_ref the h0.
        # Their other dims are h and the expert width fe: a fine-grained expert (fe < h) runs
        # at the law's rate of its narrowest dim, fe instead of h.
        self.rate_expert = self.rate_gemm * (GEMM_REF_H + K.gemm_h0) / GEMM_REF_H
        if A.is_moe and A.fe < A.h:
            self.rate_expert *= A.fe * (A.h + K.gemm_h0) / (A.h * (A.fe + K.gemm_h0))
        self.rate_attn = H.peak_bf16 * eta * K.attention(family, H.family)  # BF16 flash attn
        self.eager = c.framework in EAGER_FRAMEWORKS and not c.recipe.compiled
        self.moe = A.n_moe_layers / A.L
        self.dense = A.n_dense_layers / A.L
        # per layer, the blocks with tp collectives: attention, the dense or shared MLPs
        self.tp_blocks = 1.0 + self.dense + (self.moe if A.shared else 0.0)
        g = 3 if A.gated else 2
        # FLOPs per token per layer (all GPUs of the layer), mean over layer types.
        self.F_proj = 6.0 * A.attn_params
        # MLA's down projections: not split by tp (costmodel/mla.py); with sp over s/tp tokens
        self.F_down = 6.0 * A.attn_down_params
        self.F_mlp = self.dense * 6.0 * A.mlp_params(A.f)
        if A.is_moe:
            self.F_mlp += self.moe * 6.0 * (A.shared * A.mlp_params(A.fe) + A.h * A.E)
        self.F_expert = self.moe * 6.0 * A.top_k * A.mlp_params(A.fe) if A.is_moe else 0.0
        self.F_attn = 3.0 * A.attention_core_fwd_flops_per_token(c.s)  # QK^T, AV: fwd + bwd
        self.F_layer = A.layer_flops_per_token(c.s)  # = F_proj + F_mlp + F_expert + F_attn
        self.F_core = A.attention_core_fwd_flops_per_token(c.s)
        self.F_head = A.head_flops_per_token
        self.gate = g
        # Elements of the tp-split and unsplit GEMM dims of a layer (for the memory traffic).
        qkv = (A.a + 2 * A.kv) * A.head_dim
        self.dims_full = 4.0 * A.h * (self.dense + self.moe * (1 if A.shared else 0.5))
        self.dims_split = (qkv + A.a * A.head_dim) + self.dense * g * A.f
        if A.mla:  # q, kv up and o are split; the latents' widths are not
            self.dims_full += A.mla.down_dims
            self.dims_split += A.mla.split_dims(A.a) - (qkv + A.a * A.head_dim)
        if A.is_moe:
            self.dims_split += self.moe * A.shared * g * A.fe
        self.params_dense = self.F_proj / 6 + self.F_mlp / 6  # per layer, before tp
        self.params_expert = self.moe * A.E * A.mlp_params(A.fe) if A.is_moe else 0.0
        # Bytes per element of the four all-to-alls, averaged: dispatch forward and the
        # gradients' dispatch backward in FP8 where DeepEP runs under FP8 training, the two
        # combines in BF16 (FP8_DISPATCH_BYTES).
        fp8_dispatch = fp8 and self.ov.ep_dedup
        self.a2a_bytes = (FP8_DISPATCH_BYTES + ACT_BYTES) / 2 if fp8_dispatch else float(ACT_BYTES)
        # torchao's Float8 tensor parallelism all-gathers in FP8 (FLOAT8_TP_BYTES)
        float8 = fp8 and c.recipe.torchao_float8
        self.tp_bytes = FLOAT8_TP_BYTES if float8 else float(ACT_BYTES)

    # -- links (span: an int, or an array of rows) -------------------------------------------
    def bw(self, span):  # noqa: ANN001, ANN201
        H = self.c.H
        return pick(span <= H.gpn, H.intra_bw, H.inter_bw) * self.c.K.link_eff

    def group_bw(self, n, inner):  # noqa: ANN001, ANN201
        """Bandwidth per GPU of a ring over n ranks spaced `inner` GPUs apart: in-node if the
        group fits a node, else the NICs of the group's ranks in one node, which NCCL's
        rings (one per NIC) use together, up to the in-node link."""
        H = self.c.H
        per_node = maximum(1, H.gpn // inner)
        spread = minimum(H.intra_bw, H.inter_bw * per_node) * self.c.K.link_eff
        return pick(n * inner <= H.gpn, self.bw(1), spread)

    def alpha(self, span):  # noqa: ANN001, ANN201
        K = self.c.K
        return pick(span <= self.c.H.gpn, K.alpha_intra, K.alpha_inter)

    def ring_latency(self, n, span):  # noqa: ANN001, ANN201
        """Latency of one all-gather or reduce-scatter over n ranks spanning `span` GPUs."""
        return (n - 1) * self.alpha(span)

    def allreduce_latency(self, n, span):  # noqa: ANN001, ANN201
        """Ring (2(n−1) steps) or tree (2·log2 n), whichever NCCL's tuner would take."""
        return minimum(2 * (n - 1), 2 * ceil_log2(maximum(n, 2))) * self.alpha(span)

    # -- compute ------------------------------------------------------------------------
    @rowwise
    def gemm(self, lay: LayoutOrRows) -> np.ndarray | float:
        """Dense GEMMs (attention projections, dense or shared MLP, router) at the GEMM rate."""
        if self.F_down:  # MLA's down projections: duplicated over tp, split by sp's tokens
            split = (self.F_proj - self.F_down + self.F_mlp) / lay.tp
            return (split + self.F_down / pick(lay.sp, lay.tp, 1)) / self.rate_gemm
        return (self.F_proj + self.F_mlp) / (lay.tp * self.rate_gemm)

    @rowwise
    def early_stop_saving(self, lay: LayoutOrRows) -> np.ndarray | float:
        """What full recomputation does not replay where it stops at the block's last saved
        tensor (Recipe.recompute_stops_early): the dense MLP's down projection, forward, and the
        row-parallel reduction of its output, one of tp_raw's four collectives of that block.
        An MoE layer's last saved tensor is its combine's, after the experts: nothing skipped."""
        A = self.c.A
        down = self.dense * 2.0 * A.h * A.f / (lay.tp * self.rate_gemm)
        return down + self.tp(lay) * self.dense / (4.0 * self.tp_blocks)

    @rowwise
    def expert_gemm(self, lay: LayoutOrRows) -> np.ndarray | float:
        """Routed experts: balanced, each group token's top_k copies split over the tp GPUs."""
        return self.F_expert / (lay.tp * self.rate_expert)

    @rowwise
    def attention(self, lay: LayoutOrRows) -> np.ndarray | float:
        """Attention scores and values, timed with the causal halving (flash attention); an
        unfused attention (Megatron before FlashAttention, Dao et al. 2022) computes every
        score as batched GEMMs and passes over them for the masked softmax and dropout."""
        if self.c.fused_attention:
            return self.F_attn * CAUSAL / (lay.tp * self.rate_attn)
        A = self.c.A
        passes = UNFUSED_SCORE_PASSES * A.a * self.c.s * ACT_BYTES / self.c.H.hbm_bw
        return (self.F_attn / self.rate_bf16 + passes) / lay.tp

    @rowwise
    def compute(self, lay: LayoutOrRows) -> np.ndarray | float:
        if not self.F_expert and self.rate_expert > 0:  # expert_gemm is +0.0: x + 0.0 is x
            return self.gemm(lay) + self.attention(lay) + self.elementwise(lay)
        return self.gemm(lay) + self.expert_gemm(lay) + self.attention(lay) + self.elementwise(lay)

    @rowwise
    def compute_traffic(self, lay: LayoutOrRows) -> np.ndarray | float:
        """compute + traffic per token (the time terms and `layer` read it)."""
        return self.compute(lay) + self.traffic(lay)

    @rowwise
    def traffic(self, lay: LayoutOrRows) -> np.ndarray | float:
        """GEMM operand traffic per token not hidden behind the math (roofline, Williams 2009)."""
        elems = self.dims_full + self.dims_split / lay.tp
        if self.F_expert:
            A = self.c.A
            elems = elems + self.moe * A.top_k * self.gate * A.fe / lay.tp  # routed copies' fe
        return self.c.K.mem_exposed * ACT_TRAFFIC * elems / self.c.H.hbm_bw

    @rowwise
    def elementwise(self, lay: LayoutOrRows) -> np.ndarray | float:
        """Memory-bound elementwise kernels per token: the h-wide ones are split over tp with
        sequence parallelism (else replicated), the activation's over tp."""
        if self.eager:
            return eager_elementwise(self.c, self.dense, lay, self._moe_bytes())
        A = self.c.A
        h_part = ELEM_H * A.h / pick(lay.sp, lay.tp, 1)
        act = ACT_BYTES * ELEM_ACT * self.dense * self.gate * A.f
        return (ACT_BYTES * h_part + (act + self._moe_bytes()) / lay.tp) / self.c.H.hbm_bw

    def _moe_bytes(self) -> float:
        """Per token, before tp: the routed and shared experts' activations (ELEM_ACT) and the
        router's passes over its logits (ROUTER_PASSES), fused or eager alike."""
        A = self.c.A
        if not A.is_moe:
            return 0.0
        act = ACT_BYTES * ELEM_ACT * self.moe * self.gate * A.fe * (A.top_k + A.shared)
        return act + self.moe * ROUTER_PASSES * A.E * ROUTER_BYTES

    @rowwise
    def expert_traffic_ref(self, lay: LayoutOrRows) -> np.ndarray | float:
        """Routed copies' h-wide operands per token at etp = 1; scaled by etp (te factor)."""
        A = self.c.A
        per = 2.0 * A.h * A.top_k * self.moe / lay.tp
        return self.c.K.mem_exposed * ACT_TRAFFIC * per / self.c.H.hbm_bw

    @rowwise
    def weight_traffic(self, lay: LayoutOrRows) -> np.ndarray | float:
        """Per micro-batch per layer: the dense weights read and their FP32 gradient updated."""
        return self.c.K.mem_exposed * WEIGHT_TRAFFIC * self.params_dense / lay.tp / self.c.H.hbm_bw

    def expert_weight_traffic_ref(self) -> float:
        """Per micro-batch per layer, all experts of a layer; the te factor is 1/(ep·etp)."""
        return self.c.K.mem_exposed * WEIGHT_TRAFFIC * self.params_expert / self.c.H.hbm_bw

    def expert_tail_ref(self) -> float:
        """Per micro-batch per layer, all experts of a layer (te factor 1/(ep·etp)): each local
        expert's GEMMs take as long as if they had gemm_h0 more tokens, so that m tokens run at
        m/(m + h0) of the rate (tile and wave quantization, NVIDIA's Matrix Multiplication
        Background guide), m = ep·etp·b·s·top_k/(tp·cp·E) tokens per expert and micro-batch."""
        A = self.c.A
        return self.moe * A.E * self.c.K.gemm_h0 * 6.0 * A.mlp_params(A.fe) / self.rate_expert

    @rowwise
    def head(self, lay: LayoutOrRows) -> np.ndarray | float:
        """Output layer GEMM and the cross-entropy's passes over the logits, per token. The
        output layer runs in BF16 under FP8 training too: Megatron-Core's is a plain
        ColumnParallelLinear outside Transformer Engine's FP8 layers (NVIDIA/Megatron-LM @
        007562f megatron/core/models/gpt/gpt_model.py), torchtitan's Float8 conversion skips
        it (float8 filter_fqns ["output"])."""
        A = self.c.A
        ce = self.c.recipe.logits * A.V / lay.tp / self.c.H.hbm_bw
        return self.F_head / (lay.tp * self.rate_bf16) + ce

    # -- tensor parallelism ---------------------------------------------------------------
    @rowwise
    def tp_raw(self, lay: LayoutOrRows) -> np.ndarray | float:
        """AG/RS pairs with sequence parallelism (or all-reduces), forward and backward, of
        the attention block and of every dense or shared MLP (Korthikanti et al. 2022 §4)."""
        T, A, blocks = lay.tp, self.c.A, self.tp_blocks
        return pick(T == 1, 0.0, blocks * 4 * A.h * self.tp_bytes * (T - 1) / T / self.bw(T))

    @rowwise
    def tp(self, lay: LayoutOrRows) -> np.ndarray | float:
        raw = self.tp_raw(lay)
        if not self.ov.tp:
            return raw
        if self.ov.tp_own_shard:
            return pick(lay.sp, self.tp_shard_exposed(lay), raw)
        return maximum(self.c.K.eps_tp * raw, raw - self.gemm(lay))

    @rowwise
    def tp_shard_exposed(self, lay: LayoutOrRows) -> np.ndarray | float:
        """tp_raw's four collectives of a block as nanotron's async tp linears run them (@
        e24d248 parallel/tensor_parallel/functional.py): forward, the column-parallel input's
        all-gather hides behind the GEMM of the rank's own sequence shard (1/T of it), the row-
        parallel reduce-scatter behind nothing (differentiable_reduce_scatter_sum); backward,
        the row's output-gradient all-gather behind its own shard's dgrad GEMM (1/T), and the
        column's reduce-scatter of the input gradient behind the weight-gradient GEMM. (The
        column's re-gather of its input for that GEMM, tp_recompute_allgather, runs behind
        the dgrad GEMM and is not counted, as tp_raw counts it nowhere.)"""
        A, T = self.c.A, lay.tp
        one = A.h * self.tp_bytes * (T - 1) / T / self.bw(T)  # one collective, per token
        per_param = 2.0 / (T * self.rate_gemm)  # one GEMM pass per parameter, per token
        qkv = (A.a + 2 * A.kv) * A.head_dim
        blocks = [(1.0, A.h * qkv, A.h * A.a * A.head_dim)]  # (weight, column, row params)
        blocks.append((self.dense, (self.gate - 1) * A.h * A.f, A.h * A.f))
        if A.is_moe and A.shared:
            fs = A.shared * A.fe
            blocks.append((self.moe, (self.gate - 1) * A.h * fs, A.h * fs))
        total = 0.0
        for w, col, row in blocks:
            g_col, g_row = col * per_param, row * per_param
            hidden = maximum(0.0, one - g_col / T) + maximum(0.0, one - g_row / T)
            total = total + w * (one + hidden + maximum(0.0, one - g_col))
        return pick(T == 1, 0.0, total)

    @rowwise
    def tp_latency(self, lay: LayoutOrRows) -> np.ndarray | float:
        """Per micro-batch per layer: 8 ring collectives' step latencies (nanotron's async tp:
        the forward reduce-scatter, 1 of each block's 4, tp_shard_exposed)."""
        T = lay.tp
        share = self.c.K.eps_tp if self.ov.tp else 1.0
        if self.ov.tp_own_shard and self.ov.tp:
            share = pick(lay.sp, 0.25, 1.0)
        return pick(T == 1, 0.0, share * 8 * self.ring_latency(T, T))

    # -- context parallelism ----------------------------------------------------------------
    @rowwise
    def cp_hop(self, lay: LayoutOrRows) -> np.ndarray | float:
        """One ring step: K,V forward, K,V and dK,dV backward (Liu et al. 2023), of the KV
        heads, or of every query head where the framework repeats K,V before attention (the
        recipe's kv_repeated: torchtitan @ 9dec370 models/llama/model.py repeat_kv)."""
        A = self.c.A
        heads = A.a if self.c.recipe.kv_repeated else A.kv
        vol = 3 * heads * (A.qk_dim + A.v_dim) * ACT_BYTES / lay.tp  # MLA: K is nope + rope wide
        return vol / self.group_bw(lay.cp, lay.tp)

    @rowwise
    def cp(self, lay: LayoutOrRows) -> np.ndarray | float:
        C = lay.cp
        hop = self.cp_hop(lay)
        if not self.ov.cp:
            exposed = (C - 1) * hop
        else:
            block = self.attention(lay) / C  # the attention of one block
            if self.ov.cp_ring:  # each hop hides behind one block
                exposed = (C - 1) * maximum(self.c.K.eps_cp * hop, hop - block)
            else:  # behind the first
                exposed = maximum(self.c.K.eps_cp * (C - 1) * hop, (C - 1) * hop - block)
        return pick(C == 1, 0.0, exposed)

    @rowwise
    def cp_latency(self, lay: LayoutOrRows) -> np.ndarray | float:
        C = lay.cp
        share = self.c.K.eps_cp if self.ov.cp else 1.0
        return pick(C == 1, 0.0, share * 3 * (C - 1) * self.alpha(lay.tp * C))

    # -- expert parallelism (functions of the te axis) ----------------------------------------
    def a2a(self, te: tuple[int, ...]) -> float:
        """Dispatch and combine, forward and backward: 4 all-to-alls of top_k·h per token
        (Lepikhin et al. 2020) between the ep ranks (stride etp, Megatron's expert order), the
        in-node and inter-node peers in parallel; plus the etp all-gather / reduce-scatter of
        the routed tokens (Megatron's alltoall dispatcher)."""
        A, H = self.c.A, self.c.H
        tp, ep, etp = te[0], te[1], _etp(te)
        copies = 4 * A.top_k * A.h * self.a2a_bytes / tp  # every routed copy, per group token
        span = ep * etp
        inside = ep - 1 if span <= H.gpn else max(H.gpn // etp - 1, 0)
        outside = ep - 1 - inside
        into, out = copies * inside / ep, copies * outside / ep
        if self.ov.ep_dedup and outside:
            # Hierarchical (DeepEP, Zhao et al. 2025): one InfiniBand copy per remote node that
            # holds any of the token's experts (E[remote nodes hit] by top_k of E experts), then
            # the intra-node hop: the node's NVLink forwarder passes every copy on to its
            # expert's GPU (DeepEP @ dd758ca csrc/kernels/legacy/internode.cu dispatch:
            # kRDMASender -> kRDMAAndNVLForwarder -> kNVLReceivers; combine the reverse). The
            # forwarder passes chunks on as they arrive, so the slower of the two hops sets the
            # pace: DeepEP's own internode figures are RDMA-bound (docs/legacy.md, EP 16-64: 43-58
            # GB/s RDMA on ~50 GB/s NICs), its intranode ones NVLink-bound (153 GB/s).
            nodes = -(-span // H.gpn)
            miss = math.comb(A.E - A.E // nodes, A.top_k) / math.comb(A.E, A.top_k)
            out = 4 * A.h * self.a2a_bytes / tp * (nodes - 1) * (1 - miss)
            t = max(out / self.bw(H.gpn + 1), copies * (ep - 1) / ep / self.bw(1))
        else:  # a flat all-to-all: in-node and inter-node peers at once (NCCL)
            t = max(into / self.bw(1), out / self.bw(H.gpn + 1))
        if etp > 1:
            t += 4 * A.top_k * A.h * ACT_BYTES * (etp - 1) / tp / self.bw(etp)
        return self.moe * t * (1 + self.imbalance(te))  # the busiest rank's tokens

    def imbalance(self, te: tuple[int, ...]) -> float:
        """Excess of the busiest ep rank's routed tokens over the mean, under unforced routing:
        a rank holds E/ep experts whose loads vary with coefficient moe_load_cv, so its load
        varies with moe_load_cv·sqrt(ep/E), and the largest of ep ranks sits ~sqrt(2 ln ep)
        deviations above the mean (the expected maximum of ep normal draws); 0 when routing
        is forced to balance (Megatron --moe-router-force-load-balancing) or ep = 1."""
        ep, A = te[1], self.c.A
        if ep == 1 or self.ov.ep_balanced:
            return 0.0
        return self.c.K.moe_load_cv * math.sqrt(ep / A.E) * math.sqrt(2 * math.log(ep))

    def permute(self, te: tuple[int, ...]) -> float:
        """Token permutation and unpermutation around the experts, forward and backward: memory
        bound, (1 + top_k)·h read and written per token (Megatron's moe_utils.permute)."""
        A = self.c.A
        per = 2 * 2 * 2 * (1 + A.top_k) * A.h * ACT_BYTES * _etp(te) / te[0]
        return self.moe * per * (1 + self.imbalance(te)) / self.c.H.hbm_bw

    def ep_exposed(
        self, te: tuple[int, ...], attn: float, experts: float, overlap: bool | None = None
    ) -> float:
        """Exposed all-to-all: all of it, or with the 1F1B overlap (`overlap`, default the
        request's) what the other micro-batch's compute does not hide, phase by phase: combine
        backward behind the attention block's forward, dispatch forward and backward behind the
        experts' backward and forward, combine forward behind the attention's backward
        (Megatron-LM @ d98e8a6 models/common/model_chunk_schedule_plan.py
        TransformerLayerSchedulePlan.run); `attn`, `experts`: s per token, forward + backward
        (a third forward)."""
        raw = self.a2a(te)
        if not (self.ov.ep if overlap is None else overlap):
            return raw
        phases = max(0.0, raw / 4 - attn / 3) + max(0.0, raw / 2 - experts)
        phases += max(0.0, raw / 4 - 2 * attn / 3)
        return max(self.c.K.eps_ep * raw, phases)

    def ep_latency(self, te: tuple[int, ...], overlap: bool | None = None) -> float:
        """Per micro-batch per layer: 4 all-to-alls of ep−1 messages each."""
        ep = te[1]
        if ep == 1:
            return 0.0
        share = self.c.K.eps_ep if (self.ov.ep if overlap is None else overlap) else 1.0
        return share * self.moe * 4 * (ep - 1) * self.alpha(ep * _etp(te))

    # -- pipeline ---------------------------------------------------------------------------
    @rowwise
    def p2p(self, lay: LayoutOrRows) -> tuple[np.ndarray, np.ndarray]:
        """A chunk's output forward and its gradient back: (per token, per micro-batch)."""
        width = self.c.A.h * ACT_BYTES / pick(lay.sp, lay.tp, 1)
        vol = 0.0 if self.ov.pp else 2 * width / self.bw(lay.gpus)
        first = lay.pp == 1
        return pick(first, 0.0, vol), pick(first, 0.0, 2 * self.alpha(lay.gpus))

    # -- scale ------------------------------------------------------------------------------
    @rowwise
    def straggle(self, lay: LayoutOrRows) -> np.ndarray | float:
        """jitter·sqrt(2 ln n) of n = the layout's GPUs: the slowest GPU's excess over the mean
        step, as a share of the step's compute (math.log per distinct count: the same bits for
        a row alone or among others)."""
        g = lay.gpus
        if isinstance(g, np.ndarray):
            uniq, inv = np.unique(g, return_inverse=True)
            return np.array([self._straggle(int(u)) for u in uniq.tolist()])[inv]
        return self._straggle(int(g))

    def _straggle(self, n: int) -> float:
        return self.c.K.jitter * math.sqrt(2 * math.log(n)) if n > 1 else 0.0

    # -- per layer totals ---------------------------------------------------------------------
    @rowwise
    def fixed(self, lay: LayoutOrRows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per layer per micro-batch: (launches + weight traffic, tp latency, cp latency)."""
        return (
            self.c.K.kappa0 + self.weight_traffic(lay),
            self.tp_latency(lay),
            self.cp_latency(lay),
        )

    @rowwise
    def layer(self, lay: LayoutOrRows) -> np.ndarray | float:
        """Per token: compute and exposed tp/cp traffic of a layer (what hides dp traffic)."""
        return self.compute_traffic(lay) + self.tp(lay) + self.cp(lay)
