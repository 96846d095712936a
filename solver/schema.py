"""Requests: the contract's field names (DESIGN.md, "The contract"), validated at construction.

Every count is a plain int; 0 (or None) in a pin means "free". Units are in each field's description.
"""

# No `from __future__ import annotations`: pydantic would evaluate every field's annotation
# string when the class is made (typing.ForwardRef compiles each one).
import math
from enum import Enum
from functools import cache
from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Precision(str, Enum):
    """Training precision; what it keeps per parameter is the framework profile's recipe."""

    BF16 = "BF16"
    FP8 = "FP8"


class Recompute(str, Enum):
    """Activation recomputation (Korthikanti et al. 2022)."""

    NONE = "NONE"
    SELECTIVE = "SELECTIVE"
    FULL = "FULL"


class Framework(str, Enum):
    """The training framework a plan is for: its rules, memory recipe, efficiency and export."""

    GENERIC = "GENERIC"  # the textbook recipe ("Why one GPU is not enough"): 16 B/param BF16, 9 FP8
    KEMPNERFORGE = "KEMPNERFORGE"  # FSDP2 + DTensor TP: rejects MoE with pp>1, FP8 with tp>1
    MEGATRON = "MEGATRON"  # Megatron-Core with Transformer Engine
    TORCHTITAN = "TORCHTITAN"  # FSDP2, TP, PP, CP, EP on PyTorch DTensor
    DEEPSPEED = "DEEPSPEED"  # ZeRO 0-3 with Megatron-style TP/PP
    LLM_FOUNDRY = "LLM_FOUNDRY"  # Composer with PyTorch FSDP1 (its sharding strategies)
    NANOTRON = "NANOTRON"  # DP + TP + PP with ZeRO-0/1


# The profiles whose ZeRO-3 is PyTorch FSDP (solver/profiles/ Recipe.fsdp)
FSDP_FRAMEWORKS = (Framework.TORCHTITAN, Framework.LLM_FOUNDRY, Framework.KEMPNERFORGE)
# The profiles whose ZeRO-3 is FSDP2 (training.fp8_all_gather)
FSDP2_FRAMEWORKS = (Framework.TORCHTITAN, Framework.KEMPNERFORGE)
# The profiles whose layers are eager PyTorch modules torch.compile can compile (training.compiled)
COMPILE_FRAMEWORKS = (Framework.TORCHTITAN, Framework.LLM_FOUNDRY, Framework.KEMPNERFORGE)
# The profiles that can shard inside a node and replicate across nodes (training.hybrid_shard):
# FSDP1's HYBRID_SHARD, FSDP2's HSDP (dp_replicate x dp_shard), and the textbook
HYBRID_FRAMEWORKS = (*FSDP_FRAMEWORKS, Framework.GENERIC)


class LossKernel(str, Enum):
    """How the loss holds the logits (bytes per logit element: solver/profiles/ LOSS_BYTES)."""

    EAGER_FP32 = "EAGER_FP32"  # F.cross_entropy(logits.float()): bf16 + fp32 + fp32 grad
    INPLACE_FP32 = "INPLACE_FP32"  # vocab-parallel fp32 softmax kept, gradient in place
    FUSED_BF16 = "FUSED_BF16"  # one kernel on bf16 logits: the logits and their bf16 gradient
    CHUNKED = "CHUNKED"  # output layer and loss fused over chunks of tokens: no whole logits
    COMPILED = "COMPILED"  # torch.compile'd F.cross_entropy(logits.float()): bf16 logits, grad
    COPY_FP32 = "COPY_FP32"  # vocab-parallel fp32 softmax on a copy of the fp32 logits


class StateDtype(str, Enum):
    """Data type of a per-parameter state (main gradients, master weights)."""

    FP32 = "FP32"
    BF16 = "BF16"


class FsdpVersion(str, Enum):
    """PyTorch FSDP implementation: FSDP1 flat parameters or FSDP2 per-parameter DTensors."""

    FSDP1 = "FSDP1"
    FSDP2 = "FSDP2"


