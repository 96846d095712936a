"""Request flags shared by the commands: the contract's names with dashes (tools/cli/inputs.py turns
them into a request dict that the pydantic schema validates). Every flag's help gives its unit
and default.

Nothing heavy is imported here (no pydantic, no solver), so building a parser stays fast.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from meshplan.tools.cli.messages import shorten
from meshplan.tools.cli.remote import add_connection_flags

PINS = ("tp", "pp", "dp", "cp", "ep", "virtual_stages", "micro_batch_size", "num_microbatches")
PRECISIONS = ("BF16", "FP8")
RECOMPUTES = ("NONE", "SELECTIVE", "FULL")
FRAMEWORKS = (
    "GENERIC",
    "KEMPNERFORGE",
    "MEGATRON",
    "TORCHTITAN",
    "DEEPSPEED",
    "LLM_FOUNDRY",
    "NANOTRON",
)
EMIT_KINDS = (  # tools/export/emit.py's KINDS
    "megatron",
    "torchtitan",
    "torchtitan-toml",
    "deepspeed",
    "kempnerforge",
    "llm_foundry",
    "nanotron",
)
# The training switches (solver/schema.py TrainingSpec): the pipeline schedule and the memory
# recipe's knobs: flag -> (choices, help)
RECIPE_FLAGS = {
    "pipeline_schedule": (
        ("ONE_F_ONE_B", "DUALPIPE_V"),
        "the pipeline schedule: ONE_F_ONE_B (interleaved over --virtual-stages) or DUALPIPE_V "
        "(two stages per rank, a third of the bubble, the expert all-to-all hidden: DeepSeek-V3 "
        "report; TORCHTITAN only)",
    ),
    "loss_kernel": (
        ("EAGER_FP32", "COPY_FP32", "INPLACE_FP32", "FUSED_BF16", "COMPILED", "CHUNKED"),
        "how the loss holds the logits: EAGER_FP32 (12 bytes per logit element), COPY_FP32 (8), "
        "INPLACE_FP32 (6), FUSED_BF16 (4), COMPILED (4: torch.compile'd) or CHUNKED (no whole "
        "logits)",
    ),
    "grad_dtype": (("FP32", "BF16"), "data type of the main gradients (4 or 2 bytes/parameter)"),
    "master_dtype": (
        ("FP32", "BF16"),
        "data type of the optimizer's master weights (FP32: a 4-byte copy; BF16: none)",
    ),
    "fsdp_version": (
        ("FSDP1", "FSDP2"),
        "PyTorch FSDP under ZeRO-3: FSDP1 flat parameters or FSDP2 (FSDP profiles only)",
    ),
    "activation_form": (
        ("FLAT_12H", "KORTHIKANTI", "MEGATRON", "TORCHTITAN", "KEMPNERFORGE", "NANOTRON"),
        "which tensors each layer keeps for its backward, in that framework's code",
    ),
    "fp8_activations": (("true", "false"), "FP8 training stores linear inputs in FP8 (1 byte)"),
    "hybrid_shard": (
        ("true", "false"),
        "shard ZeRO state inside a node and replicate it across nodes (FSDP1 HYBRID_SHARD, "
        "FSDP2 HSDP)",
    ),
    "compiled": (
        ("true", "false"),
        "the transformer blocks run under torch.compile: the backward keeps only what it reads "
        "(TORCHTITAN, LLM_FOUNDRY, KEMPNERFORGE; unset: KEMPNERFORGE compiled, as its "
        "train.compile_model default, the others eager)",
    ),
    "fp8_all_gather": (
        ("true", "false"),
        "FSDP2 gathers the layers' Float8Linear weights in FP8 (torchao; precision FP8)",
    ),
}
BOOL_RECIPE_FLAGS = (
    "fp8_activations",
    "hybrid_shard",
    "compiled",
    "fp8_all_gather",
)  # "true" / "false" on the command line

PIN_WORDS = {  # flag -> (what it is, unit)
    "tp": ("tensor-parallel degree", "GPUs"),
    "pp": ("pipeline-parallel stages", "GPUs"),
    "dp": ("data-parallel / FSDP degree", "replicas"),
    "cp": ("context-parallel degree", "sequence shards"),
    "ep": ("expert-parallel degree, borrowed from dp*cp", "GPUs"),
    "virtual_stages": ("interleaved model chunks per pipeline stage", "count"),
    "micro_batch_size": ("micro-batch size", "sequences"),
    "num_microbatches": ("micro-batches per step per replica", "count"),
}
_EVALUATE_DEFAULTS = {  # the layout fields an evaluate request may leave out, and their default
    "cp": "default 1",
    "ep": "default 1",
    "virtual_stages": "default 1",
    "num_microbatches": "default: derived from the global batch",
}
_ZERO_DEFAULT = "default: 1, or 0 when dp*cp = 1: nothing to shard over one rank"
_SUFFIX = {"k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}


def tokens(text: str) -> int:
    """A token count: 2097152, 2e6, 15T, 500B or 16M (k, M, B/G, T: powers of 1000), 4Mi
    (Ki, Mi, Gi, Ti: powers of 1024, so 4Mi = 512 sequences of 8192)."""
    t = text.strip().replace("_", "").replace(",", "")
    m = re.fullmatch(r"(\d+(?:\.\d*)?(?:[eE]\d+)?)([kKmMbBgGtT]?)(i?)", t)
    if not m or (m.group(3) and m.group(2).lower() not in ("k", "m", "g", "t")):
        raise argparse.ArgumentTypeError(f"not a token count: {shorten(text)!r}")
    letter = m.group(2).lower()
    scale = 1024 ** ("kmgt".index(letter) + 1) if m.group(3) else _SUFFIX.get(letter, 1)
    value = float(m.group(1)) * scale
    if value != int(value) or value > 2**62:
        raise argparse.ArgumentTypeError(f"not a whole token count: {shorten(text)!r}")
    return int(value)


def non_negative(text: str) -> float:
    """A finite number >= 0 (hours, seconds, a fraction)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {shorten(text)!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {shorten(text)!r}")
    return value


PLOT_FORMATS = ("png", "svg", "pdf")


def plot_format(path: str | Path) -> str:
    """The picture format a path's suffix names; ValueError for any other suffix."""
    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in PLOT_FORMATS:
        raise ValueError(
            f"--plot: {shorten(str(path))!r}: the suffix picks the format: "
            f"{', '.join('.' + f for f in PLOT_FORMATS)}"
        )
    return fmt


def plot_path(text: str) -> str:
    """argparse type of --plot: a path whose suffix names a format we can write."""
    try:
        plot_format(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--plot: ")) from None
    return text


def add_request_flags(p: argparse.ArgumentParser, evaluate: bool) -> None:
    """The flags of `plan` (pins are free by default) or `evaluate` (the layout to score)."""
    what = "an EvaluateRequest" if evaluate else "a PlanRequest"
    p.add_argument(
        "--request",
        metavar="FILE",
        help=f"a whole request as JSON ({what}, the README's field names; '-' reads stdin); "
        "flags given as well override its fields (default: none, the flags alone)",
    )
    p.add_argument(
        "--model",
        metavar="NAME|PATH",
        help="a catalog model (see `meshplan catalog`) or a Hugging Face config.json (or its "
        "directory); required unless --request names the model",
    )
    add_cluster_flags(p)
    p.add_argument(
        "--gpus",
        type=int,
        metavar="N",
        help="GPUs for the job (count); required unless --request gives cluster.num_gpus",
    )
    add_training_flags(p)
    for name, (choices, text) in RECIPE_FLAGS.items():
        p.add_argument(
            "--" + name.replace("_", "-"),
            type=str.lower if choices[0] == "true" else str.upper,
            choices=choices,
            help=f"{text}, any case (default: the framework profile's)",
        )
    for name in PINS:
        what_pin, unit = PIN_WORDS[name]
        if evaluate:
            default = _EVALUATE_DEFAULTS.get(name, "required")
            text = f"{what_pin} ({unit}; {default})"
        else:
            text = f"pin the {what_pin} ({unit}; default: free)"
        p.add_argument("--" + name.replace("_", "-"), type=int, dest=name, metavar="N", help=text)
    add_memory_pins(p, evaluate)
    p.add_argument(
        "--json",
        action="store_true",
        help="print the result as JSON (the README's field names) instead of a table",
    )
    add_server_flag(p, "solve on a meshplan server (default: in-process)")
    p.add_argument(
        "--plot",
        metavar="FILE",
        type=plot_path,
        help="also draw the memory bill against HBM; the suffix picks the format: .png, .svg "
        "or .pdf (default: no picture)",
    )
    if evaluate:
        return
    p.add_argument(
        "--top-k",
        type=int,
        metavar="K",
        help="distinct alternatives to return as well (count; default 0)",
    )
    p.add_argument(
        "--time-limit",
        type=float,
        metavar="S",
        help="solver time limit (seconds; default 10)",
    )
    p.add_argument(
        "--allow-fewer-gpus",
        action="store_true",
        help="allow plans that leave some of the GPUs idle (default: use them all)",
    )
    p.add_argument(
        "--emit",
        nargs="?",
        const="auto",
        type=str.lower,
        choices=("auto", *EMIT_KINDS),
        metavar="KIND",
        help="print the plan as a launcher config on stdout, and the table on stderr: "
        f"{', '.join(EMIT_KINDS)}; without a value (or 'auto'), the launcher of --framework. "
        "Not with --json: stdout carries one document (default: the table on stdout)",
    )


def add_cluster_flags(p: argparse.ArgumentParser, many: str = "") -> None:
    """--gpu, --gpus-per-node, --hbm-gib (`many`: a note that the flag takes a list)."""
    p.add_argument(
        "--gpu",
        metavar="NAME",
        help=f"a catalog GPU (see `meshplan catalog`; default h100-sxm-80gb){many}",
    )
    p.add_argument(
        "--gpus-per-node",
        type=int,
        metavar="N",
        help="GPUs per node sharing the fast in-node link (count; default: the catalog's, "
        "8 for the H100 and H200)",
    )
    p.add_argument(
        "--hbm-gib",
        type=float,
        metavar="GIB",
        help="HBM per GPU (GiB; default: the catalog's)",
    )


def add_training_flags(p: argparse.ArgumentParser, lists: str | None = None) -> None:
    """The step: sequence length, batch, precision, framework. With `lists` (a note for the
    help), --seq-len and --precision are kept as text for the caller to split."""
    many = lists or ""
    p.add_argument(
        "--seq-len",
        type=None if lists is not None else tokens,
        metavar="TOKENS",
        help=f"sequence length (tokens; default 8192){many}",
    )
    p.add_argument(
        "--global-batch-tokens",
        type=tokens,
        metavar="TOKENS",
        help="tokens per optimizer step, e.g. 4M, a multiple of the sequence length (default 0: the "
        "planner chooses, up to the critical batch)",
    )
    p.add_argument(
        "--critical-batch-tokens",
        type=tokens,
        metavar="TOKENS",
        help="cap on the global batch (tokens, e.g. 16M; default: the optimal batch 0.2920*C^0.3271 of "
        "DeepSeek LLM's scaling law, Bi et al. 2024, for C = 6 x active parameters x "
        "--train-tokens; no cap when --global-batch-tokens is given)",
    )
    p.add_argument(
        "--train-tokens",
        type=tokens,
        metavar="TOKENS",
        help="tokens of the whole training run, e.g. 15T, for the default critical batch "
        "(tokens; default 20 per active parameter, Hoffmann et al. 2022)",
    )
    if lists is not None:
        p.add_argument(
            "--precision",
            metavar="P",
            help=f"training precision, BF16 or FP8, any case (default BF16){many}",
        )
    else:
        p.add_argument(
            "--precision",
            type=str.upper,
            choices=PRECISIONS,
            help="training precision, any case: BF16 mixed (16 B/parameter) or FP8 "
            "(9 B/parameter) (default BF16)",
        )
    p.add_argument(
        "--framework",
        type=str.upper,
        choices=FRAMEWORKS,
        help="the framework profile, any case: the layouts it runs, its memory recipe and its "
        "launcher (default MEGATRON)",
    )


def add_memory_pins(p: argparse.ArgumentParser, evaluate: bool) -> None:
    """--zero-stage, --recompute, --sequence-parallel: pins for plan, settings for evaluate."""
    free = "default: free"
    p.add_argument(
        "--zero-stage",
        type=int,
        choices=[0, 1, 2, 3],
        help="ZeRO stage over the data-parallel group: 1 shards the optimizer state, 2 also "
        f"the gradients, 3 also the weights ({_ZERO_DEFAULT if evaluate else free})",
    )
    p.add_argument(
        "--recompute",
        type=str.upper,
        choices=RECOMPUTES,
        help="activation recomputation, any case: NONE, SELECTIVE (attention) or FULL "
        f"(Korthikanti et al. 2022) ({'default NONE' if evaluate else free})",
    )
    p.add_argument(
        "--sequence-parallel",
        type=str.lower,
        choices=["true", "false"],
        help="Megatron sequence parallelism with tp > 1 "
        f"({'default true' if evaluate else 'default: on whenever tp > 1'})",
    )


def add_cell_pins(p: argparse.ArgumentParser) -> None:
    """--tp ... --num-microbatches pinned in every cell of a grid (sweep and the scheduler
    queries)."""
    for name in PINS:
        what, unit = PIN_WORDS[name]
        p.add_argument(
            "--" + name.replace("_", "-"),
            type=int,
            dest=name,
            metavar="N",
            help=f"pin the {what} in every cell ({unit}; default: free)",
        )


def add_ray_flag(p: argparse.ArgumentParser) -> None:
    """--ray [ADDRESS]: spread the plans over a Ray cluster (tools/sweep/ray_paths.py)."""
    p.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="spread the plans over a Ray cluster's CPUs, one warm worker each; ADDRESS as Ray "
        "reads it: auto (the cluster running on this machine), ray://HOST:10001 (Ray Client), "
        "or none (RAY_ADDRESS if set, else a new local cluster of this machine's CPUs); needs "
        "pip install 'meshplan[ray]' (default: not on Ray)",
    )


def add_server_flag(p: argparse.ArgumentParser, what: str, required: bool = False) -> None:
    """--server HOST:PORT[,HOST:PORT...] and the connection flags of a remote call (TLS, mTLS,
    the bearer token: tools/cli/remote.py)."""
    p.add_argument(
        "--server",
        metavar="HOST:PORT[,...]",
        required=required,
        help=f"{what}; several targets are balanced round-robin",
    )
    add_connection_flags(p)
