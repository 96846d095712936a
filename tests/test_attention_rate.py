"""The attention kernel's rate by GPU generation: FlashAttention-2-class kernels on Ampere for
every framework (Dao 2023 §4.1: 73% of the A100's peak, 34% of the H100's), while on Hopper
Transformer Engine's attention and PyTorch's SDPA flash backend differ."""

from __future__ import annotations

from meshplan.solver.arch import resolve_model
from meshplan.solver.costmodel import CostModel
from meshplan.solver.costmodel.constants import Constants
from meshplan.solver.hardware import resolve_cluster
from meshplan.solver.schema import ClusterSpec, Framework, ModelSpec, SearchSpec, TrainingSpec


def _rate(gpu: str, framework: Framework, k: Constants) -> float:
    A = resolve_model(ModelSpec(preset="llama3-8b"))
    H = resolve_cluster(ClusterSpec(gpu=gpu, num_gpus=8))
    R = CostModel(A, H, TrainingSpec(seq_len=4096, framework=framework), SearchSpec(), k).rates
    return R.rate_attn / (H.peak_bf16 * k.gpu_eta(H.name, H.family))


def test_every_framework_runs_ampere_attention_at_the_a100_rate() -> None:
    k = Constants(attn_eff={"TE": 0.7, "TORCH": 0.4, "A100": 0.65})
    for fw in (Framework.MEGATRON, Framework.TORCHTITAN, Framework.LLM_FOUNDRY):
        assert _rate("a100-sxm-80gb", fw, k) == 0.65
    assert _rate("h100-sxm-80gb", Framework.MEGATRON, k) == 0.7
    assert _rate("h100-sxm-80gb", Framework.TORCHTITAN, k) == 0.4
    # the prior: the same FA2 kernels run nearer the GEMMs' rate on A100 than on H100
    p = Constants()
    assert p.attention("TORCH", "A100") == p.attention("TE", "A100")
    assert p.attention("TORCH", "A100") > 1.5 * p.attention("TORCH", "H100")