class PipelineSchedule(str, Enum):
    """The pipeline schedule: 1F1B (interleaved over virtual stages) or DualPipeV."""

    ONE_F_ONE_B = "ONE_F_ONE_B"  # Narayanan et al. 2021 §2.2, interleaved when v > 1
    # Two stages per rank in a V, a forward and a backward chunk overlapped (DeepSeek-V3 §3.2.1;
    # deepseek-ai/DualPipe @ 3da1bbe dualpipe/dualpipev.py, torch ScheduleDualPipeV)
    DUALPIPE_V = "DUALPIPE_V"


# The profiles that run DualPipeV (torchtitan's pipeline_parallel_schedule "DualPipeV": PyTorch's
# torch.distributed.pipelining ScheduleDualPipeV)
DUALPIPE_FRAMEWORKS = (Framework.TORCHTITAN,)


class ActivationForm(str, Enum):
    """Which tensors a layer keeps for its backward (solver/costmodel/activations.py)."""

    FLAT_12H = "FLAT_12H"  # the textbook's 12·h elements per token per layer
    KORTHIKANTI = "KORTHIKANTI"  # Korthikanti et al. 2022 eq. 1
    MEGATRON = "MEGATRON"  # Megatron-Core with Transformer Engine: fused SwiGLU, sp shards all
    TORCHTITAN = "TORCHTITAN"  # eager PyTorch with DTensor TP: gathered linear inputs kept whole
    KEMPNERFORGE = "KEMPNERFORGE"  # eager PyTorch, the attention module checkpointed
    NANOTRON = "NANOTRON"  # eager PyTorch, sp keeps shards and re-gathers in backward


class _Strict(BaseModel):
    # defer_build: a model's validator is built on first use, so importing the schema is cheap
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False, defer_build=True)

    @model_validator(mode="before")
    @classmethod
    def _enum_case(cls, data: Any) -> Any:
        """Enum values in any case ("bf16", "Full"): matched case-insensitively, once for all."""
        fields = _enum_fields(cls)
        if not isinstance(data, dict) or not fields:
            return data
        out = dict(data)
        for name, values in fields.items():
            v = out.get(name)
            if isinstance(v, str) and v not in values.values():
                out[name] = values.get(v.casefold(), v)
        return out


@cache
def _enum_fields(model: type[BaseModel]) -> dict[str, dict[str, str]]:
    """Each enum field of a model (also Optional ones): its values keyed by their casefold."""
    out: dict[str, dict[str, str]] = {}
    for name, info in model.model_fields.items():
        for kind in (info.annotation, *get_args(info.annotation)):
            if isinstance(kind, type) and issubclass(kind, Enum):
                out[name] = {str(m.value).casefold(): m.value for m in kind}
    return out


def _finite(name: str, value: float | None) -> None:
    if value is not None and not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}")


class MoESpec(_Strict):
    """Mixture-of-experts block shape."""

    num_experts: int = Field(description="Routed experts per MoE layer (count, >= 1).", ge=1)
    top_k: int = Field(
        description="Routed experts each token activates (count, 1..num_experts).", ge=1
    )
    expert_ffn_hidden_size: int = Field(description="FFN width of one expert (elements).", ge=1)
    num_shared_experts: int = Field(
        default=0, description="Always-active shared experts of the same width (count).", ge=0
    )
    num_dense_layers: int = Field(
        default=0,
        description="Leading layers that use a dense FFN instead of MoE (count; DeepSeek-V3: 3).",
        ge=0,
    )

    @model_validator(mode="after")
    def _top_k_fits(self) -> "MoESpec":
        if self.top_k > self.num_experts:
            raise ValueError(
                f"top_k ({self.top_k}) must not exceed num_experts ({self.num_experts})"
            )
        return self


