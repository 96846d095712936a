"""The torchtitan export: a configuration module for torchtitan 0.3.0, whose runs are Python
functions returning a `Trainer.Config` (torchtitan/config/README.md: "Select one with --module
... and --config"; the TOML job file is gone). The function starts from the baseline torchtitan
ships for the model (its `config_registry`, which carries the model's RoPE base, QK-norm and
latent attention), and sets what the plan chose through `dataclasses.replace`, so the config's
own checks (`Trainer.Config.__post_init__`) run on the result.

Names at pytorch/torchtitan 0.3.0 (PyPI; the repository at b5bcd76 holds the same config
system): torchtitan/config/configs.py (TrainingConfig, ParallelismConfig, CompileConfig),
torchtitan/distributed/activation_checkpoint.py, torchtitan/trainer.py,
torchtitan/models/{llama3,qwen3,deepseek_v3}/{__init__,config_registry}.py. The older TOML job
config (torchtitan up to 0.2.2) is `--emit torchtitan-toml` (tools/export/toml_formats.py).
"""

from __future__ import annotations

import dataclasses

from meshplan.solver.arch import Arch, resolve_model
from meshplan.solver.profiles import Profile
from meshplan.solver.schema import (
    ModelSpec,
    ParallelConfig,
    PipelineSchedule,
    Precision,
    Recompute,
    TrainingSpec,
)
from meshplan.tools.export import overlaps
from meshplan.tools.export.formats import chunk_sizes, summary

VERSION = "0.3.0"


@dataclasses.dataclass(frozen=True)
class Baseline:
    """A model torchtitan ships: its package, registry flavour and baseline config function."""

    package: str  # torchtitan.models.<package>
    flavor: str  # model_registry(flavor)
    function: str  # config_registry.<function>() -> Trainer.Config
    attn_backend: str = "flex"  # what the baseline builds its model_spec with


# catalog preset -> torchtitan 0.3.0's model (torchtitan/models/*/config_registry.py). Qwen3's
# 235B-A22B flavour has no baseline of its own: it takes the 30B-A3B one (same vocabulary, 151,936).
BASELINES: dict[str, Baseline] = {
    "llama3-8b": Baseline("llama3", "8B", "llama3_8b"),
    "llama3-70b": Baseline("llama3", "70B", "llama3_70b"),
    "llama3-405b": Baseline("llama3", "405B", "llama3_405b"),
    "qwen3-235b-a22b": Baseline("qwen3", "235B-A22B", "qwen3_30b_a3b"),
    "deepseek-v3": Baseline("deepseek_v3", "671B", "deepseek_v3_671b"),
}


def baseline_of(A: Arch) -> tuple[str, Baseline] | None:
    """The preset torchtitan ships whose shape is A's (any name), with its baseline."""
    for name, base in BASELINES.items():
        if dataclasses.replace(A, name=name) == resolve_model(ModelSpec(preset=name)):
            return name, base
    return None


def limits(A: Arch) -> list[str]:
    """What torchtitan 0.3.0 cannot build: a model its registry has no flavour of."""
    if baseline_of(A) is not None:
        return []
    known = ", ".join(BASELINES)
    return [
        f"torchtitan {VERSION} builds models from its registry (torchtitan/models), which has "
        f"no flavour of this shape ({A.L} layers, hidden {A.h}, {A.a} heads, {A.kv} KV heads, "
        f"FFN {A.f}{f', {A.E} experts' if A.is_moe else ''}); the catalog presets it has: {known}"
    ]


def _kwargs(pairs: dict[str, object], indent: str) -> str:
    return "".join(f"{indent}{k}={v!r},\n" for k, v in pairs.items())


