"""Framework profiles: the layouts each training framework can run, what it keeps in memory, and
how a plan is exported for it. One frozen object per framework (`PROFILES`); every rule and
number names the code it was read from (`SOURCES`, at the commit given there).

The search treats a profile's rules as constraints (`space.violations` is the specification, the
generators produce exactly the points that obey it), so a plan is always one the framework can
express; `tools/export/emit.py` then writes it in the framework's own format.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from meshplan.solver.profiles.base import (
    ACT_BYTES,
    ALL_STAGES,
    LOGIT_BYTES,
    SOURCES,
    FrameworkTiming,
    Profile,
    Recipe,
)
from meshplan.solver.profiles.megatron import DEEPSPEED, MEGATRON
from meshplan.solver.profiles.pytorch import KEMPNERFORGE, LLM_FOUNDRY, NANOTRON, TORCHTITAN
from meshplan.solver.schema import Framework, Precision

__all__ = [
    "ACT_BYTES",
    "ALL_STAGES",
    "DEEPSPEED",
    "GENERIC",
    "KEMPNERFORGE",
    "LLM_FOUNDRY",
    "LOGIT_BYTES",
    "MEGATRON",
    "NANOTRON",
    "PROFILES",
    "SOURCES",
    "TORCHTITAN",
    "FrameworkTiming",
    "Profile",
    "Recipe",
    "check_request",
    "profile_of",
]

# The textbook profile: every layout the planner's axes can describe, the recipes of "Why one GPU is
# not enough" (DeepSeek-V3 book, ch. 11).
GENERIC = Profile(
    framework=Framework.GENERIC,
    title="no framework: the textbook recipe",
    zero_stages=frozenset({0, 1, 2, 3}),
    zero_stages_pipelined=frozenset({0, 1, 2, 3}),
    zero_names=MappingProxyType({z: f"ZeRO-{z}" for z in range(4)}),
    interleaving=True,
    context_parallel=True,
    expert_parallel=True,
    fp8=True,
    fp8_with_tp=True,
    moe_with_pp=True,
    tied_with_pp=True,
    bf16=Recipe(2, 2, 12),
    fp8_recipe=Recipe(1, 2, 6),
    export="megatron",
    timing=FrameworkTiming(
        kernels="TE",
        dp_stages=ALL_STAGES,
        cp=True,
        source=(
            'textbook ("Designing a pretraining system", "The scaling ceiling"): fused kernels, '
            "tp traffic exposed, dp overlapped"
        ),
    ),
)

PROFILES: Mapping[Framework, Profile] = MappingProxyType(
    {
        p.framework: p
        for p in (GENERIC, MEGATRON, TORCHTITAN, DEEPSPEED, KEMPNERFORGE, LLM_FOUNDRY, NANOTRON)
    }
)


def profile_of(framework: Framework) -> Profile:
    return PROFILES[framework]


def check_request(framework: Framework, precision: Precision, gpu: str, gpu_fp8: bool) -> None:
    """Precision a GPU or a framework cannot train in is bad input (ValueError naming the field)."""
    if precision is not Precision.FP8:
        return
    if not gpu_fp8:
        raise ValueError(
            f"training.precision FP8 needs FP8 tensor cores, which {gpu} does not have "
            "(Hopper and later: h100, h200, b200; or mi300x)"
        )
    prof = PROFILES[framework]
    if not prof.fp8:
        raise ValueError(
            f"training.precision FP8 is not available with training.framework "
            f"{framework.value}: {prof.title} has no FP8 training recipe"
        )
