"""Each source's conventions in words: how its published speed becomes tokens/s per GPU, and the
defaults assumed for what it does not state (printed by the fidelity benchmark, cited by the
loaders)."""

# How each source's published speed becomes tokens/s per GPU (the planner then applies its own
# FLOP convention to that throughput).
CONVERSIONS = {
    "narayanan2021": (
        "Table 1 prints hardware TFLOP/s per GPU by Eq. 3, 96·B·s·l·h²·(1 + s/6h + V/16lh), which "
        "counts the full-recompute forward (HFU). tokens/s/GPU = TFLOP/s / (96·l·h²·(1 + s/6h + "
        "V/16lh)) per token; our MFU ≈ ¾ of the printed % (the logit layer is not recomputed)."
    ),
    "korthikanti2022": (
        "tokens/s/GPU = global batch tokens / iteration time (Table 5) / GPUs; where only MFU is "
        "printed (2,240 GPUs), tokens/s/GPU = MFU × 312e12 / (72·l·h²·(1 + s/6h + V/12lh)), "
        "Korthikanti App. A: the same terms as ours for a GPT, no causal halving."
    ),
    "torchtitan": (
        "tokens/s per GPU as printed; no MFU published. Peak memory is max_memory_reserved "
        "(GiB, max over ranks), compared with the tenants plus the fragmentation allowance."
    ),
    "mosaicml": (
        "tokens/s as printed / GPUs. Their MFU is (6·N_total + 12·L·d·s)/token, no causal "
        "halving (llm-foundry collect_results.py), equal to ours for MPT's tied embeddings."
    ),
    "kempnerforge": (
        "tok/s as printed / GPUs; where only MFU is printed, tokens/s/GPU = MFU × 989e12 / "
        "(6·N_total + 12·L·h·s), N_total with both embeddings (KempnerForge 2026-04-05 report); "
        "our MFU drops the input embedding: 6% (7B) / 4% (13B) / 1.3% (70B) lower. Memory is "
        "max_memory_allocated (GiB), compared with the tenants without any reserve."
    ),
    "mcore_r080": (
        "weak scaling prints model TFLOP/s per GPU by Megatron's num_floating_point_operations "
        "(megatron/training/training.py @ 937571c: 12·L·h²·((1 + g/a + s/h)·q/h + f/h·k·(3/2 if "
        "swiglu) + V/2Lh) per token, no causal halving): tokens/s/GPU = TFLOP/s / that; the two "
        "strong-scaling endpoints print MFU only: tokens/s/GPU = MFU × 989e12 / that."
    ),
    "nemo2407": (
        "tokens/s per GPU as printed (the model TFLOP/s column is the FP8 run's model FLOPs "
        "against nothing: NeMo prints no MFU)."
    ),
    "dgxc2502": (
        "tokens/s per GPU as printed (global batch tokens / last step time / GPUs). The recipes' "
        "MFU is against the FP8 peak (1,979) for FP8 runs, and Grok-1's halves causal attention: "
        "neither matters for tokens/s."
    ),
    "moezoo": (
        "tokens/s/GPU = global batch tokens / step time / GPUs (the table's Per GPU TF column "
        "uses the zoo's own FLOP count)."
    ),
    "llmfoundry": (
        "tokens/s as printed / GPUs (llm-foundry's MFU: (6·N_total + 12·L·d·s) per token, no "
        "causal halving)."
    ),
    "nanotron": (
        "MFU only: tokens/s/GPU = MFU × 989e12 / our model FLOPs per token (nanotron's get_flops "
        "counts the LM head, no causal halving). Peak memory read as max_memory_reserved (GiB)."
    ),
}