class LatentAttentionSpec(_Strict):
    """DeepSeek-V2/V3's multi-head latent attention (DeepSeek-AI 2024, arXiv:2405.04434 §2.1):
    the ranks and head widths its config.json gives. Exports carry it; the cost model counts and
    times the attention as MLA (solver/costmodel/mla.py)."""

    q_lora_rank: int = Field(
        description="Query compression rank (elements; 0: queries uncompressed, DeepSeek-V2-Lite).",
        ge=0,
        le=1 << 20,
    )
    kv_lora_rank: int = Field(
        description="Key/value compression rank (elements).", ge=1, le=1 << 20
    )
    qk_nope_head_dim: int = Field(
        description="Per-head query/key width without rotary embedding (elements).", ge=1, le=65536
    )
    qk_rope_head_dim: int = Field(
        description="Per-head width of the decoupled rotary part (elements).", ge=1, le=65536
    )
    v_head_dim: int = Field(description="Per-head value width (elements).", ge=1, le=65536)


MAX_PARAMETERS = 2**50  # ~1.1e15: 16 bytes each and their activations stay within int64


class ModelSpec(_Strict):
    """A transformer: a catalog `preset`, or the explicit shape (explicit fields override the preset)."""

    preset: str | None = Field(default=None, description="Catalog model name, e.g. llama3-70b.")
    num_layers: int | None = Field(default=None, description="Transformer layers (count).", ge=1)
    hidden_size: int | None = Field(
        default=None, description="Model width d_model (elements).", ge=1
    )
    num_attention_heads: int | None = Field(default=None, description="Query heads (count).", ge=1)
    num_kv_heads: int | None = Field(
        default=None, description="Key/value heads (count; < heads means GQA/MQA).", ge=1
    )
    head_dim: int | None = Field(
        default=None,
        description=(
            "Width of one attention head (elements; default hidden_size / num_attention_heads; "
            "Qwen3 and GPT-OSS use a different one, as their config.json head_dim says)."
        ),
        ge=1,
        le=65536,
    )
    ffn_hidden_size: int | None = Field(
        default=None, description="Dense FFN width (elements).", ge=1
    )
    vocab_size: int | None = Field(default=None, description="Vocabulary size (tokens).", ge=1)
    gated_mlp: bool | None = Field(
        default=None, description="SwiGLU-style gated MLP (3 matrices) rather than 2 (GPT)."
    )
    tie_embeddings: bool | None = Field(
        default=None, description="Input embedding and output layer share one matrix."
    )
    moe: MoESpec | None = Field(default=None, description="MoE shape; absent for a dense model.")
    # What an export needs besides the shape (the cost model reads none of them).
    rope_theta: float | None = Field(
        default=None,
        description=(
            "RoPE base theta (default: the preset's, else the framework's default); exports only."
        ),
        gt=0,
        le=1e15,
    )
    learned_positions: bool | None = Field(
        default=None,
        description="Learned absolute position embeddings instead of RoPE (GPT-2, GPT-3).",
    )
    qk_norm: bool | None = Field(
        default=None, description="RMSNorm on queries and keys per head (Qwen3); exports only."
    )
    latent_attention: LatentAttentionSpec | None = Field(
        default=None,
        description="Multi-head latent attention ranks (DeepSeek-V2/V3); exports only.",
    )

    @model_validator(mode="after")
    def _positions(self) -> "ModelSpec":
        if self.learned_positions and self.rope_theta is not None:
            raise ValueError(
                f"rope_theta ({self.rope_theta}) is for rotary positions, and learned_positions "
                "is true"
            )
        return self

    @model_validator(mode="after")
    def _heads(self) -> "ModelSpec":
        a, k = self.num_attention_heads, self.num_kv_heads
        if a is not None and k is not None and a % k != 0:
            raise ValueError(f"num_attention_heads ({a}) must be a multiple of num_kv_heads ({k})")
        h = self.hidden_size
        if a is not None and h is not None and self.head_dim is None and h % a != 0:
            raise ValueError(f"hidden_size ({h}) must be divisible by num_attention_heads ({a})")
        return self

    @model_validator(mode="after")
    def _representable(self) -> "ModelSpec":
        """A shape whose parameters' bytes pass the answer's 64-bit counts is bad input."""
        L, h = self.num_layers, self.hidden_size
        if L is None or h is None:
            return self
        per_layer = 4 * h * h + 3 * h * (self.ffn_hidden_size or 4 * h)
        if self.moe is not None:
            per_layer += self.moe.num_experts * 3 * h * self.moe.expert_ffn_hidden_size
        n = L * per_layer + 2 * (self.vocab_size or 0) * h
        if n > MAX_PARAMETERS:
            pair = f"num_layers ({L}) and hidden_size ({h})"
            if h >= L * L:  # the width dominates: named first, so the violation is about it
                pair = f"hidden_size ({h}) and num_layers ({L})"
            raise ValueError(
                f"{pair} make ~{n:.3g} parameters, more than the {MAX_PARAMETERS:.3g} whose "
                "bytes an answer's 64-bit counts hold"
            )
        return self