def render(
    c: ParallelConfig,
    A: Arch,
    t: TrainingSpec,
    seqs: int,
    prof: Profile,
    hsdp: tuple[int, int] | None = None,
) -> str:
    """The plan as a torchtitan 0.3.0 configuration module (Python); `hsdp`: the (shard,
    replicate) data-parallel degrees (default: all dp ranks shard)."""
    shard, replicate = hsdp or (c.dp, 1)
    found = baseline_of(A)
    if found is None:  # emit.py refuses first (limits); here for a direct call
        raise ValueError("; ".join(limits(A)))
    name, base = found
    overlap_par, overlap_other, notes = overlaps.torchtitan(c, A, t)
    par: dict[str, object] = {
        "data_parallel_replicate_degree": replicate,  # HSDP: replicas across nodes
        "data_parallel_shard_degree": shard,  # FSDP2 (ZeRO-3; under pipelining: ZeRO-1)
        "fsdp_reshard_after_forward": "default",  # reshard without PP, keep gathered with it
        "tensor_parallel_degree": c.tp,
        "enable_sequence_parallel": True,  # the profile's: tp always shards the sequence
        "pipeline_parallel_degree": c.pp,
        "context_parallel_degree": c.cp,
        "expert_parallel_degree": c.ep,  # borrows dp_shard * cp * tp ranks (etp = 1)
    }
    # 0.3.0 moved async TP to CompileConfig and dropped the CP rotate method (all-gather only)
    moved = ("context_parallel_rotate_method", "enable_async_tensor_parallel")
    par |= {k: v for k, v in overlap_par.items() if k not in moved}
    dual = t.pipeline_schedule is PipelineSchedule.DUALPIPE_V
    pipe, local = pipeline_keys(A, c, "lm_head", dual)
    par |= pipe
    training: dict[str, object] = {
        "local_batch_size": local,
        "global_batch_size": seqs,
        "seq_len": t.seq_len,
        "mixed_precision_param": "bfloat16",
    }
    if c.pp > 1 or c.ep > 1:  # Trainer.Config refuses CUDA graphs with pipelining, and with
        # expert parallelism on the all-to-all dispatcher the registry builds
        training["disable_cuda_graphs"] = True
    compile_on = "compile" in overlap_other
    components = overlap_other["compile"]["components"] if compile_on else []
    async_tp = bool(overlap_par.get("enable_async_tensor_parallel"))
    ac = {
        Recompute.NONE: "None",
        Recompute.SELECTIVE: "SelectiveAC.Config()",
        Recompute.FULL: "FullAC.Config()",
    }[c.recompute]
    config_names = ["CompileConfig", "ParallelismConfig"] if compile_on else ["ParallelismConfig"]
    imports = ["import dataclasses", ""]
    converters = ""
    if t.precision is Precision.FP8:  # torchao float8 (tensorwise), the lm_head left in bf16
        imports.append("from torchtitan.components.quantization import Float8LinearConverter")
        converters = f", converters=[Float8LinearConverter.Config(model_compile_enabled={'model' in components})]"
    imports.append(f"from torchtitan.config import {', '.join(config_names)}")
    if c.recompute is not Recompute.NONE:
        policy = "FullAC" if c.recompute is Recompute.FULL else "SelectiveAC"
        imports.append(f"from torchtitan.distributed.activation_checkpoint import {policy}")
    imports += [
        f"from torchtitan.models.{base.package} import model_registry",
        f"from torchtitan.models.{base.package}.config_registry import {base.function}",
        "from torchtitan.trainer import Trainer",
    ]
    head = [
        summary(c, t, seqs, prof),
        f"torchtitan {VERSION} configuration (Python: 0.3.0 dropped the TOML job file). Save it "
        "as meshplan_plan.py where Python imports it, then run",
        f"  NGPU=<GPUs per node> MODULE=meshplan_plan CONFIG=meshplan_plan ./run_train.sh "
        f"({c.tp * c.pp * c.cp * c.dp} GPUs in all)",
        f"model: torchtitan's {base.package} {base.flavor} flavour (its RoPE base, QK-norm and "
        f"attention), on the {base.function} baseline (optimizer, data, checkpointing)",
        overlaps.describe(c, A, t),
        *overlaps.note_lines(notes),
    ]
    compile_cfg = (
        f"CompileConfig(enable=True, components={components!r}, "
        f"enable_async_tensor_parallel={async_tp})"
        if compile_on
        else "base.compile"
    )
    body = [
        "",
        "",
        "def meshplan_plan() -> Trainer.Config:",
        f'    """{name}: the layout meshplan planned, on torchtitan\'s {base.function}."""',
        f"    base = {base.function}()",
        "    return dataclasses.replace(",
        "        base,",
        f"        model_spec=model_registry({base.flavor!r}, "
        f"attn_backend={base.attn_backend!r}{converters}),",
        "        parallelism=ParallelismConfig(",
        _kwargs(par, "            ").rstrip("\n"),
        "        ),",
        "        training=dataclasses.replace(",
        "            base.training,",
        _kwargs(training, "            ").rstrip("\n"),
        "        ),",
        f"        activation_checkpoint={ac},",
        f"        compile={compile_cfg},",
        "    )",
    ]
    return "\n".join([f"# {h}" for h in head] + imports + body) + "\n"


def pipeline_keys(
    A: Arch, c: ParallelConfig, output: str, dualpipe: bool = False
) -> tuple[dict[str, object], int]:
    """torchtitan's pipeline keys (schedule, micro-batch, each stage's modules, the output
    module named `output`) and its local batch size, in either config system; `dualpipe`:
    the DualPipeV schedule (its stages are listed in order: torchtitan places them on the ranks
    in a V, stage_ids_this_rank style "v")."""
    if c.pp == 1:
        return {}, c.micro_batch_size  # gradient accumulation = global / (local * dp)
    parts, first = [], 0
    for n in chunk_sizes(A.L, c.pp * c.virtual_stages):
        parts.append([f"layers.{i}" for i in range(first, first + n)])
        first += n
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", output]
    keys: dict[str, object] = {
        "pipeline_parallel_schedule": (
            "DualPipeV" if dualpipe else "Interleaved1F1B" if c.virtual_stages > 1 else "1F1B"
        ),
        "pipeline_parallel_microbatch_size": c.micro_batch_size,
        "module_fqns_per_model_part": parts,
    }
    return keys, c.micro_batch_size * c.num_microbatches  # the schedule splits it into M
