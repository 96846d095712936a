"""The fixed instances every benchmark runs, so that runs on different days are comparable.

Change an instance and earlier results stop being comparable: add new ones at the end, with a
new name, and say so in RESULTS.md.

- `SEED_CASES`: worked examples as plan requests (tests/test_seeds.py): the lesson "The scaling
  ladder" (`ladder-*`) and the KempnerForge scaling guide's runs (`kempnerforge-*-*xh200`).
- `CATALOG_CASES`: 55 catalog model x cluster pairs from 8 to 131,072 GPUs, dense and MoE, free
  and pinned (tp, pp, ep, ZeRO stage, recomputation), a few GPU counts that are not powers of two.
- `LATENCY_SUITE` = worked examples + catalog; `QUICK_LATENCY`: the few small ones `--quick` runs.
- `throughput_requests(n)`: a fleet-planning sweep (models x GPUs x GPU counts x sequence lengths),
  `n` distinct requests in a fixed order.
- `distinct_requests(n)`: the distinct mix (10 models x 4 GPUs x 12 counts x 5 sequence
  lengths, shuffled): requests that do not repeat.
- `SCALING_MODEL` / `SCALING_COUNTS` / `SCALING_SPACE`: the scaling benchmark's axes.

Requests carry no time limit here; the benchmarks add `options.time_limit_s` (their
`--time-limit`), so a slow formulation shows up as timeouts rather than a hang.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from meshplan.solver.schema import PINNABLE_AXES, PlanRequest

H100 = "h100-sxm-80gb"
MI = 1 << 20  # tokens


@dataclass(frozen=True)
class Instance:
    """One named plan request of the suite (everything but `options`)."""

    name: str
    model: str  # catalog preset
    gpu: str  # catalog GPU
    num_gpus: int
    seq_len: int = 8192
    training: dict[str, Any] = field(default_factory=dict)  # more TrainingSpec fields
    cluster: dict[str, Any] = field(default_factory=dict)  # more ClusterSpec fields
    search: dict[str, Any] = field(default_factory=dict)  # pins and SearchSpec fields
    kind: str = "catalog"  # "worked" (a worked example of a source) or "catalog"

    @property
    def pins(self) -> str:
        """The pinned axes as `tp=8,zero_stage=3` ('-' when free)."""
        shown = [f"{k}={self.search[k]}" for k in PINNABLE if k in self.search]
        return ",".join(shown) or "-"

    def as_dict(self, **options: Any) -> dict[str, Any]:
        """The request in the contract's JSON, with `options` added."""
        return {
            "model": {"preset": self.model},
            "cluster": {"gpu": self.gpu, "num_gpus": self.num_gpus, **self.cluster},
            "training": {"seq_len": self.seq_len, **self.training},
            "search": dict(self.search),
            "options": options,
        }

    def request(self, **options: Any) -> PlanRequest:
        """The validated PlanRequest, with `options` (e.g. time_limit_s=10)."""
        return PlanRequest.model_validate(self.as_dict(**options))


def _seed(name: str, model: str, gpu: str, n: int, seq: int, **kw: Any) -> Instance:
    return Instance(name, model, gpu, n, seq, kind="worked", **kw)


