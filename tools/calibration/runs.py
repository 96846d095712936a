"""A published training run as the request the planner would score, and what every loader of
the vendored calibration files shares: the source groups, the framework profile each source ran,
the categories, and the FLOP formulas sources print their speed in (tools/calibration/loaders.py
loads the files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from meshplan.solver.arch import Arch
from meshplan.solver.schema import (
    ClusterSpec,
    EvaluateRequest,
    Framework,
    ModelSpec,
    ParallelConfig,
    Precision,
    Recompute,
    SearchSpec,
    TrainingSpec,
)

DATA = Path(__file__).resolve().parent / "published"
DEFAULT_PUBLISHED = DATA / "published_runs.json"
DEFAULT_MEGATRON = DATA / "megatron_h100_runs.json"
DEFAULT_FSDP = DATA / "fsdp_runs.json"

# Source groups: leave-one-source-out holds out one group at a time.
SOURCES = (
    "narayanan2021",
    "korthikanti2022",
    "torchtitan",
    "mosaicml",
    "kempnerforge",
    "mcore_r080",
    "nemo2407",
    "dgxc2502",
    "moezoo",
    "llmfoundry",
    "nanotron",
)
# Sources printed by one document are held out together (leave-one-source-out folds): the
# mosaicml runs and fsdp_runs.json's llm-foundry layouts are both tables of mosaicml/llm-foundry
# scripts/train/benchmarking/README.md (at 061f2c7 and 8c8dd48).
FOLDS = {"llmfoundry": "mosaicml"}
CATEGORIES = ("BF16-dense", "FP8-dense", "MoE")
Category = Literal["BF16-dense", "FP8-dense", "MoE"]
Knob = Literal["micro_batch_size", "virtual_stages", "recompute"]

# The framework profile each source ran (MosaicML's benchmarks are llm-foundry's: Composer with
# PyTorch FSDP1).
FRAMEWORKS = {
    "narayanan2021": Framework.MEGATRON,
    "korthikanti2022": Framework.MEGATRON,
    "torchtitan": Framework.TORCHTITAN,
    "mosaicml": Framework.LLM_FOUNDRY,
    "kempnerforge": Framework.KEMPNERFORGE,
    "mcore_r080": Framework.MEGATRON,
    "nemo2407": Framework.MEGATRON,
    "dgxc2502": Framework.MEGATRON,
    "moezoo": Framework.MEGATRON,
    "llmfoundry": Framework.LLM_FOUNDRY,
    "nanotron": Framework.NANOTRON,
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CalibrationRun(_Strict):
    """One published run at its published configuration, with what was measured."""

    id: str = Field(description="Run identifier (the record's id).")
    source: str = Field(description="Source group (one of SOURCES): the unit left out in LOSO.")
    category: Category = Field(description="BF16-dense, FP8-dense or MoE.")
    citation: str = Field(description="Paper and table, or repository, path and commit.")
    model: ModelSpec = Field(description="The transformer as published.")
    cluster: ClusterSpec = Field(description="Catalog GPU, GPU count and node size.")
    training: TrainingSpec = Field(
        description="Sequence length, global batch, precision, framework profile and overlaps."
    )
    config: ParallelConfig = Field(description="The published layout (defaults filled in).")
    memory_precision: Precision = Field(
        description="Precision recipe whose state bytes the run keeps (Float8 compute keeps BF16)."
    )
    tokens_per_s_per_gpu: float = Field(description="Published throughput per GPU (tokens/s).")
    published: str = Field(description="What the source printed for speed, verbatim figures.")
    source_mfu: float | None = Field(
        default=None, description="The source's own MFU or HFU figure (its convention), if any."
    )
    memory_gib: float | None = Field(default=None, description="Published peak memory (GiB).")
    memory_basis: Literal["allocated", "reserved"] | None = Field(
        default=None,
        description="allocated: tenants only; reserved: tenants plus fragmentation allowance.",
    )
    memory_stage: Literal["fuller", "first"] = Field(
        default="fuller",
        description=(
            "Whose peak the source prints: the fuller pipeline stage's (the max over ranks), or "
            "the first stage's (rank 0's alone: nanotron's benchmark CSV)."
        ),
    )
    assumptions: list[str] = Field(default_factory=list, description="Defaults this run used.")
    unstated: tuple[Knob, ...] = Field(
        default=(),
        description=(
            "Knobs the source does not publish (micro_batch_size, virtual_stages, recompute): "
            "the run is scored at the best setting of these its framework can run "
            "(tools/calibration/knobs.py), the others kept as published."
        ),
    )
    kv_repeated: bool = Field(
        default=False,
        description=(
            "The framework version repeats K,V to the query heads before attention (torchtitan "
            "@ 9dec370 models/llama/model.py repeat_kv), so context parallelism gathers a·d "
            "per token, not kv·d (the memory recipe's kv_repeated)."
        ),
    )
    recompute_stops_early: bool | None = Field(
        default=None,
        description=(
            "Whether the run's PyTorch stops full recomputation at the block's last saved "
            "tensor (non-reentrant checkpoint, torch 2.1 on: the profile recipe's "
            "recompute_stops_early); None: the profile's."
        ),
    )
    even_layers: bool = Field(
        default=False,
        description=(
            "The framework version of the run splits layers evenly over pp (and pp·v): no "
            "uneven pipeline layout (Megatron-LM before --pipeline-model-parallel-layout)."
        ),
    )

    @property
    def framework(self) -> Framework:
        return self.training.framework

    @property
    def search(self) -> SearchSpec:
        return SearchSpec()

    def request(self) -> EvaluateRequest:
        """The Evaluate request that scores this run with the planner."""
        return EvaluateRequest(
            model=self.model,
            cluster=self.cluster,
            training=self.training,
            config=self.config,
            search=self.search,
        )


def fold_of(source: str) -> str:
    """The leave-one-source-out fold a source is held out in (its own, or FOLDS')."""
    return FOLDS.get(source, source)


def micro_batch(stated: int | None, used: list[str], unstated: list[Knob]) -> int:
    """The published micro-batch size, or 1 where the source does not print it (then tuned:
    tools/calibration/knobs.py), recorded in `used` and `unstated`."""
    if stated is not None:
        return stated
    used.append("micro-batch 1")
    unstated.append("micro_batch_size")
    return 1


def _category(moe: bool, precision: Precision) -> Category:
    if moe:
        return "MoE"
    return "FP8-dense" if precision is Precision.FP8 else "BF16-dense"


def _recompute(text: str | None, default: Recompute) -> Recompute:
    if not text:
        return default
    t = text.lower()
    if t.startswith("selective: norm") or t.startswith("none"):
        return Recompute.NONE  # the zoo's "norm, act": no attention or GEMM is recomputed
    if t.startswith("selective"):
        return Recompute.SELECTIVE
    if t.startswith("full"):
        return Recompute.FULL
    raise ValueError(f"unknown recompute mode {text!r}")


def _gpu(text: str) -> str:
    t = text.upper()
    if "A100" in t:
        return "a100-sxm-80gb"
    if "H200" in t:
        return "h200-141gb"
    if "H100" in t:
        return "h100-sxm-96gb" if "96" in t else "h100-sxm-80gb"
    raise ValueError(f"no catalog GPU for {text!r}")


def _gpt_flops_hfu(A: Arch, s: int) -> float:
    # Narayanan et al. 2021 Eq. 3, per token: 96·l·h²·(1 + s/6h + V/16lh)
    return 96 * A.L * A.h**2 * (1 + s / (6 * A.h) + A.V / (16 * A.L * A.h))


def _gpt_flops_mfu(A: Arch, s: int) -> float:
    # Korthikanti et al. 2022 App. A, per token: 72·l·h²·(1 + s/6h + V/12lh)
    return 72 * A.L * A.h**2 * (1 + s / (6 * A.h) + A.V / (12 * A.L * A.h))


def megatron_flops_per_token(A: Arch, s: int) -> float:
    """Megatron-LM's num_floating_point_operations per token (training.py @ 937571c)."""
    q = A.a * A.head_dim / A.h  # query projection / hidden
    routed = A.top_k if A.is_moe else 1
    ffn = A.fe if A.is_moe else A.f
    gated = 1.5 if A.gated else 1.0
    per = (1 + A.kv / A.a + s / A.h) * q + ffn / A.h * routed * gated + A.V / (2 * A.L * A.h)
    return 12 * A.L * A.h**2 * per
