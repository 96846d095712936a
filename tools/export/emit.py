"""Render a plan as the input of the framework that runs it: Megatron-LM `pretrain_gpt.py`
arguments, a torchtitan 0.3.0 configuration module (or the TOML job config of torchtitan up to
0.2.2), a DeepSpeed JSON config with the Megatron-DeepSpeed arguments it needs, or a
KempnerForge TOML config.

Every knob the plan chose is in the snippet (tp, pp, virtual stages, dp/FSDP, cp, ep, etp,
micro-batch, global batch, ZeRO stage or its framework's name for it, recomputation, sequence
parallelism, precision) and so is the model's shape, a catalog preset resolved, with its RoPE
base, QK-norm and latent attention where the framework has them (tools/export/attention.py). A
plan the framework cannot express is refused: ValueError listing the framework's rules it breaks
(the profiles of solver/profiles/, which the planner obeys when the request names that
framework). Names and values are those of the frameworks at the commits solver/profiles/
cites. The overlaps the plan was timed with (the profile's defaults and the request's switches)
are switched on in the framework's own flags (tools/export/overlaps.py).

    emit(kind, config, model, training, global_batch_tokens, cluster=None) -> str
    kind: one of KINDS, or None for the export of training.framework's profile (GENERIC exports
    Megatron-LM arguments).
"""

from __future__ import annotations

from meshplan.solver.arch import Arch, resolve_model
from meshplan.solver.costmodel import Point
from meshplan.solver.hardware import resolve_cluster
from meshplan.solver.profiles import PROFILES, Profile, profile_of
from meshplan.solver.rules import launcher_violations, model_limits
from meshplan.solver.schema import ClusterSpec, Framework, ModelSpec, ParallelConfig, TrainingSpec
from meshplan.tools.export import formats as fmt
from meshplan.tools.export import llm_foundry, nanotron, overlaps, torchtitan
from meshplan.tools.export import toml_formats as export_toml
from meshplan.tools.export.attention import attention_limits

KINDS: tuple[str, ...] = (
    "megatron",
    "torchtitan",
    "torchtitan-toml",
    "deepspeed",
    "kempnerforge",
    "llm_foundry",
    "nanotron",
)
HSDP_KINDS = ("torchtitan", "torchtitan-toml", "kempnerforge")  # dp_shard x dp_replicate
FRAMEWORK_OF: dict[str, Framework] = {
    "megatron": Framework.MEGATRON,
    "torchtitan": Framework.TORCHTITAN,
    "torchtitan-toml": Framework.TORCHTITAN,
    "deepspeed": Framework.DEEPSPEED,
    "kempnerforge": Framework.KEMPNERFORGE,
    "llm_foundry": Framework.LLM_FOUNDRY,
    "nanotron": Framework.NANOTRON,
}


def emit(
    kind: str | None,
    config: ParallelConfig,
    model: ModelSpec,
    training: TrainingSpec,
    global_batch_tokens: int,
    cluster: ClusterSpec | None = None,
) -> str:
    """The plan `config` as a `kind` snippet (None: the request's framework's). ValueError on an
    unknown kind, a global batch other than dp * micro_batch_size * num_microbatches * seq_len,
    or a plan (or model) the framework cannot express. `cluster`'s node size places the shard
    groups of `training.hybrid_shard` (torchtitan's and KempnerForge's dp_shard x
    dp_replicate; needed there)."""
    if kind is None:
        kind = profile_of(training.framework).export
    if kind not in FRAMEWORK_OF:
        raise ValueError(f"unknown export kind {kind!r}; supported kinds: {', '.join(KINDS)}")
    c, s = config, training.seq_len
    seqs = c.dp * c.micro_batch_size * c.num_microbatches
    if global_batch_tokens != seqs * s:
        raise ValueError(
            f"global_batch_tokens ({global_batch_tokens}) != dp({c.dp}) * micro_batch_size"
            f"({c.micro_batch_size}) * num_microbatches({c.num_microbatches}) * seq_len({s})"
            f" = {seqs * s}"
        )
    prof = PROFILES[FRAMEWORK_OF[kind]]
    A = resolve_model(model)
    _check(kind, prof, Point.from_config(c), A, training)
    if kind in HSDP_KINDS:
        if training.hybrid_shard and cluster is None:
            raise ValueError(
                f"{kind}: training.hybrid_shard needs the cluster (its GPUs per node) to place "
                "the shard groups"
            )
        gpn = resolve_cluster(cluster).gpn if cluster is not None else 1
        hsdp = fmt.hsdp_degrees(c, training.hybrid_shard, gpn)
        render = {
            "torchtitan": torchtitan.render,
            "torchtitan-toml": export_toml.torchtitan,
            "kempnerforge": export_toml.kempnerforge,
        }[kind]
        return render(c, A, training, seqs, prof, hsdp)
    render = {
        "megatron": fmt.megatron,
        "deepspeed": fmt.deepspeed,
        "llm_foundry": llm_foundry.llm_foundry,
        "nanotron": nanotron.nanotron,
    }[kind]
    return render(c, A, training, seqs, prof)


def shape_limits(kind: str, A: Arch) -> list[str]:
    """Model shapes a framework's config cannot describe: solver/rules.py's model_limits (which
    the planner refuses too), the attention it cannot build, torchtitan's registry."""
    out = model_limits(A, PROFILES[FRAMEWORK_OF[kind]]) + attention_limits(kind, A)
    if kind == "torchtitan":
        out += torchtitan.limits(A)
    if kind == "torchtitan-toml":
        out += export_toml.torchtitan_limits_toml(A)
    return out


def _check(kind: str, prof: Profile, p: Point, A: Arch, training: TrainingSpec) -> None:
    bad = launcher_violations(p, A, training, prof) + shape_limits(kind, A)
    if training.hybrid_shard and kind not in (*HSDP_KINDS, "llm_foundry"):
        bad.append(
            f"training.hybrid_shard: {kind} has no sharding inside a node with replicas across "
            "nodes (FSDP1 HYBRID_SHARD, FSDP2 HSDP)"
        )
    if kind == "megatron":
        bad += overlaps.megatron_conflicts(p.config(), A, training)
    if bad:
        raise ValueError(f"{kind} cannot express this plan: " + "; ".join(bad))