# Worked examples: "The scaling ladder" (its rungs and recommender cases) and the KempnerForge
# scaling guide's runs on 4-GPU H200 nodes.
SEED_CASES: list[Instance] = [
    _seed("ladder-7b-8", "llama2-7b", H100, 8, 4096),
    _seed("ladder-70b-8-infeasible", "llama3-70b", H100, 8, 8192),
    _seed(
        "ladder-70b-256", "llama3-70b", H100, 256, 8192, training={"critical_batch_tokens": 2 * MI}
    ),
    _seed("ladder-405b-2048", "llama3-405b", H100, 2048, 8192),
    _seed("ladder-405b-64-infeasible", "llama3-405b", H100, 64, 8192),
    _seed(
        "ladder-7b-4096-dpcap",
        "llama2-7b",
        H100,
        4096,
        8192,
        training={"critical_batch_tokens": 2 * MI},
    ),
    _seed(
        "kempnerforge-7b-4xh200",
        "kempnerforge-7b",
        "h200-141gb",
        4,
        4096,
        cluster={"gpus_per_node": 4},
        training={"framework": "KEMPNERFORGE"},
    ),
    _seed(
        "kempnerforge-13b-32xh200",
        "kempnerforge-13b",
        "h200-141gb",
        32,
        4096,
        cluster={"gpus_per_node": 4},
        training={"framework": "KEMPNERFORGE"},
    ),
    _seed(
        "kempnerforge-70b-32xh200",
        "kempnerforge-70b",
        "h200-141gb",
        32,
        4096,
        cluster={"gpus_per_node": 4},
        training={"framework": "KEMPNERFORGE"},
    ),
]


def _c(model: str, gpu: str, n: int, seq: int = 8192, **kw: Any) -> Instance:
    pins = "".join(f"-{k[:2]}{v}" for k, v in kw.get("search", {}).items())
    fp8 = "-fp8" if kw.get("training", {}).get("precision") == "FP8" else ""
    return Instance(
        f"{model}-{gpu.split('-')[0]}-{n}-s{seq // 1024}k{fp8}{pins}", model, gpu, n, seq, **kw
    )


A80, A40, H200, B200, MI300, H800 = (
    "a100-sxm-80gb",
    "a100-sxm-40gb",
    "h200-141gb",
    "b200-192gb",
    "mi300x-192gb",
    "h800-sxm-80gb",
)