class ClusterSpec(_Strict):
    """The GPUs: a catalog `gpu` with optional overrides."""

    gpu: str = Field(default="h100-sxm-80gb", description="Catalog GPU name, e.g. h100-sxm-80gb.")
    num_gpus: int = Field(description="GPUs available for the job (count).", ge=1, le=1_048_576)
    gpus_per_node: int | None = Field(
        default=None,
        description="GPUs per node sharing the fast link (count; default: catalog).",
        ge=1,
        le=1024,
    )
    hbm_gib: float | None = Field(
        default=None, description="Override of HBM per GPU (GiB).", gt=0, le=65536
    )
    # Lower bounds keep the step time within the CP-SAT model's integers: 1 TFLOP/s is a CPU's
    # order, 0.1 GB/s is below 1 Gb Ethernet (IEEE 802.3ab 1000BASE-T: 125 MB/s).
    peak_bf16_tflops: float | None = Field(
        default=None, description="Override of dense BF16 peak per GPU (TFLOP/s).", ge=1, le=1e6
    )
    intra_node_gbps: float | None = Field(
        default=None,
        description="Override of in-node bandwidth per GPU (GB/s, one direction).",
        ge=0.1,
        le=1e6,
    )
    inter_node_gbps: float | None = Field(
        default=None,
        description="Override of inter-node bandwidth per GPU (GB/s, one direction).",
        ge=0.1,
        le=1e6,
    )

    @field_validator("hbm_gib", "peak_bf16_tflops", "intra_node_gbps", "inter_node_gbps")
    @classmethod
    def _is_finite(cls, v: float | None, info) -> float | None:  # noqa: ANN001
        _finite(info.field_name, v)
        return v


