"""A plan as a nanotron YAML config (run_train.py --config-file; the sections and keys of
nanotron/config/config.py Config and models_config.py LlamaConfig at huggingface/nanotron @
2411b02, the commit solver/profiles/ cites, laid out as its examples/config_tiny_llama.yaml).

The layout is `parallelism` (dp, tp, pp, the 1F1B engine, tp_mode REDUCE_SCATTER when the plan
shards the sequence over tp, else ALL_REDUCE; recompute_layer for full recomputation) and
`optimizer.zero_stage`; the batch is `tokens` (micro_batch_size, batch_accumulation_per_replica);
the model a Llama (`LlamaConfig`). The memory recipe's gradient dtype is
`optimizer.accumulate_grad_in_fp32`.
"""

from __future__ import annotations

from meshplan.solver.arch import Arch
from meshplan.solver.profiles import Profile
from meshplan.solver.schema import ParallelConfig, Recompute, StateDtype, TrainingSpec
from meshplan.tools.export.yaml_text import yaml_text


def limits(c: ParallelConfig, A: Arch) -> list[str]:
    """What nanotron's Llama config cannot say about this plan or model."""
    out = []
    if not A.gated:
        out.append("nanotron's LlamaConfig has a gated (SwiGLU) MLP only")
    if A.is_moe:
        out.append("nanotron's LlamaConfig has no experts")
    if A.hd:
        out.append("nanotron's LlamaConfig has no head_dim (it is hidden_size / heads)")
    if c.zero_stage > 1:
        out.append(f"nanotron's optimizer.zero_stage is 0 or 1, not {c.zero_stage}")
    return out


def nanotron(c: ParallelConfig, A: Arch, t: TrainingSpec, seqs: int, prof: Profile) -> str:
    """The plan as nanotron's YAML config (ValueError for what it cannot express)."""
    bad = limits(c, A)
    if bad:
        raise ValueError("nanotron cannot express this plan: " + "; ".join(bad))
    sp = c.sequence_parallel and c.tp > 1
    doc: dict[str, object] = {
        "checkpoints": {
            "checkpoint_interval": 1000,
            "checkpoints_path": "checkpoints",
            "checkpoints_path_is_shared_file_system": False,
            "resume_checkpoint_path": None,
            "save_initial_state": False,
        },
        "data_stages": [
            {
                "data": {"dataset": None, "num_loading_workers": 1, "seed": 42},
                "name": "Stable Training Stage",
                "start_training_step": 1,
            }
        ],
        "general": {
            "benchmark_csv_path": None,
            "consumed_train_samples": None,
            "ignore_sanity_checks": True,
            "project": "meshplan",
            "run": "meshplan_%date_%jobid",
            "seed": 42,
            "step": None,
        },
        "lighteval": None,
        "logging": {
            "iteration_step_info_interval": 1,
            "log_level": "info",
            "log_level_replica": "info",
        },
        "model": {
            "ddp_bucket_cap_mb": 25,
            "dtype": "bfloat16",
            "init_method": {"std": 0.02},
            "make_vocab_size_divisible_by": 1,
            "model_config": {
                "bos_token_id": 1,
                "eos_token_id": 2,
                "hidden_act": "silu",
                "hidden_size": A.h,
                "initializer_range": 0.02,
                "intermediate_size": A.f,
                "is_llama_config": True,
                "max_position_embeddings": t.seq_len,
                "num_attention_heads": A.a,
                "num_hidden_layers": A.L,
                "num_key_value_heads": A.kv,
                "pad_token_id": None,
                "pretraining_tp": 1,
                "rms_norm_eps": 1.0e-5,
                "rope_scaling": None,
                **_rope_theta(A),
                "tie_word_embeddings": A.tied,
                "use_cache": True,
                "vocab_size": A.V,
            },
        },
        "optimizer": {
            "accumulate_grad_in_fp32": t.grad_dtype is not StateDtype.BF16,
            "clip_grad": 1.0,
            "learning_rate_scheduler": {
                "learning_rate": 3.0e-4,
                "lr_decay_starting_step": None,
                "lr_decay_steps": 1000,
                "lr_decay_style": "cosine",
                "lr_warmup_steps": 100,
                "lr_warmup_style": "linear",
                "min_decay_lr": 3.0e-5,
            },
            "optimizer_factory": {
                "adam_beta1": 0.9,
                "adam_beta2": 0.95,
                "adam_eps": 1.0e-8,
                "name": "adamW",
                "torch_adam_is_fused": True,
            },
            "weight_decay": 0.01,
            "zero_stage": c.zero_stage,
        },
        "parallelism": {
            "dp": c.dp,
            "expert_parallel_size": 1,
            "pp": c.pp,
            "pp_engine": "1f1b",
            "tp": c.tp,
            # async tp communication needs the reduce_scatter mode (parallelism_config.py)
            "tp_linear_async_communication": bool(t.tp_comm_overlap) and sp,
            "tp_mode": "REDUCE_SCATTER" if sp else "ALL_REDUCE",
            "recompute_layer": c.recompute is Recompute.FULL,
        },
        "profiler": None,
        "tokenizer": {
            "tokenizer_max_length": None,
            "tokenizer_name_or_path": "meta-llama/Llama-3.2-1B",
            "tokenizer_revision": None,
        },
        "tokens": {
            "batch_accumulation_per_replica": c.num_microbatches,
            "limit_test_batches": 0,
            "limit_val_batches": 0,
            "micro_batch_size": c.micro_batch_size,
            "sequence_length": t.seq_len,
            "train_steps": 1000,
            "val_check_interval": -1,
        },
    }
    header = [
        f"meshplan plan: dp={c.dp} tp={c.tp} pp={c.pp}; zero_stage {c.zero_stage}; "
        f"micro_batch_size={c.micro_batch_size} x {c.num_microbatches} micro-batches; "
        f"recompute {c.recompute.value}; global batch {seqs} sequences x {t.seq_len} tokens",
        f"nanotron config ({prof.title}): torchrun ... run_train.py --config-file this.yaml",
    ]
    if c.zero_stage == 1 and c.dp > 1 and t.grad_dtype is not StateDtype.BF16:
        # nanotron @ 7bc9923 (June 2025) on: trainer.py's make_ddp wraps dp > 1 in DDP, whose
        # fp32 accumulation hook raises NotImplementedError under ZeRO (get_fp32_accum_hook)
        header.append(
            "ZeRO-1 over the fp32 gradient accumulator with dp > 1 runs on nanotron before "
            "7bc9923 (June 2025; e.g. e24d248); later versions wrap it in DDP, whose fp32 "
            "accumulation hook raises NotImplementedError under ZeRO: there, plan with "
            "--zero-stage 0 or --grad-dtype bf16"
        )
    return yaml_text(header, doc)


def _rope_theta(A: Arch) -> dict[str, float]:
    """LlamaConfig.rope_theta (config/models_config.py; 10000.0 when the model does not say)."""
    att = A.attention
    return {"rope_theta": att.rope_theta} if att is not None and att.rope_theta else {}