# 55 catalog pairs, ordered by GPU count. `critical_batch_tokens` is raised on the largest
# clusters (a 4 Mi-token batch cannot feed 100k GPUs), as a planner of such a run would.
CATALOG_CASES: list[Instance] = [
    # 8 GPUs
    _c("llama3-8b", H100, 8),
    _c("llama3-8b", H100, 8, search={"tp": 2}),
    _c("mixtral-8x7b", H200, 8, 4096),
    _c("llama2-13b", A40, 8, 4096, search={"zero_stage": 3}),
    _c(
        "kempnerforge-7b", H200, 8, 4096, cluster={"gpus_per_node": 4}, search={"recompute": "FULL"}
    ),
    # 16-96 GPUs
    _c("llama2-13b", A80, 16, 4096),
    _c("mixtral-8x7b", H100, 16, 4096, search={"ep": 8}),
    _c("llama3-8b", B200, 32),
    _c("kempnerforge-13b", H200, 32, 4096, cluster={"gpus_per_node": 4}, search={"tp": 4}),
    _c("llama2-7b", MI300, 32, 4096),
    _c("llama3-70b", H100, 64, 4096, training={"precision": "FP8"}),
    _c("llama2-70b", A80, 64, 4096, search={"pp": 4}),
    _c("mixtral-8x22b", H100, 64, 4096),
    _c("llama3-70b", H100, 96),
    # 128-512 GPUs
    _c("llama3-70b", H200, 128, search={"zero_stage": 1, "recompute": "SELECTIVE"}),
    _c("mixtral-8x22b", H200, 128, 4096, search={"ep": 8}),
    _c("llama3-70b", H100, 256, 32768),
    _c("gpt3-175b", A80, 256, 2048),
    _c("qwen3-235b-a22b", H100, 256, 4096),
    _c("llama3-405b", H100, 512, search={"tp": 8}),
    _c("gpt3-175b", H100, 512, 2048, search={"pp": 8}),
    _c("deepseek-v3", H100, 512, 4096),
    _c("llama3-70b", B200, 512, search={"zero_stage": 3}),
    # 1,024-8,192 GPUs
    _c("llama3-405b", H100, 1024),
    _c("llama3-70b", H100, 1024),
    _c("deepseek-v3", H800, 1024, 4096, search={"ep": 16}),
    _c("qwen3-235b-a22b", H200, 1024, 4096, search={"recompute": "FULL"}),
    _c("llama3-8b", H100, 1024),
    _c("llama3-70b", H100, 1536),
    _c("mixtral-8x22b", H100, 1536, 4096),
    _c("llama3-405b", H100, 2048, search={"tp": 8, "pp": 16}),
    _c("gpt3-175b", H100, 2048, 2048),
    _c("qwen3-235b-a22b", H100, 2048, 4096),
    _c("llama3-405b", H100, 4096, training={"critical_batch_tokens": 16 * MI}),
    _c("deepseek-v3", H100, 4096, 4096, search={"zero_stage": 1}),
    _c("llama3-70b", H200, 4096, search={"recompute": "SELECTIVE"}),
    _c("llama3-405b", H100, 6144, training={"critical_batch_tokens": 16 * MI}),
    _c("llama3-70b", A80, 6144, search={"tp": 8}),
    _c("llama3-405b", H100, 8192, training={"critical_batch_tokens": 16 * MI}),
    _c("deepseek-v3", H800, 8192, 4096, training={"critical_batch_tokens": 16 * MI}),
    _c("mixtral-8x7b", H100, 8192, 4096),
    _c("llama3-8b", H100, 8192),
    # 16,384-131,072 GPUs
    _c("llama3-405b", H100, 16384, training={"critical_batch_tokens": 16 * MI}),
    _c("deepseek-v3", B200, 16384, 4096, training={"critical_batch_tokens": 32 * MI}),
    _c("gpt3-175b", A80, 16384, 2048, search={"pp": 8}),
    _c("llama3-405b", H100, 32768, training={"critical_batch_tokens": 32 * MI}, search={"tp": 8}),
    _c("qwen3-235b-a22b", H100, 32768, 4096, training={"critical_batch_tokens": 32 * MI}),
    _c(
        "llama3-70b",
        B200,
        32768,
        training={"critical_batch_tokens": 32 * MI},
        search={"zero_stage": 3, "recompute": "FULL"},
    ),
    _c("llama3-405b", B200, 65536, training={"critical_batch_tokens": 64 * MI}),
    _c("deepseek-v3", H100, 65536, 4096, training={"critical_batch_tokens": 64 * MI}),
    _c("mixtral-8x22b", H200, 65536, 4096, search={"tp": 4}),
    _c("llama3-405b", H100, 131072, training={"critical_batch_tokens": 64 * MI}),
    _c("deepseek-v3", H100, 131072, 4096, training={"critical_batch_tokens": 64 * MI}),
    _c(
        "llama3-405b",
        B200,
        131072,
        training={"critical_batch_tokens": 64 * MI},
        search={"pp": 16, "zero_stage": 1},
    ),
    _c("gpt3-175b", MI300, 131072, 2048),
]

LATENCY_SUITE: list[Instance] = SEED_CASES + CATALOG_CASES

# --quick: small instances only (the smoke test runs these), chosen to be fast to solve today.
QUICK_LATENCY: list[str] = [
    "ladder-70b-8-infeasible",
    "kempnerforge-7b-4xh200",
    "llama3-8b-h100-8-s8k-tp2",
    "llama2-13b-a100-8-s4k-ze3",
]


def latency_suite(quick: bool = False) -> list[Instance]:
    """The latency benchmark's instances (the quick subset with `quick`)."""
    if not quick:
        return list(LATENCY_SUITE)
    by_name = {i.name: i for i in LATENCY_SUITE}
    return [by_name[n] for n in QUICK_LATENCY]


# --- throughput: a fleet-planning sweep ------------------------------------------------------

SWEEP_MODELS = [
    "llama2-7b",
    "llama3-8b",
    "llama2-13b",
    "kempnerforge-13b",
    "llama3-70b",
    "gpt3-175b",
    "llama3-405b",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "qwen3-235b-a22b",
]
SWEEP_GPUS = [H100, A80, H200, B200, MI300]
SWEEP_COUNTS = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
SWEEP_SEQ = [4096, 8192]