class TrainingSpec(_Strict):
    """What one optimizer step processes."""

    seq_len: int = Field(default=8192, description="Sequence length (tokens).", ge=1, le=16_777_216)
    global_batch_tokens: int = Field(
        default=0,
        description="Tokens per optimizer step; 0 lets the solver choose up to the critical batch.",
        ge=0,
        le=2**40,
    )
    critical_batch_tokens: int = Field(
        default=0,
        description=(
            "Critical batch (tokens) capping the global batch; 0: no cap for a fixed batch, and "
            "when the solver chooses the batch, the optimal batch of DeepSeek LLM's scaling law "
            "(Bi et al. 2024, arXiv:2401.02954) for the compute budget 6 x active parameters x "
            "train_tokens."
        ),
        ge=0,
        le=2**40,
    )
    train_tokens: int = Field(
        default=0,
        description=(
            "Tokens the whole training run sees (tokens), for the default critical batch; 0: 20 "
            "per active parameter (Hoffmann et al. 2022)."
        ),
        ge=0,
        le=2**60,
    )
    precision: Precision = Field(default=Precision.BF16, description="Precision recipe.")
    framework: Framework = Field(
        default=Framework.MEGATRON,
        description=(
            "Framework profile: the layouts it can run, its memory recipe, efficiency and "
            "export (default MEGATRON: Megatron-Core with Transformer Engine)."
        ),
    )
    grad_reduce_in_bf16: bool = Field(
        default=False,
        description=(
            "Keep and reduce the main gradients in bf16 (2 bytes per parameter) instead of fp32 "
            "(Megatron-LM --grad-reduce-in-bf16; NeMo's grad_sync_dtype bf16); under FSDP "
            "frameworks the reduction is timed in bf16 and the fp32 gradient shards stay "
            "(Composer's mixed_precision PURE)."
        ),
    )
    loss_kernel: LossKernel | None = Field(
        default=None,
        description=(
            "How the loss holds the logits: EAGER_FP32 (12 bytes per logit element), "
            "COPY_FP32 (8), INPLACE_FP32 (6), FUSED_BF16 (4), COMPILED (4), CHUNKED (no whole "
            "logits); None: the framework profile's."
        ),
    )
    grad_dtype: StateDtype | None = Field(
        default=None,
        description=(
            "Data type of the main gradients kept per parameter (FP32: 4 bytes, BF16: 2); None: "
            "the framework profile's."
        ),
    )
    master_dtype: StateDtype | None = Field(
        default=None,
        description=(
            "Data type of the optimizer's master weights (FP32: a 4-byte copy; BF16: the bf16 "
            "parameters are updated in place); None: the framework profile's."
        ),
    )
    fsdp_version: FsdpVersion | None = Field(
        default=None,
        description=(
            "PyTorch FSDP implementation under ZeRO-3 (FSDP1 flat parameters reduce-scatter a "
            "unit's gradient in the parameter dtype; FSDP2 copies it into an fp32 reduce "
            "buffer); None: the framework profile's (FSDP profiles only)."
        ),
    )
    activation_form: ActivationForm | None = Field(
        default=None,
        description=(
            "Which tensors each layer keeps for its backward (the framework's code); None: the "
            "framework profile's."
        ),
    )
    fp8_activations: bool | None = Field(
        default=None,
        description=(
            "FP8 training stores the linear layers' inputs in FP8, 1 byte an element "
            "(Transformer Engine); None: the framework profile's (needs precision FP8)."
        ),
    )
    compiled: bool | None = Field(
        default=None,
        description=(
            "The transformer blocks run under torch.compile (torchtitan's compile.enable, "
            "Composer's compile_config): the backward keeps only what it reads, and recomputes "
            "the norms' outputs and the gated MLP's activation and product; None: the framework "
            "profile's (KEMPNERFORGE compiled, as its train.compile_model default; the others "
            "eager); TORCHTITAN, LLM_FOUNDRY and KEMPNERFORGE."
        ),
    )
    fp8_all_gather: bool | None = Field(
        default=None,
        description=(
            "FSDP2 gathers the layers' Float8Linear weights in FP8, 1 byte an element (torchao's "
            "enable_fsdp_float8_all_gather); None: off; needs precision FP8 and an FSDP2 "
            "profile (TORCHTITAN, KEMPNERFORGE)."
        ),
    )
    hybrid_shard: bool = Field(
        default=False,
        description=(
            "Shard the ZeRO state over the data-parallel ranks inside one node and replicate it "
            "across nodes (PyTorch FSDP1 HYBRID_SHARD, or _HYBRID_SHARD_ZERO2 at ZeRO-2; FSDP2 "
            "HSDP: torchtitan's data_parallel_shard_degree x data_parallel_replicate_degree): "
            "gathers and reduce-scatters stay in the node, gradients are all-reduced across "
            "nodes; FSDP profiles and GENERIC."
        ),
    )
    fused_attention: bool = Field(
        default=True,
        description=(
            "Fused (FlashAttention-style) attention that keeps no s x s scores; false stores "
            "them, 5 bytes per head per token pair (Korthikanti et al. 2022, eq. 2)."
        ),
    )
    tp_comm_overlap: bool | None = Field(
        default=None,
        description=(
            "Overlap tp collectives with the GEMMs (Megatron --tp-comm-overlap, torchtitan async "
            "TP); None: the framework profile's default."
        ),
    )
    dp_comm_overlap: bool | None = Field(
        default=None,
        description=(
            "Overlap the dp/FSDP gradient reduce and parameter gather with compute (Megatron "
            "--overlap-grad-reduce --overlap-param-gather, FSDP prefetch); None: the profile's "
            "default."
        ),
    )
    cp_comm_overlap: bool | None = Field(
        default=None,
        description=(
            "Overlap the context-parallel ring K/V exchange with attention blocks; None: the "
            "profile's default."
        ),
    )
    ep_comm_overlap: bool | None = Field(
        default=None,
        description=(
            "Overlap the expert all-to-all with another micro-batch's compute (Megatron "
            "--overlap-moe-expert-parallel-comm); None: the profile's default."
        ),
    )
    ep_dispatch_dedup: bool | None = Field(
        default=None,
        description=(
            "Dispatch each token once per remote node and fan it out over NVLink (DeepEP, "
            "Megatron --moe-enable-deepep), instead of once per remote expert; None: the "
            "profile's default."
        ),
    )
    pipeline_schedule: PipelineSchedule | None = Field(
        default=None,
        description=(
            "The pipeline schedule: ONE_F_ONE_B (interleaved over virtual_stages), or DUALPIPE_V "
            "(two stages per rank in a V, virtual_stages 2 and at least 2*pp micro-batches; a "
            "third of 1F1B's bubble, the expert all-to-all and the stage sends hidden behind "
            "the overlapped chunks: DeepSeek-V3 report §3.2.1); None: ONE_F_ONE_B."
        ),
    )
    moe_router_force_balance: bool = Field(
        default=False,
        description=(
            "Routing forced to spread tokens evenly over the experts, as benchmarks do (Megatron "
            "--moe-router-force-load-balancing, or a capacity factor with padding); false: "
            "dropless learned routing, whose busiest expert-parallel rank sets the pace."
        ),
    )

    @model_validator(mode="after")
    def _batch(self) -> "TrainingSpec":
        if self.fsdp_version is not None and self.framework not in FSDP_FRAMEWORKS:
            raise ValueError(
                f"training.fsdp_version {self.fsdp_version.value} needs a PyTorch FSDP profile "
                f"({', '.join(f.value for f in FSDP_FRAMEWORKS)}), not training.framework "
                f"{self.framework.value}"
            )
        if self.hybrid_shard and self.framework not in HYBRID_FRAMEWORKS:
            raise ValueError(
                f"training.hybrid_shard needs a profile that shards inside a node "
                f"({', '.join(f.value for f in HYBRID_FRAMEWORKS)}), not training.framework "
                f"{self.framework.value}"
            )
        if self.fp8_all_gather and (
            self.precision is not Precision.FP8
            or self.framework not in FSDP2_FRAMEWORKS
            or self.fsdp_version is FsdpVersion.FSDP1
        ):
            raise ValueError(
                "training.fp8_all_gather needs precision FP8 and FSDP2 "
                f"({', '.join(f.value for f in FSDP2_FRAMEWORKS)}, not fsdp_version FSDP1)"
            )
        if self.compiled and self.framework not in COMPILE_FRAMEWORKS:
            raise ValueError(
                f"training.compiled needs a profile whose layers are eager PyTorch modules "
                f"({', '.join(f.value for f in COMPILE_FRAMEWORKS)}), not training.framework "
                f"{self.framework.value}"
            )
        dual = self.pipeline_schedule is PipelineSchedule.DUALPIPE_V
        if dual and self.framework not in DUALPIPE_FRAMEWORKS:
            raise ValueError(
                f"training.pipeline_schedule DUALPIPE_V needs a profile that runs it "
                f"({', '.join(f.value for f in DUALPIPE_FRAMEWORKS)}: PyTorch's ScheduleDualPipeV), "
                f"not training.framework {self.framework.value}"
            )
        if self.fp8_activations and self.precision is not Precision.FP8:
            raise ValueError("fp8_activations needs precision FP8 (BF16 keeps bf16 activations)")
        if self.grad_reduce_in_bf16 and self.grad_dtype is StateDtype.FP32:
            raise ValueError("grad_dtype FP32 contradicts grad_reduce_in_bf16 (bf16 gradients)")
        g = self.global_batch_tokens
        if g and g % self.seq_len != 0:
            raise ValueError(
                f"global_batch_tokens ({g}) must be a multiple of seq_len ({self.seq_len})"
            )
        if g and self.critical_batch_tokens and g > self.critical_batch_tokens:
            raise ValueError(
                f"global_batch_tokens ({g}) exceeds critical_batch_tokens "
                f"({self.critical_batch_tokens})"
            )
        return self


