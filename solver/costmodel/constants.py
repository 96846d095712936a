"""Efficiency constants of the time model.

Each constant is a physical quantity with a prior from public measurements; `scripts/
fit_constants.py` fits the ones the published runs identify (tools/data/calibration) and writes
`fitted.json` beside this file, which wins: its values replace the priors field by field (dict
entries are merged). What the GPU can do (`eta`, per GPU) is kept apart from what a framework's
kernels achieve on it (`kernel_eff`, per kernel family of a framework profile).
"""

from __future__ import annotations

import json
from dataclasses import asdict, field, replace
from functools import cache
from pathlib import Path
from typing import Any

from meshplan.solver.record import record

# GPU families that share another's compute die: same tensor cores and clocks, so the same
# achievable GEMM rate (H200 is the GH100 of H100 SXM with HBM3e: NVIDIA H200 datasheet).
SAME_DIE = {"H200": "H100"}


@record(frozen=True)
class Constants:
    # Achievable fraction of the dense peak for large BF16 GEMMs, per GPU family: what the
    # silicon sustains (cuBLAS on H100 SXM reaches ~0.75-0.8 of 989 TFLOP/s).
    eta: dict[str, float] = field(
        default_factory=lambda: {"A100": 0.80, "H100": 0.75, "B200": 0.70, "MI300X": 0.55}
    )
    # A catalog GPU's sustained clock relative to its family's: the 500 W h100-sxm-96gb of
    # torchtitan's runs against the 700 W H100 SXM, both power-bound in GEMMs; dynamic power
    # grows ~ f³ (P ∝ f·V², V ∝ f), so the prior is (500/700)^(1/3) = 0.894.
    clock: dict[str, float] = field(default_factory=lambda: {"h100-sxm-96gb": 0.894})
    # Rate a framework's kernels reach relative to Megatron-Core with Transformer Engine (fused
    # norms, activations and attention): "TE" is the reference, "TORCH" PyTorch-native stacks.
    kernel_eff: dict[str, float] = field(default_factory=lambda: {"TE": 1.0, "TORCH": 0.9})
    fp8_eff: float = 0.85  # FP8 GEMM rate / (FP8 peak x eta): tensor-core efficiency of FP8
    # GEMM efficiency falls with the hidden size h (tile and wave quantization, NVIDIA's "Matrix
    # Multiplication Background" guide, Fig. 2-3: H100 BF16 GEMMs with k = n = 2048 reach ~85% of
    # the rate at 8192): the rate is scaled by h / (h + gemm_h0), relative to h = 8192.
    gemm_h0: float = 256.0
    # Causal attention's model FLOPs per second (forward + backward) / the GPU's GEMM rate, per
    # kernel family. On H100 (Shah et al. 2024, FlashAttention-3, Fig. 5-6, head dim 128):
    # FlashAttention-3 class (Transformer Engine's cuDNN attention) ~620 TFLOP/s forward, ~470
    # backward; FlashAttention-2 (PyTorch SDPA) ~350 and ~280. The backward does 2.5x the
    # forward's work (the model counts 2x), so fwd + bwd model FLOP/s are ~430 and ~250, against
    # a GEMM rate of ~0.62 x 989: 0.70 and 0.41. "A100": attention on an A100, whatever the
    # framework, as the A100 runs of the calibration data ran it: FlashAttention v1 (llm-foundry's
    # A100 tables are unchanged since 29 Jun 2023, before FlashAttention-2's release; the
    # Megatron A100 papers ran unfused attention), which reaches 25-40% of the A100's peak
    # (Dao 2023, FlashAttention-2, §1): 0.325 x 3/3.5 (model FLOPs of fwd + bwd) / 0.80 (A100
    # eta) = 0.35. FlashAttention-2's sm80 kernels reach 73% (§4.1), about twice that.
    attn_eff: dict[str, float] = field(
        default_factory=lambda: {"TE": 0.70, "TORCH": 0.41, "A100": 0.35}
    )
    mem_exposed: float = 0.5  # share of GEMM operand and logit memory traffic not hidden
    eps_tp: float = 0.2  # exposed share of tp traffic when overlapped with the GEMMs
    eps_cp: float = 0.2  # exposed share of the ring K/V exchange when overlapped
    eps_ep: float = 0.3  # exposed share of the expert all-to-all when overlapped
    # Coefficient of variation of the experts' token loads under dropless learned routing with
    # the auxiliary balancing loss (rates.py imbalance): what the Megatron MoE model zoo's
    # Qwen3-235B-A22B runs lose without --moe-router-force-load-balancing (yanring/Megatron-MoE-
    # ModelZoo @ e865051 best_practice/qwen3/readme.md, Long Context: 237 against 295 TFLOP/s at
    # 16K, 357 against 389 at 128K); scripts/fit_constants.py derives it from those pairs.
    moe_load_cv: float = 1.4
    omega: float = 0.8  # share of the overlappable compute that hides dp/FSDP traffic
    # Share of overlapped dp/FSDP traffic's time that the compute it hides behind loses: NCCL
    # runs one thread block per channel, each holding an SM, and its copies take memory
    # bandwidth (dp_timing.py tax_terms); the prior, a tenth, is a guess the fit replaces.
    overlap_tax: float = 0.1
    # Coefficient of variation of one GPU's step time (clocks, thermals, OS noise, network
    # contention): the step waits for the slowest GPU (rates.py straggle). The prior (1%) is a
    # guess the fit replaces: scaling series identify it (their loss grows with sqrt(2 ln n)).
    jitter: float = 0.01
    link_eff: float = 0.8  # achievable share of nominal link bandwidth (NCCL bus bandwidth)
    kappa0: float = 30e-6  # fixed cost per layer per micro-batch: launches, small kernels (s)
    alpha_intra: float = 3e-6  # latency per step of an in-node ring, or per message (s)
    alpha_inter: float = 8e-6  # latency per step of an inter-node ring, or per message (s)

    def family_eta(self, family: str) -> float:
        family = family if family in self.eta else SAME_DIE.get(family, family)
        return self.eta.get(family, min(self.eta.values()))

    def gpu_eta(self, name: str, family: str) -> float:
        """eta of a catalog GPU: its family's, at its own sustained clock."""
        return self.family_eta(family) * self.clock.get(name, 1.0)

    def kernels(self, family: str) -> float:
        return self.kernel_eff.get(family, 1.0)

    def attention(self, family: str, gpu_family: str = "") -> float:
        """Attention rate / GEMM rate of a kernel family's attention on a GPU family (a GPU
        family's own entry, A100, holds for every kernel family)."""
        if gpu_family in self.attn_eff:
            return self.attn_eff[gpu_family]
        return self.attn_eff.get(family, min(self.attn_eff.values()))


def constants_from(data: dict[str, Any], base: Constants | None = None) -> Constants:
    """The priors with a fitted.json document's "constants" applied (unknown keys ignored)."""
    base = base or Constants()
    known = asdict(base)
    fitted = {k: v for k, v in data.get("constants", {}).items() if k in known}
    for k, v in fitted.items():
        if isinstance(known[k], dict):
            fitted[k] = {**getattr(base, k), **v}
    return replace(base, **fitted)


@cache
def load_constants() -> Constants:
    """The constants every CostModel uses by default: fitted.json over the priors."""
    try:
        text = (Path(__file__).parent / "fitted.json").read_text(encoding="utf-8")
    except FileNotFoundError:
        return Constants()
    return constants_from(json.loads(text))