def throughput_requests(n: int, quick: bool = False, **options: Any) -> list[PlanRequest]:
    """`n` distinct sweep requests (10 models x 5 GPUs x 10 counts x 2 sequence lengths = 1,000).

    The order interleaves sizes (counts vary fastest) so any prefix mixes small and large
    clusters. With `quick`, the pinned variant of each (tp=1, pp=1, ZeRO-3, full
    recomputation) on counts up to 64, whose model is small, so the smoke test stays short.
    """
    grid = itertools.product(SWEEP_SEQ, SWEEP_GPUS, SWEEP_MODELS, SWEEP_COUNTS)
    out: list[PlanRequest] = []
    for seq, gpu, model, count in grid:
        if quick and count > 64:
            continue
        search = {"tp": 1, "pp": 1, "zero_stage": 3, "recompute": "FULL"} if quick else {}
        out.append(Instance("sweep", model, gpu, count, seq, search=search).request(**options))
        if len(out) == n:
            return out
    raise ValueError(f"the sweep holds {len(out)} requests, fewer than {n}")


# --- the distinct mix: requests that do not repeat ------------------------------------------

# the sweep's models with DeepSeek-V3 in place of the KempnerForge 13B
DISTINCT_MODELS = [m for m in SWEEP_MODELS if m != "kempnerforge-13b"] + ["deepseek-v3"]
DISTINCT_GPUS = [A80, H100, H200, B200]
DISTINCT_COUNTS = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
DISTINCT_SEQ = [2048, 4096, 8192, 16384, 32768]
DISTINCT_SEED = 20261128  # the shuffle's seed: the same order on every run


def distinct_requests(n: int | None = None, **options: Any) -> list[PlanRequest]:
    """The distinct mix: 10 catalog models x 4 GPU types x 12 counts (8 ... 16,384) x 5
    sequence lengths (2K ... 32K) = 2,400 requests, no request twice, shuffled with a fixed seed
    (so any prefix mixes dense and MoE, small and large clusters); the first `n` of them."""
    import random

    grid = list(itertools.product(DISTINCT_MODELS, DISTINCT_GPUS, DISTINCT_COUNTS, DISTINCT_SEQ))
    random.Random(DISTINCT_SEED).shuffle(grid)
    if n is not None and n > len(grid):
        raise ValueError(f"the distinct mix holds {len(grid)} requests, fewer than {n}")
    return [
        Instance("distinct", model, gpu, count, seq).request(**options)
        for model, gpu, count, seq in grid[:n]
    ]


# --- scaling ---------------------------------------------------------------------------------

SCALING_MODEL = "llama3-70b"  # dense, GQA, 80 layers: every axis has several legal values
SCALING_COUNTS = [8 << k for k in range(15)]  # 8 ... 131,072
SCALING_QUICK_COUNTS = [8, 16]
SCALING_SPACE_GPUS = 1024
SCALING_SPACE_QUICK_GPUS = 16

# The search-space ladder: which axes are free at each step (the rest are pinned to the
# all-free plan's values). Each step frees more; the last frees everything.
_LADDER = (  # each step frees the axes named, on top of the steps before it
    ("all pinned", ()),
    ("recompute", ("recompute",)),
    ("+zero_stage", ("zero_stage",)),
    ("+micro-batch", ("micro_batch_size", "num_microbatches")),
    ("+pp,dp", ("pp", "dp")),
    ("+virtual_stages", ("virtual_stages",)),
    ("+tp", ("tp",)),
)
SCALING_SPACE: list[tuple[str, tuple[str, ...]]] = [
    (name, tuple(a for _, more in _LADDER[: i + 1] for a in more))
    for i, (name, _) in enumerate(_LADDER)
] + [("all free", ("*",))]  # cp and ep too
PINNABLE = PINNABLE_AXES