# The ParallelConfig fields a search can pin (SearchSpec has one of each), in display order.
PINNABLE_AXES = (
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "virtual_stages",
    "micro_batch_size",
    "num_microbatches",
    "zero_stage",
    "recompute",
)


class ParallelConfig(_Strict):
    """One complete layout: the degrees, the batch knobs and the memory knobs."""

    tp: int = Field(description="Tensor-parallel degree (GPUs).", ge=1)
    pp: int = Field(description="Pipeline-parallel stages (GPUs).", ge=1)
    dp: int = Field(description="Data-parallel / FSDP degree (replicas).", ge=1)
    cp: int = Field(default=1, description="Context-parallel degree (sequence shards).", ge=1)
    ep: int = Field(
        default=1,
        description="Expert-parallel degree (GPUs; carved out of tp*cp*dp with etp).",
        ge=1,
    )
    etp: int | None = Field(
        default=None,
        description=(
            "Expert tensor-parallel degree (GPUs; default tp): experts are split over ep*etp "
            "of the tp*cp*dp ranks, so etp=1 lets ep span the tp ranks (MoE parallel folding)."
        ),
        ge=1,
    )
    virtual_stages: int = Field(
        default=1, description="Interleaved model chunks per pipeline stage (count).", ge=1
    )
    micro_batch_size: int = Field(description="Sequences per micro-batch per replica.", ge=1)
    num_microbatches: int | None = Field(
        default=None,
        description=(
            "Micro-batches per step per replica (count); unset in an evaluate request: derived "
            "from the global batch."
        ),
        ge=1,
    )
    zero_stage: int = Field(
        default=1,
        description="ZeRO stage 0-3 over the dp*cp group (default 1, or 0 when dp*cp = 1).",
        ge=0,
        le=3,
    )
    recompute: Recompute = Field(default=Recompute.NONE, description="Activation recomputation.")
    sequence_parallel: bool = Field(
        default=True, description="Megatron sequence parallelism with tp (ignored when tp=1)."
    )

    @model_validator(mode="before")
    @classmethod
    def _etp_defaults_to_tp(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("etp") is None and "tp" in data:
            data = {**data, "etp": data["tp"]}
        if isinstance(data, dict) and data.get("zero_stage") is None:
            # ZeRO shards over dp*cp: one rank has nothing to shard (a rule, solver/rules.py)
            dp, cp = data.get("dp"), data.get("cp") or 1
            if isinstance(dp, int) and isinstance(cp, int):
                data = {**data, "zero_stage": 1 if dp * cp > 1 else 0}
        return data


# The usable memory (HBM - RESERVE_GIB) / (1 + FRAGMENTATION), from what measured runs leave free
# (python -m benchmarks memory): every published layout still fits with a fixed reserve of up to
# 1.14 GiB (the tightest, Megatron's Qwen3-235B zoo runs on 80 GB and llm-foundry's MPT-1B on
# A100-40GB), room for a CUDA context and NCCL's buffers (NCCL_BUFFSIZE 4 MiB per channel)
RESERVE_GIB = 1.0
# torchtitan's and nanotron's max_memory_reserved peaks are their tenants' (allocated) x 1.10:
# median |error| 4.9% and 3.3% (benchmarks/memory.py)
FRAGMENTATION = 0.10


class SearchSpec(_Strict):
    """Pins (0/None = free) and the constraints of the search."""

    tp: int = Field(default=0, description="Pin tp (0: free).", ge=0)
    pp: int = Field(default=0, description="Pin pp (0: free).", ge=0)
    dp: int = Field(default=0, description="Pin dp (0: free).", ge=0)
    cp: int = Field(default=0, description="Pin cp (0: free).", ge=0)
    ep: int = Field(default=0, description="Pin ep (0: free).", ge=0)
    etp: int = Field(default=0, description="Pin expert tensor parallelism (0: free).", ge=0)
    virtual_stages: int = Field(default=0, description="Pin virtual stages (0: free).", ge=0)
    micro_batch_size: int = Field(default=0, description="Pin micro-batch size (0: free).", ge=0)
    num_microbatches: int = Field(default=0, description="Pin micro-batch count (0: free).", ge=0)
    zero_stage: int | None = Field(
        default=None, description="Pin ZeRO stage (None: free).", ge=0, le=3
    )
    recompute: Recompute | None = Field(default=None, description="Pin recomputation (None: free).")
    sequence_parallel: bool | None = Field(
        default=None, description="Pin sequence parallelism (None: on whenever tp>1)."
    )
    allow_fewer_gpus: bool = Field(
        default=False, description="Allow plans that leave some of num_gpus idle."
    )
    memory_reserve_gib: float = Field(
        default=RESERVE_GIB,
        description=(
            "Fixed per-GPU reserve for the CUDA context and NCCL buffers (GiB; default 1: what "
            "the tightest published runs leave beside their peak)."
        ),
        ge=0,
        le=1024,
    )
    memory_fragmentation: float = Field(
        default=FRAGMENTATION,
        description=(
            "Caching-allocator fragmentation as a fraction of the allocated bytes (default 0.10: "
            "reserved over allocated peaks of published runs)."
        ),
        ge=0,
        le=1,
    )
    max_micro_batch_size: int = Field(
        default=16, description="Largest micro-batch size considered (sequences).", ge=1, le=4096
    )
    max_virtual_stages: int = Field(
        default=4, description="Largest interleaving degree considered (chunks).", ge=1, le=64
    )

    @field_validator("memory_reserve_gib", "memory_fragmentation")
    @classmethod
    def _is_finite(cls, v: float, info) -> float:  # noqa: ANN001
        _finite(info.field_name, v)
        return v


class Options(_Strict):
    """How the solve runs and what it returns."""

    top_k: int = Field(
        default=0, description="Distinct alternatives to return (count).", ge=0, le=32
    )
    time_limit_s: float = Field(
        default=10.0, description="Wall-clock cap on the solve (seconds).", gt=0, le=3600
    )
    num_workers: int = Field(default=1, description="CP-SAT search workers (threads).", ge=1, le=64)
    relative_gap: float = Field(
        default=0.0,
        description="Stop when within this relative gap of the bound (0: prove).",
        ge=0,
        le=1,
    )
    explain: bool = Field(
        default=True, description="For an infeasible request, search the smallest GPU count."
    )

    @field_validator("time_limit_s", "relative_gap")
    @classmethod
    def _is_finite(cls, v: float, info) -> float:  # noqa: ANN001
        _finite(info.field_name, v)
        return v


class PlanRequest(_Strict):
    """Plan(): choose the best layout for a model on a cluster."""

    model: ModelSpec = Field(description="The transformer.")
    cluster: ClusterSpec = Field(description="The GPUs.")
    training: TrainingSpec = Field(default_factory=TrainingSpec, description="The step.")
    search: SearchSpec = Field(default_factory=SearchSpec, description="Pins and constraints.")
    options: Options = Field(default_factory=Options, description="Solver options.")


class EvaluateRequest(_Strict):
    """Evaluate(): score one given layout."""

    model: ModelSpec = Field(description="The transformer.")
    cluster: ClusterSpec = Field(description="The GPUs.")
    training: TrainingSpec = Field(default_factory=TrainingSpec, description="The step.")
    config: ParallelConfig = Field(description="The layout to score.")
    search: SearchSpec = Field(
        default_factory=SearchSpec, description="Memory reserve to apply (pins are ignored)."
    )
