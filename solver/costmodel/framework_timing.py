"""What each framework overlaps by default, and whose kernels it runs: one table, with sources.

The time model reads it through `ctx.framework`; a request's `training.*_comm_overlap` switch
overrides an entry. Defaults are what the framework's own published performance recipes run
(they are what a plan exported for that framework should launch), with the code default noted
where it differs.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshplan.solver.schema import Framework, TrainingSpec


@dataclass(frozen=True)
class FrameworkTiming:
    kernels: str  # kernel family: "TE" (fused, Transformer Engine) or "TORCH" (PyTorch-native)
    tp: bool  # tp collectives overlapped with the GEMMs
    dp_stages: frozenset[int]  # ZeRO stages whose dp/FSDP traffic is overlapped with compute
    cp: bool  # ring K/V exchange overlapped with the attention blocks
    ep: bool  # expert all-to-all overlapped with another micro-batch's compute
    pp: bool  # pipeline sends overlapped with compute (only their latency is exposed)
    source: str
    ep_dedup: bool = False  # tokens dispatched once per remote node (DeepEP), not per expert
    cp_ring: bool = True  # cp exchanges K,V hop by hop (each hop hides behind a block), else
    # all-gathers them after the first block (only that block hides the exchange)


ALL_STAGES = frozenset({0, 1, 2, 3})

FRAMEWORK_TIMING: dict[Framework, FrameworkTiming] = {
    Framework.MEGATRON: FrameworkTiming(
        kernels="TE",
        tp=True,
        dp_stages=ALL_STAGES,
        cp=True,
        ep=False,
        pp=True,
        source=(
            "NVIDIA/Megatron-LM @ d98e8a6: --tp-comm-overlap (ModelParallelConfig.tp_comm_overlap, "
            "code default False), --overlap-grad-reduce / --overlap-param-gather (arguments.py, "
            "default False) are on in Megatron-Core's own scaling runs (README @ 937571c) and "
            "NeMo's performance recipes (llm/recipes/llama3_70b.py @ 8e3d65d); "
            "--no-overlap-p2p-communication is store_false (p2p overlap on); --cp-comm-type "
            "p2p (ring, Transformer Engine overlaps each hop with a block); "
            "overlap_moe_expert_parallel_comm default False"
        ),
    ),
    Framework.TORCHTITAN: FrameworkTiming(
        kernels="TORCH",
        tp=False,
        dp_stages=ALL_STAGES,
        cp=True,
        ep=False,
        pp=False,
        source=(
            "pytorch/torchtitan @ b5bcd76: CompileConfig.enable_async_tensor_parallel = False "
            "(config/configs.py); FSDP2 fully_shard prefetches the next all-gather "
            "(distributed/fsdp.py); context parallelism all-gathers the K,V shards after the "
            "first sub-SDPA (@ 9dec370 config_manager.py: context_parallel_rotate_method "
            "'allgather', PyTorch's default)"
        ),
        cp_ring=False,
    ),
    Framework.DEEPSPEED: FrameworkTiming(
        kernels="TORCH",
        tp=False,
        dp_stages=frozenset({3}),
        cp=False,
        ep=False,
        pp=False,
        source=(
            "microsoft/DeepSpeed @ 38327e0: zero/config.py overlap_comm defaults to "
            "stage == 3; Megatron-DeepSpeed tp has no comm overlap"
        ),
    ),
    Framework.KEMPNERFORGE: FrameworkTiming(
        kernels="TORCH",
        tp=False,
        dp_stages=ALL_STAGES,
        cp=False,
        ep=False,
        pp=False,
        source=(
            "KempnerInstitute/KempnerForge @ 5666d0d: DTensor SequenceParallel tp without async "
            "TP (distributed/tensor_parallel.py; seed 001: 'TP fires all-gather/reduce-scatter "
            "on every matmul'); FSDP2 fully_shard (distributed/parallel.py)"
        ),
    ),
    Framework.GENERIC: FrameworkTiming(
        kernels="TE",
        tp=False,
        dp_stages=ALL_STAGES,
        cp=True,
        ep=False,
        pp=False,
        source="textbook (seeds 003, 004): fused kernels, tp traffic exposed, dp overlapped",
    ),
}


@dataclass(frozen=True)
class Overlaps:
    """The overlaps one request runs with: the profile's defaults, overridden by the request."""

    tp: bool
    dp_stages: frozenset[int]
    cp: bool
    ep: bool
    pp: bool
    ep_dedup: bool = False
    cp_ring: bool = True


def overlaps_for(training: TrainingSpec) -> Overlaps:
    f = FRAMEWORK_TIMING[training.framework]

    def pick(asked: bool | None, default: bool) -> bool:
        return default if asked is None else asked

    dp = f.dp_stages
    if training.dp_comm_overlap is not None:
        dp = ALL_STAGES if training.dp_comm_overlap else frozenset()
    return Overlaps(
        tp=pick(training.tp_comm_overlap, f.tp),
        dp_stages=dp,
        cp=pick(training.cp_comm_overlap, f.cp),
        ep=pick(training.ep_comm_overlap, f.ep),
        pp=f.pp,
        ep_dedup=pick(training.ep_dispatch_dedup, f.ep_dedup),
        cp_ring=f.cp_ring,
    )