_MCORE_DEFAULTS = [
    "BF16 (the README's MFU is TFLOP/s / 989, the BF16 peak)",
    "GPT shape: ffn 4h, multi-head attention, GELU, tied embeddings (Megatron's defaults)",
    "H100 SXM 80 GB, 8 per node",
    "micro-batch 1; no recomputation (none is named)",
    "1F1B without interleaving (Megatron's default; no virtual stages are named)",
    "distributed optimizer (ZeRO-1), sequence parallelism with tp > 1; tp, dp and pp overlaps "
    "on as the README states (--tp-comm-overlap --overlap-grad-reduce --overlap-param-gather)",
    "strong scaling: tp 8, pp 6 (the 177B row of the weak-scaling table; the plotted GPU "
    "counts are multiples of 48), dp = GPUs/48",
]
DEFAULTS = {
    "narayanan2021": [
        "micro-batch 1 (Table 1 does not print it)",
        "full recomputation (Eq. 3 counts the recompute forward)",
        "ZeRO 0, no sequence parallelism, no interleaving (Megatron-LM, April 2021)",
        "no tp overlap; dp all-reduce after the backward (Megatron-LM's local DDP, 2021); "
        "unfused attention (before FlashAttention)",
        "fp16/bf16 mixed precision scored as BF16 (same peak on A100)",
    ],
    "korthikanti2022": [
        "vocabulary 51,200 (GPT-3's, padded; not transcribed)",
        "ZeRO 0 (no distributed optimizer); no tp overlap; unfused attention (Megatron-LM, 2022)",
        "2,240-GPU runs: ffn 4h, MHA, micro-batch 1, one sequence per GPU (as in Table 3)",
    ],
    "torchtitan": [
        "seq_len 8192 where not printed (train_config default at the benchmark commits)",
        "pipeline runs: 'local batch' split into pp micro-batches (pipeline_parallel_microbatches "
        "defaults to the stage count); interleaved 1F1B = 2 chunks per stage (torchtitan @ 9dec370 "
        "parallelisms/pipelining_utils.py generate_split_points: 2 stages per rank when no "
        "split points are given)",
        "ZeRO 3 (FSDP2), sequence parallelism whenever tp > 1; tp overlap in the async-TP runs "
        "(the 405B 3D/4D runs name AsyncTP)",
        "Float8 runs: FP8 matmul rate, BF16 state bytes (Float8Linear keeps no FP8 weights)",
        "FSDP2 with pp > 1 scored as ZeRO-1: torchtitan sets reshard_after_forward=False under "
        "PP and syncs gradients on the last micro-batch, so weights and gradients stay unsharded "
        "through the step (one all-gather, one reduce-scatter per step)",
        "the Dec 2024 runs (torchtitan 9dec370) repeat K,V to the query heads before SDPA "
        "(models/llama/model.py repeat_kv): context parallelism all-gathers them at that width",
    ],
    "mosaicml": [
        "GELU MLP (expansion 4) and tied embeddings (MPT)",
        "ZeRO 3 (FULL_SHARD), full recomputation as printed; scored with the LLM_FOUNDRY profile "
        "(Composer, PyTorch FSDP1, mixed_precision PURE, flash-attn's fused cross-entropy)",
    ],
    "kempnerforge": [
        "ZeRO 3 (FSDP2), full activation checkpointing, sequence parallelism with tp > 1",
        "micro-batch x grad-accum and seq_len 4096 from KempnerForge's mfu_bench.sh (NOTES.md)",
        "KempnerForge memory recipe (framework KEMPNERFORGE); tp collectives exposed",
    ],
    "mcore_r080": _MCORE_DEFAULTS,
    "nemo2407": [
        "DGX H100 (80 GB, 8 per node); FP8 hybrid recipe of Transformer Engine",
        "no recomputation, sequence parallelism and tp overlap with tp > 1, distributed optimizer "
        "with overlapped grad reduce / param gather (NeMo's performance recipes, e.g. "
        "nemo/collections/llm/recipes/llama3_70b.py @ 8e3d65d: tp_comm_overlap=True); gradients "
        "reduced in bf16 (distributed_fused_adam grad_sync_dtype bf16, as the DGX Cloud recipes)",
        "GPT-3 shapes: vocabulary 51,200 (GPT-2 BPE padded), GELU, tied embeddings; Nemotron: "
        "squared-ReLU MLP (not gated), untied; Llama: SwiGLU, untied",
    ],
    "dgxc2502": [
        "recipes' YAML (NVIDIA/dgxc-benchmarking @ 0b71cfd): no activation checkpointing, "
        "sequence parallelism with tp > 1, distributed optimizer with overlap_grad_sync and "
        "overlap_param_sync, grad_sync_dtype bf16; ub_tp_comm_overlap on for GPT-3, Llama 3.1 405B, Nemotron-4 15B, "
        "off for Grok-1 (and Llama 3.1 8B, tp 1)",
        "Grok-1: expert capacity factor 1.0 with padding (balanced experts), expert tensor "
        "parallel = tp (Megatron's default)",
    ],
    "moezoo": [
        "yanring/Megatron-MoE-ModelZoo @ e865051 (model_configs/benchmarking/Qwen3-235B-A22B.yaml):"
        " distributed optimizer with overlapped grad reduce / param gather, sequence parallelism,"
        " no --tp-comm-overlap, force-balanced routing; FSDP runs as ZeRO-3",
        "recompute 'norm, act' (layer norms and the MoE activation only) scored as none in time",
        "1F1B A2A overlap only in the run marked '+1f1b overlap'; DeepEP runs dispatch each "
        "token once per remote node",
    ],
    "llmfoundry": [
        "MPT shapes of scripts/train/yamls/pretrain/mpt-*.yaml: GELU MLP (expansion 4), tied "
        "embeddings, MHA, flash attention; the learned positional embedding is not counted",
        "FSDP FULL_SHARD as ZeRO 3 over every GPU; mixed_precision as printed: PURE (the A100 "
        "40GB table) reduces gradients in bf16, DEFAULT (the A100 80GB table: fp32 gathers, "
        "bf16 reduction at the time) scored with bf16 gathers and an fp32 reduction; "
        "activation checkpointing as printed (FULL or NONE)",
        "micro-batches that do not divide the per-GPU batch scored as whole micro-batches",
    ],
    "nanotron": [
        "nanotron scripts/scaling_benchmarks.py shapes: Llama (SwiGLU, RMSNorm), MHA, vocabulary "
        "131,072, seq_len 4096, embeddings tied below an MLP width of 10,000",
        "H100 SXM 80 GB, 8 per node; no recomputation; tp_mode REDUCE_SCATTER (sequence "
        "parallelism) with tp > 1; 1F1B",
    ],
}

# head_dim where it differs from hidden/heads.
