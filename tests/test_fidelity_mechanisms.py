"""Mechanisms read from the frameworks' code: the attention kernel's rate by GPU generation (on
an A100 one rate for every framework, the FlashAttention generation its runs used, while on
Hopper Transformer Engine's attention and PyTorch's SDPA flash backend differ); Composer's FSDP1
reducing gradients in bf16 (mixed_precision PURE)."""

from __future__ import annotations

from meshplan.solver.arch import resolve_model
from meshplan.solver.costmodel import CostModel
from meshplan.solver.costmodel.constants import Constants
from meshplan.solver.costmodel.dp_timing import _dp_volume
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
    # the prior: one A100 value for every family, not Hopper's fused attention (TE)
    p = Constants()
    assert p.attention("TORCH", "A100") == p.attention("TE", "A100") < p.attention("TE", "H100")


def test_composer_pure_reduces_gradients_in_bf16_over_fp32_shards() -> None:
    A = resolve_model(ModelSpec(preset="llama3-8b"))
    H = resolve_cluster(ClusterSpec(gpu="a100-sxm-80gb", num_gpus=16))

    def ctx(fw: Framework, bf16: bool):  # noqa: ANN202
        t = TrainingSpec(seq_len=2048, framework=fw, grad_reduce_in_bf16=bf16)
        return CostModel(A, H, t, SearchSpec()).ctx

    pure, default = ctx(Framework.LLM_FOUNDRY, True), ctx(Framework.LLM_FOUNDRY, False)
    # both keep fp32 gradient shards (the memory side) ...
    assert pure.gb == default.gb == 4
    # ... but FULL_SHARD's reduce-scatter per micro-batch moves bf16 under PURE
    assert _dp_volume(pure, 3) == (0.0, 2 * 2 + 2)
    assert _dp_volume(default, 3) == (0.0, 2 * 2 + 4)
    # Megatron's --grad-reduce-in-bf16 keeps and reduces bf16 gradients: the same 2 bytes
    meg = ctx(Framework.MEGATRON, True)
    assert meg.gb == meg.rb == 2


def test_the_calibration_reads_pure_from_each_llm_foundry_table() -> None:
    from meshplan.tools.calibration.fsdp import load_fsdp

    runs = [r for r in load_fsdp() if r.source == "llmfoundry"]
    pure = {r.cluster.gpu for r in runs if r.training.grad_reduce_in_bf16}
    default = {r.cluster.gpu for r in runs if not r.training.grad_reduce_in_bf16}
    assert "a100-sxm-40gb" in pure and "a100-sxm-80gb" in default


def test_torchtitans_eager_blocks_pay_their_unfused_pointwise_ops_and_compile_fuses_them() -> None:
    from meshplan.solver.costmodel import Point
    from meshplan.solver.schema import ParallelConfig

    A = resolve_model(ModelSpec(preset="llama3-8b"))
    H = resolve_cluster(ClusterSpec(gpu="h100-sxm-80gb", num_gpus=8))
    p = Point.from_config(
        ParallelConfig(tp=1, pp=1, dp=8, micro_batch_size=1, num_microbatches=4, zero_stage=3)
    )

    def model(fw: Framework, compiled: bool | None) -> CostModel:
        t = TrainingSpec(seq_len=8192, framework=fw, compiled=compiled)
        return CostModel(A, H, t, SearchSpec())

    eager, compiled = model(Framework.TORCHTITAN, None), model(Framework.TORCHTITAN, True)
    e, c = eager.rates.elementwise(p.lay), compiled.rates.elementwise(p.lay)
    # fp32 RMSNorm, complex RoPE and unfused SwiGLU: about 3.7x the fused passes' bytes
    assert 3.0 < e / c < 4.5
    # llm-foundry's MPT (one LayerNorm kernel, one GELU) keeps the fused count, as do compiled
    # torchtitan blocks
    assert model(Framework.LLM_FOUNDRY, None).rates.elementwise(p.lay) == c
    # the whole step: eager is slower, by less than torchtitan's published 16% (8B, 8 H100)
    ratio = compiled.performance(p).tokens_per_s / eager.performance(p).tokens_per_s
    assert 1.03 < ratio < 1.16


def test_nanotrons_zero1_all_reduces_fp32_gradients_after_the_step_unhidden() -> None:
    A = resolve_model(ModelSpec(preset="llama3-8b"))
    H = resolve_cluster(ClusterSpec(gpu="h100-sxm-80gb", num_gpus=64))

    def model(fw: Framework) -> CostModel:
        return CostModel(A, H, TrainingSpec(seq_len=4096, framework=fw), SearchSpec())

    nano = model(Framework.NANOTRON)
    # the fp32 gradients all-reduced (2 x 4 bytes) and the fp32 parameters all-gathered (4),
    # once per step; ZeRO-0 keeps the DDP bucket all-reduce of the fp32 accumulator
    assert _dp_volume(nano.ctx, 1) == (2 * 4 + 4, 0.0)
    assert _dp_volume(nano.ctx, 0) == (2 * 4, 0.0)
    # not DDP-wrapped: nothing overlaps ZeRO-1's collectives; Megatron's distributed optimizer
    # still reduce-scatters and gathers (4 + 2) behind compute
    assert 1 not in nano.rates.ov.dp_stages and 0 in nano.rates.ov.dp_stages
    meg = model(Framework.MEGATRON)
    assert _dp_volume(meg.ctx, 1) == (4 + 2, 0.0) and 1 in meg.rates.ov.dp_stages


def test_torchao_float8_tp_all_gathers_in_fp8_and_reduce_scatters_in_bf16() -> None:
    from meshplan.solver.costmodel import Point
    from meshplan.solver.schema import ParallelConfig, Precision

    A = resolve_model(ModelSpec(preset="llama3-70b"))
    H = resolve_cluster(ClusterSpec(gpu="h100-sxm-80gb", num_gpus=64))
    p = Point.from_config(
        ParallelConfig(
            tp=8,
            pp=1,
            dp=8,
            micro_batch_size=1,
            num_microbatches=8,
            zero_stage=3,
            sequence_parallel=True,
        )
    )

    def model(fw: Framework, prec: Precision) -> CostModel:
        return CostModel(
            A, H, TrainingSpec(seq_len=8192, framework=fw, precision=prec), SearchSpec()
        )

    fp8, bf16 = (
        model(Framework.TORCHTITAN, Precision.FP8),
        model(Framework.TORCHTITAN, Precision.BF16),
    )
    # two all-gathers of 1 byte, two reduce-scatters of 2, against four of 2
    assert fp8.rates.tp_raw(p.lay) == bf16.rates.tp_raw(p.lay) * (1 + 1 + 2 + 2) / 8
    # Megatron with Transformer Engine keeps its BF16 volume under FP8
    te8, te16 = model(Framework.MEGATRON, Precision.FP8), model(Framework.MEGATRON, Precision.BF16)
    assert te8.rates.tp_raw(p.lay) == te16.rates.tp_raw(p.lay)
