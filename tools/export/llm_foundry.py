"""A plan as an llm-foundry training YAML (scripts/train/train.py; keys of llmfoundry/utils/
config_utils.py TrainConfig and llmfoundry/models/mpt/configuration_mpt.py MPTConfig at
mosaicml/llm-foundry @ 8c8dd48, the commit solver/profiles/ cites).

The model is an MPT (`mpt_causal_lm`) of the plan's shape; the layout is Composer's PyTorch FSDP1
(`fsdp_config`): ZeRO-3 / 2 / 0 as sharding_strategy FULL_SHARD / SHARD_GRAD_OP / NO_SHARD over
every GPU, mixed_precision PURE, full recomputation as activation_checkpointing; the batch as
global_train_batch_size and device_train_microbatch_size (llm-foundry derives the gradient
accumulation from the GPU count). The memory recipe's knobs that llm-foundry names are written
too: the loss (model.loss_fn), FP8 through Transformer Engine linears (precision amp_fp8, MPT
fc_type te).
"""

from __future__ import annotations

from meshplan.solver.arch import Arch
from meshplan.solver.profiles import Profile
from meshplan.solver.schema import LossKernel, ParallelConfig, Precision, Recompute, TrainingSpec
from meshplan.tools.export.attention import rotary
from meshplan.tools.export.yaml_text import yaml_text

SHARDING = {0: "NO_SHARD", 2: "SHARD_GRAD_OP", 3: "FULL_SHARD"}
# training.hybrid_shard: FSDP1 shards inside the node, replicas across nodes (pytorch
# torch/distributed/fsdp/api.py ShardingStrategy HYBRID_SHARD, _HYBRID_SHARD_ZERO2)
HYBRID = {2: "_HYBRID_SHARD_ZERO2", 3: "HYBRID_SHARD"}


def sharding(c: ParallelConfig, t: TrainingSpec) -> str:
    """fsdp_config.sharding_strategy for the plan's ZeRO stage (NO_SHARD has nothing to shard
    inside a node)."""
    if t.hybrid_shard and c.zero_stage in HYBRID:
        return HYBRID[c.zero_stage]
    return SHARDING[c.zero_stage]


# model.loss_fn (llmfoundry/models/mpt/modeling_mpt.py ComposerMPTCausalLM)
LOSS_FN = {LossKernel.FUSED_BF16: "fused_crossentropy", LossKernel.EAGER_FP32: "torch_crossentropy"}


def limits(c: ParallelConfig, A: Arch, t: TrainingSpec) -> list[str]:
    """What llm-foundry's YAML cannot say about this plan or model."""
    out = []
    if A.is_moe:
        out.append("llm-foundry's MoE is MegaBlocks' (ffn_type mb_moe), which this export omits")
    if c.zero_stage not in SHARDING:
        out.append(f"FSDP1 has no ZeRO-{c.zero_stage} (sharding_strategy: {SHARDING})")
    kernel = t.loss_kernel or LossKernel.FUSED_BF16
    if kernel not in LOSS_FN:
        out.append(f"llm-foundry's loss_fn is {' or '.join(LOSS_FN.values())}, not {kernel.value}")
    return out


def _model(A: Arch, t: TrainingSpec) -> dict[str, object]:
    attn: dict[str, object] = {"attn_impl": "flash" if t.fused_attention else "torch"}
    if A.kv != A.a:
        attn |= {"attn_type": "grouped_query_attention", "kv_n_heads": A.kv}
    model: dict[str, object] = {
        "name": "mpt_causal_lm",
        "init_device": "meta",
        "d_model": A.h,
        "n_heads": A.a,
        "n_layers": A.L,
        "max_seq_len": t.seq_len,
        "vocab_size": A.V,
        "tie_word_embeddings": A.tied,
        "ffn_config": {"ffn_type": "mptglu" if A.gated else "mptmlp", "ffn_hidden_size": A.f},
    }
    if A.hd:
        model["head_dim"] = A.hd
    att = A.attention
    if rotary(A):  # MPT's rotary embedding in place of learned positions
        attn |= {"rope": True, "rope_impl": "dail"}
        if att is not None and att.rope_theta is not None:
            attn["rope_theta"] = int(att.rope_theta)  # configuration_mpt.py: rope_theta (int)
        model["learned_pos_emb"] = False
    if att is not None and att.qk_norm:  # layers/attention.py: qk_gn norms each head (head_dim)
        attn["qk_gn"] = True
    if A.gated:  # a Llama-style block: RMSNorm, no biases (MPT's own knobs)
        model |= {
            "norm_type": "rmsnorm",
            "no_bias": True,
            "ffn_config": {**model["ffn_config"], "ffn_act_fn": {"name": "silu"}},  # type: ignore[dict-item]
        }
    model["attn_config"] = attn
    model["loss_fn"] = LOSS_FN[t.loss_kernel or LossKernel.FUSED_BF16]
    if t.precision is Precision.FP8:
        model["fc_type"] = {"name": "te"}  # Transformer Engine linears run under amp_fp8
    return model


def llm_foundry(c: ParallelConfig, A: Arch, t: TrainingSpec, seqs: int, prof: Profile) -> str:
    """The plan as llm-foundry's training YAML (ValueError for what it cannot express)."""
    bad = limits(c, A, t)
    if bad:
        raise ValueError("llm_foundry cannot express this plan: " + "; ".join(bad))
    doc: dict[str, object] = {
        "variables": {"data_local": "./my-copy-c4", "data_remote": None},
        "max_seq_len": t.seq_len,
        "run_name": "meshplan",
        "model": _model(A, t),
        "tokenizer": {
            "name": "EleutherAI/gpt-neox-20b",
            "kwargs": {"model_max_length": t.seq_len},
        },
        "train_loader": {
            "name": "text",
            "dataset": {
                "local": "${variables.data_local}",
                "remote": "${variables.data_remote}",
                "split": "train",
                "shuffle": True,
                "max_seq_len": t.seq_len,
            },
            "drop_last": True,
            "num_workers": 8,
        },
        "scheduler": {"name": "cosine_with_warmup", "t_warmup": "100ba", "alpha_f": 0.1},
        "optimizer": {
            "name": "decoupled_adamw",
            "lr": 3.0e-4,
            "betas": [0.9, 0.95],
            "eps": 1.0e-8,
            "weight_decay": 0.0,
        },
        "max_duration": "1000ba",
        "eval_interval": 1,
        "global_train_batch_size": seqs,
        "device_train_microbatch_size": c.micro_batch_size,
        "device_eval_batch_size": c.micro_batch_size,
        "precision": "amp_fp8" if t.precision is Precision.FP8 else "amp_bf16",
        "fsdp_config": {
            "sharding_strategy": sharding(c, t),
            "mixed_precision": "PURE",
            "activation_checkpointing": c.recompute is Recompute.FULL,
            "activation_checkpointing_reentrant": False,
            "activation_cpu_offload": False,
            "limit_all_gathers": True,
        },
    }
    header = [
        f"meshplan plan: dp={c.dp} (FSDP1 {sharding(c, t)}); micro_batch_size="
        f"{c.micro_batch_size} x {c.num_microbatches} micro-batches; recompute "
        f"{c.recompute.value}; {t.precision.value}; global batch {seqs} sequences x "
        f"{t.seq_len} tokens",
        f"llm-foundry training YAML ({prof.title}): composer scripts/train/train.py this.yaml",
    ]
    return yaml_text(header, doc)
