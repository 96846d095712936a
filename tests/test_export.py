"""meshplan.tools.export.emit: for random plans of every framework profile, the snippet parses with
the framework's own format, uses only names the framework defines (the lists in
tests/data/export, each citing its commit) and carries every knob of the plan and the model's
shape; what a framework cannot express is refused."""

from __future__ import annotations

import ast
import json
import random
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from meshplan.solver.arch import Arch, resolve_model
from meshplan.solver.costmodel import CostModel, Point
from meshplan.solver.costmodel.framework_timing import overlaps_for
from meshplan.solver.hardware import resolve_cluster
from meshplan.solver.schema import (
    ClusterSpec,
    Framework,
    LossKernel,
    ModelSpec,
    ParallelConfig,
    Precision,
    Recompute,
    SearchSpec,
    TrainingSpec,
)
from meshplan.solver.space import Space
from meshplan.tools.export.emit import KINDS, emit, shape_limits

DATA = Path(__file__).parent / "data" / "export"


def _names(file: str) -> frozenset[str]:
    lines = (DATA / file).read_text().splitlines()
    return frozenset(x for x in lines if x and not x.startswith("#"))


MEGATRON_FLAGS = _names("megatron_flags.txt")
MEGATRON_DEEPSPEED_FLAGS = _names("megatron_deepspeed_flags.txt")
DEEPSPEED_KEYS = _names("deepspeed_keys.txt")
TORCHTITAN_KEYS = _names("torchtitan_keys.txt")
TORCHTITAN_0_3 = _names("torchtitan_0_3_fields.txt")
KEMPNERFORGE_KEYS = _names("kempnerforge_keys.txt")


# --- parsing each format with its own rules ------------------------------------------------------


def shell_args(text: str, known: frozenset[str]) -> dict[str, list[str]]:
    """argparse-style: every --flag is a defined name, followed by its value words."""
    out: dict[str, list[str]] = {}
    key = None
    for tok in shlex.split(text.replace("\\\n", " "), comments=True):
        if tok.startswith("--"):
            assert tok in known, f"not an argument of the launcher: {tok}"
            key = tok
            out[key] = []
        else:
            assert key is not None, tok
            out[key].append(tok)
    return out


def toml_paths(d: dict, prefix: str = "") -> set[str]:
    out = set()
    for k, v in d.items():
        path = f"{prefix}{k}"
        out |= toml_paths(v, path + ".") if isinstance(v, dict) else {path}
    return out


def one(args: dict[str, list[str]], flag: str, default: str | None = None) -> str | None:
    return args[flag][0] if flag in args else default


def megatron_layout_chunks(layout: str) -> list[int]:
    """Layers per chunk of a --pipeline-model-parallel-layout (Megatron's own expansion rule)."""
    s = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), layout)
    return [stage.count("t") for stage in s.split("|")]


def read_megatron(text: str, A: Arch, known: frozenset[str] = MEGATRON_FLAGS) -> dict:
    a = shell_args(text, known)
    tp, pp = (
        int(one(a, "--tensor-model-parallel-size")),
        int(one(a, "--pipeline-model-parallel-size")),
    )
    v = int(one(a, "--num-virtual-stages-per-pipeline-rank", "1"))
    if "--pipeline-model-parallel-layout" in a:
        chunks = megatron_layout_chunks(one(a, "--pipeline-model-parallel-layout"))
        assert sum(chunks) == A.L and len(chunks) % pp == 0
        v = len(chunks) // pp
    elif pp > 1:
        assert A.L % (pp * v) == 0
    zero = 0
    if "--use-distributed-optimizer" in a:
        zero = 1
    if "--use-megatron-fsdp" in a:
        zero = {"optim_grads": 2, "optim_grads_params": 3}[
            one(a, "--data-parallel-sharding-strategy")
        ]
    rec = {None: Recompute.NONE, "selective": Recompute.SELECTIVE, "full": Recompute.FULL}
    return {
        "tp": tp,
        "pp": pp,
        "cp": int(one(a, "--context-parallel-size")),
        "ep": int(one(a, "--expert-model-parallel-size", "1")),
        "etp": int(one(a, "--expert-tensor-parallel-size", str(tp))),
        "v": v,
        "b": int(one(a, "--micro-batch-size")),
        "global": int(one(a, "--global-batch-size")),
        "zero": zero,
        "recompute": rec[one(a, "--recompute-granularity")],
        "sp": "--sequence-parallel" in a,
        "fp8": "--fp8-format" in a,
        "seq": int(one(a, "--seq-length")),
        "shape": (
            int(one(a, "--num-layers")),
            int(one(a, "--hidden-size")),
            int(one(a, "--num-attention-heads")),
            int(one(a, "--num-query-groups", one(a, "--num-attention-heads"))),
        ),
        "args": a,
    }


def read_torchtitan(text: str) -> dict:
    d = tomllib.loads(text)
    unknown = toml_paths(d) - TORCHTITAN_KEYS
    assert not unknown, f"not torchtitan config fields: {sorted(unknown)}"
    par, tr = d["parallelism"], d["training"]
    pp = par["pipeline_parallel_degree"]
    b = par.get("pipeline_parallel_microbatch_size", tr["local_batch_size"])
    if pp > 1:
        parts = par["module_fqns_per_model_part"]
        assert len(parts) % pp == 0
        v = len(parts) // pp
        interleaved = par["pipeline_parallel_schedule"] == "Interleaved1F1B"
        assert interleaved == (v > 1)
    else:
        v = 1
    mode = d["activation_checkpoint"]["mode"]
    return {
        "tp": par["tensor_parallel_degree"],
        "pp": pp,
        "cp": par["context_parallel_degree"],
        "ep": par["expert_parallel_degree"],
        "etp": par.get("expert_tensor_parallel_degree", par["tensor_parallel_degree"]),
        "v": v,
        "b": b,
        "global": tr["global_batch_size"],
        "dp": par["data_parallel_shard_degree"] * par["data_parallel_replicate_degree"],
        "recompute": Recompute(mode.upper()),
        "fp8": "quantize.linear.float8" in d.get("model", {}).get("converters", []),
        "seq": tr["seq_len"],
        "raw": d,
    }


def _literal(node: ast.expr) -> object:
    """A keyword's value: a literal, a call as {"call": name, **its keywords}, or a name."""
    if isinstance(node, ast.Call):
        name = ast.unparse(node.func)
        args = [_literal(a) for a in node.args]
        return {"call": name, "args": args, **{k.arg: _literal(k.value) for k in node.keywords}}
    if isinstance(node, ast.List):
        return [_literal(e) for e in node.elts]
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)


def read_torchtitan_py(text: str) -> dict:
    """torchtitan 0.3.0's configuration module: the one function's dataclasses.replace(base, ...)
    read with ast; every field it sets is a field of the 0.3.0 config dataclass it builds."""
    tree = ast.parse(text)
    (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert fn.name == "meshplan_plan"
    ret = fn.body[-1]
    assert isinstance(ret, ast.Return) and ast.unparse(ret.value.func) == "dataclasses.replace"
    kw = {k.arg: _literal(k.value) for k in ret.value.keywords}
    par, tr = kw["parallelism"], kw["training"]
    assert par["call"] == "ParallelismConfig" and tr["call"] == "dataclasses.replace"
    comp = kw["compile"] if isinstance(kw["compile"], dict) else {}
    for cls, fields in (
        ("ParallelismConfig", par),
        ("TrainingConfig", tr),
        ("CompileConfig", comp),
    ):
        unknown = {f"{cls}.{k}" for k in fields if k not in ("call", "args")} - TORCHTITAN_0_3
        assert not unknown, f"not torchtitan 0.3.0 config fields: {sorted(unknown)}"
    pp = par["pipeline_parallel_degree"]
    b = par.get("pipeline_parallel_microbatch_size", tr["local_batch_size"])
    if pp > 1:
        parts = par["module_fqns_per_model_part"]
        assert len(parts) % pp == 0 and parts[-1][-2:] == ["norm", "lm_head"]
        v = len(parts) // pp
        assert (par["pipeline_parallel_schedule"] == "Interleaved1F1B") == (v > 1)
        assert tr["disable_cuda_graphs"] is True  # Trainer.Config refuses CUDA graphs with PP
    else:
        v = 1
    ac = kw["activation_checkpoint"]
    mode = (
        "NONE"
        if ac is None
        else {"FullAC.Config": "FULL", "SelectiveAC.Config": "SELECTIVE"}[ac["call"]]
    )
    spec = kw["model_spec"]
    return {
        "tp": par["tensor_parallel_degree"],
        "pp": pp,
        "cp": par["context_parallel_degree"],
        "ep": par["expert_parallel_degree"],
        "etp": 1
        if par["expert_parallel_degree"] > 1 or par["tensor_parallel_degree"] == 1
        else None,
        "v": v,
        "b": b,
        "global": tr["global_batch_size"],
        "dp": par["data_parallel_shard_degree"] * par["data_parallel_replicate_degree"],
        "recompute": Recompute(mode),
        "fp8": any(
            x.get("call") == "Float8LinearConverter.Config" for x in spec.get("converters", [])
        ),
        "seq": tr["seq_len"],
        "flavor": spec["args"][0],
        "raw": {"parallelism": par, "compile": comp, "training": tr},
    }


def read_deepspeed(text: str, A: Arch) -> dict:
    d = json.loads(text)
    paths = {k for k in d if not k.startswith("_")}
    paths |= {f"zero_optimization.{k}" for k in d["zero_optimization"]}
    assert not paths - DEEPSPEED_KEYS, (
        f"not DeepSpeed config keys: {sorted(paths - DEEPSPEED_KEYS)}"
    )
    argv = d["_megatron_deepspeed"]
    assert argv.startswith("pretrain_gpt.py ")
    a = shell_args(argv.removeprefix("pretrain_gpt.py "), MEGATRON_DEEPSPEED_FLAGS)
    pp = 1 if "--no-pipeline-parallel" in a else int(one(a, "--pipeline-model-parallel-size"))
    tp = int(one(a, "--tensor-model-parallel-size"))
    rec = {None: Recompute.NONE, "selective": Recompute.SELECTIVE, "full": Recompute.FULL}
    experts = [int(x) for x in a.get("--num-experts", ["1"])]
    assert int(one(a, "--global-batch-size")) == d["train_batch_size"]
    assert int(one(a, "--micro-batch-size")) == d["train_micro_batch_size_per_gpu"]
    return {
        "tp": tp,
        "pp": pp,
        "cp": 1,
        "ep": int(one(a, "--moe-expert-parallel-size", "1")),
        "etp": tp if ("--enable-expert-tensor-parallelism" in a or max(experts) == 1) else 1,
        "v": 1,
        "b": d["train_micro_batch_size_per_gpu"],
        "M": d["gradient_accumulation_steps"],
        "global": d["train_batch_size"],
        "zero": d["zero_optimization"]["stage"],
        "recompute": rec[one(a, "--recompute-granularity")],
        "sp": "--sequence-parallel" in a,
        "fp8": False,
        "seq": int(one(a, "--seq-length")),
        "experts": experts,
        "shape": (
            int(one(a, "--num-layers")),
            int(one(a, "--hidden-size")),
            int(one(a, "--num-attention-heads")),
            int(one(a, "--num-key-value-heads")),
        ),
    }


def read_kempnerforge(text: str) -> dict:
    d = tomllib.loads(text)
    unknown = toml_paths(d) - KEMPNERFORGE_KEYS
    assert not unknown, f"not KempnerForge config fields: {sorted(unknown)}"
    dist, tr, m = d["distributed"], d["train"], d["model"]
    return {
        "tp": dist["tp"],
        "pp": dist["pp"],
        "cp": dist["cp"],
        "ep": dist["ep"],
        "v": 1,
        "b": tr["batch_size"],
        "M": tr["grad_accum_steps"],
        "dp": dist["dp_shard"] * dist["dp_replicate"],
        "zero": 0 if dist["dp_replicate"] > 1 else None,
        "recompute": Recompute(tr["activation_checkpointing"].upper()),
        "fp8": tr["mixed_precision"] == "fp8",
        "seq": tr["seq_len"],
        "shape": (m["n_layers"], m["dim"], m["n_heads"], m["n_kv_heads"]),
    }


# --- random plans of each profile ---------------------------------------------------------------

MODELS = ["llama3-8b", "gpt3-175b", "mixtral-8x7b", "qwen3-235b-a22b", "deepseek-v3"]
KIND_OF = {
    Framework.MEGATRON: "megatron",
    Framework.TORCHTITAN: "torchtitan",
    Framework.DEEPSPEED: "deepspeed",
    Framework.KEMPNERFORGE: "kempnerforge",
    Framework.GENERIC: "megatron",
}


def random_plans(framework: Framework, n: int, seed: int) -> list[tuple[Point, str, TrainingSpec]]:
    """n points of the search space of that profile (so plans it may return), drawn at random
    over models, GPU counts, sequence lengths and precisions."""
    rng = random.Random(seed)
    out: list[tuple[Point, str, TrainingSpec]] = []
    while len(out) < n:
        model = rng.choice(MODELS)
        prec = rng.choice([Precision.BF16, Precision.FP8])
        if framework is Framework.DEEPSPEED:
            prec = Precision.BF16
        switches = {  # the request's overlap switches: unset (the profile's default), on, off
            k: rng.choice([None, True, False])
            for k in (
                "tp_comm_overlap",
                "dp_comm_overlap",
                "cp_comm_overlap",
                "ep_comm_overlap",
                "ep_dispatch_dedup",
            )
        }
        t = TrainingSpec(
            seq_len=rng.choice([2048, 4096]), precision=prec, framework=framework, **switches
        )
        q = SearchSpec(max_micro_batch_size=4, max_virtual_stages=3)
        A = resolve_model(ModelSpec(preset=model))
        if shape_limits(KIND_OF[framework], A):  # a shape its config cannot describe
            continue
        H = resolve_cluster(ClusterSpec(num_gpus=rng.choice([16, 64, 256])))
        sp = Space.build(A, H, t, q, CostModel(A, H, t, q), prune=False)
        if not sp.layouts:
            continue
        lay = rng.choice(sp.layouts)
        pvs, dbs = sp.compatible("pv", lay), sp.compatible("db", lay)
        tes, zs = sp.compatible("te", lay), sp.compatible("z", lay)
        if not (pvs and dbs and tes and zs):
            continue
        pv, db = rng.choice(pvs), rng.choice(dbs)
        if not sp.pipeline_fits_batch(pv, db):
            continue
        te = rng.choice(tes)
        p = Point(lay, pv[1], db[1], db[2], te[1], te[2], rng.choice(sp.rs), rng.choice(zs))
        out.append((p, model, t))
    return out


SEEDS = {
    Framework.MEGATRON: 1,
    Framework.TORCHTITAN: 2,
    Framework.DEEPSPEED: 3,
    Framework.KEMPNERFORGE: 4,
}
CASES = [
    (fw, i, p, model, t)
    for fw in (
        Framework.MEGATRON,
        Framework.TORCHTITAN,
        Framework.DEEPSPEED,
        Framework.KEMPNERFORGE,
    )
    for i, (p, model, t) in enumerate(random_plans(fw, 20, seed=SEEDS[fw]))
]


@pytest.mark.parametrize(
    "fw,i,p,model,t", CASES, ids=[f"{c[0].value}-{c[1]}-{c[3]}" for c in CASES]
)
def test_random_plan_exports_with_every_knob(
    fw: Framework, i: int, p: Point, model: str, t: TrainingSpec
) -> None:
    A = resolve_model(ModelSpec(preset=model))
    c = p.config()
    tokens = c.dp * c.micro_batch_size * c.num_microbatches * t.seq_len
    kind = KIND_OF[fw]
    if kind == "megatron" and megatron_refuses(c, A, t):
        with pytest.raises(ValueError, match="cannot express.*(tp|ep)_comm_overlap"):
            emit(None, c, ModelSpec(preset=model), t, tokens)
        return
    text = emit(None, c, ModelSpec(preset=model), t, tokens)
    seqs = c.dp * c.micro_batch_size * c.num_microbatches
    got = {
        "megatron": lambda: read_megatron(text, A),
        "torchtitan": lambda: read_torchtitan_py(text),
        "deepspeed": lambda: read_deepspeed(text, A),
        "kempnerforge": lambda: read_kempnerforge(text),
    }[kind]()
    want = {
        "tp": c.tp,
        "pp": c.pp,
        "cp": c.cp,
        "ep": c.ep,
        "v": c.virtual_stages,
        "b": c.micro_batch_size,
        "recompute": c.recompute,
        "fp8": t.precision is Precision.FP8,
        "seq": t.seq_len,
    }
    for k, v in want.items():
        assert got[k] == v, (k, got[k], v, text)
    if A.is_moe and kind != "kempnerforge" and got["etp"] is not None:
        assert got["etp"] == c.etp
    if "global" in got:
        assert got["global"] == seqs
    if "dp" in got:
        assert got["dp"] == c.dp
    if "M" in got:
        assert got["M"] == c.num_microbatches
    if "shape" in got:
        assert got["shape"] == (A.L, A.h, A.a, A.kv)
    if "zero" in got and got["zero"] is not None:
        assert got["zero"] == c.zero_stage
    if "sp" in got:
        assert got["sp"] == (c.sequence_parallel and c.tp > 1)
    assert_overlaps(kind, text, got, c, A, t)


# --- the overlaps the time model assumed, switched on in the snippet ----------------------------


def megatron_refuses(c: ParallelConfig, A: Arch, t: TrainingSpec) -> bool:
    """Overlaps Megatron-LM cannot combine with the layout (arguments.py, transformer_config.py
    @ d98e8a6): tp overlap without sequence parallelism; the MoE all-to-all overlap with pp > 1
    and no virtual stages, or with full recomputation."""
    ov = overlaps_for(t)
    tp = ov.tp and c.tp > 1 and not c.sequence_parallel
    ep = ov.ep and A.is_moe and c.ep > 1
    ep = ep and ((c.pp > 1 and c.virtual_stages == 1) or c.recompute is Recompute.FULL)
    return tp or ep


def assert_overlaps(
    kind: str, text: str, got: dict, c: ParallelConfig, A: Arch, t: TrainingSpec
) -> None:
    """Every overlap the cost model timed the plan with is switched on in the snippet (and no
    other), in the framework's own names; where the framework has no switch, a note says so."""
    H = resolve_cluster(ClusterSpec(num_gpus=c.tp * c.pp * c.cp * c.dp))
    ov = CostModel(A, H, t, SearchSpec()).ctx.overlaps  # what the time model used
    assert ov == overlaps_for(t)
    dp = c.dp * c.cp > 1 and c.zero_stage in ov.dp_stages
    moe_ep = A.is_moe and c.ep > 1
    assert "time model overlaps:" in text
    if kind == "megatron":
        a = got["args"]
        assert ("--tp-comm-overlap" in a) == (ov.tp and c.tp > 1)
        assert ("--overlap-grad-reduce" in a) == dp
        assert ("--overlap-param-gather" in a) == (dp and c.zero_stage >= 1)
        assert (one(a, "--cp-comm-type") == "p2p") == (c.cp > 1)
        ep_on = ov.ep_runs(c.pp, c.virtual_stages, c.recompute is Recompute.FULL)
        assert ("--overlap-moe-expert-parallel-comm" in a) == (moe_ep and ep_on)
        assert ("--moe-enable-deepep" in a) == (moe_ep and ov.ep_dedup)
        if A.is_moe:
            flex = moe_ep and ov.ep_dedup
            assert one(a, "--moe-token-dispatcher-type") == ("flex" if flex else "alltoall")
        # Megatron's own checks on what was switched on (arguments.py @ d98e8a6)
        if "--tp-comm-overlap" in a:
            assert "--sequence-parallel" in a
        if "--overlap-param-gather" in a:
            assert "--overlap-grad-reduce" in a and "--use-distributed-optimizer" in a
        if c.zero_stage >= 2:  # Megatron-FSDP asserts it is not 1 (arguments.py @ d98e8a6)
            assert "CUDA_DEVICE_MAX_CONNECTIONS=1" not in text, text
            assert "Megatron-FSDP refuses 1" in text
        elif c.tp > 1 or c.cp > 1:
            assert "CUDA_DEVICE_MAX_CONNECTIONS" in text
    elif kind == "torchtitan":  # 0.3.0: async TP is CompileConfig's
        comp = got["raw"]["compile"]
        async_tp = ov.tp and c.tp > 1
        assert comp.get("enable_async_tensor_parallel", False) == async_tp
        if async_tp:  # "Async TP requires 'model' in --compile.components and --compile.enable"
            assert comp["enable"] and "model" in comp["components"]
    elif kind == "deepspeed":
        assert json.loads(text)["zero_optimization"]["overlap_comm"] == dp
        if ov.tp and c.tp > 1:
            assert "no tensor-parallel overlap" in text
    elif kind == "kempnerforge" and ov.tp and c.tp > 1:
        assert "no async overlap" in text


# --- a few plans read in detail -----------------------------------------------------------------


def _emit(kind: str, c: ParallelConfig, model: str, **training: object) -> str:
    t = TrainingSpec(**training)
    tokens = c.dp * c.micro_batch_size * c.num_microbatches * t.seq_len
    return emit(kind, c, ModelSpec(preset=model), t, tokens)


def test_uneven_pipeline_is_a_megatron_layout() -> None:
    # 126 layers on pp=16 x v=3 = 48 chunks: expressible with --pipeline-model-parallel-layout
    c = ParallelConfig(
        tp=8, pp=16, dp=16, virtual_stages=3, micro_batch_size=1, num_microbatches=32
    )
    text = _emit("megatron", c, "llama3-405b", seq_len=8192)
    a = shell_args(text, MEGATRON_FLAGS)
    chunks = megatron_layout_chunks(one(a, "--pipeline-model-parallel-layout"))
    assert len(chunks) == 48 and sum(chunks) == 126 and max(chunks) == 3
    layout = one(a, "--pipeline-model-parallel-layout")
    assert layout.startswith("E") and layout.endswith("L")
    assert "--num-virtual-stages-per-pipeline-rank" not in a  # the layout sets v


def test_moe_folding_and_megatron_fsdp() -> None:
    c = ParallelConfig(
        tp=4,
        pp=1,
        dp=8,
        ep=32,
        etp=1,
        micro_batch_size=1,
        num_microbatches=4,
        zero_stage=3,
        recompute=Recompute.SELECTIVE,
    )
    a = shell_args(_emit("megatron", c, "qwen3-235b-a22b", seq_len=4096), MEGATRON_FLAGS)
    assert one(a, "--expert-model-parallel-size") == "32"
    assert one(a, "--expert-tensor-parallel-size") == "1"  # ep spans the tp ranks
    assert one(a, "--kv-channels") == "128"  # Qwen3's head_dim
    assert one(a, "--data-parallel-sharding-strategy") == "optim_grads_params"
    assert "--use-megatron-fsdp" in a and one(a, "--ckpt-format") == "fsdp_dtensor"
    tt = tomllib.loads(
        _emit("torchtitan-toml", c.model_copy(update={"zero_stage": 3}), "qwen3-235b-a22b")
    )
    assert tt["model"] == {"name": "qwen3", "flavor": "235B-A22B"}
    assert tt["parallelism"]["expert_tensor_parallel_degree"] == 1
    py = read_torchtitan_py(_emit("torchtitan", c, "qwen3-235b-a22b"))
    assert py["flavor"] == "235B-A22B" and py["ep"] == 32


def test_deepseek_dense_layers_per_layer_expert_counts() -> None:
    c = ParallelConfig(
        tp=1, pp=16, dp=128, ep=64, micro_batch_size=1, num_microbatches=16, zero_stage=1
    )
    a = shell_args(_emit("megatron", c, "deepseek-v3", seq_len=4096), MEGATRON_FLAGS)
    assert one(a, "--moe-layer-freq") == "([0]*3+[1]*58)"
    assert one(a, "--moe-shared-expert-intermediate-size") == "2048"
    with pytest.raises(ValueError, match="cannot express.*(shared experts|leading dense)"):
        _emit("kempnerforge", c.model_copy(update={"pp": 1, "dp": 2048, "ep": 1}), "deepseek-v3")


def test_what_a_framework_cannot_run_is_refused() -> None:
    c = ParallelConfig(
        tp=8, pp=4, dp=4, virtual_stages=2, micro_batch_size=1, num_microbatches=8, zero_stage=3
    )
    with pytest.raises(
        ValueError, match="megatron cannot express.*with pipelining, not zero_stage 3"
    ):
        _emit("megatron", c, "llama3-70b")  # ZeRO-3 with pipelining
    with pytest.raises(ValueError, match="deepspeed cannot express.*interleaved"):
        _emit("deepspeed", c.model_copy(update={"zero_stage": 1}), "llama3-70b")
    with pytest.raises(ValueError, match="kempnerforge cannot express.*FP8 with tp"):
        c1 = c.model_copy(update={"pp": 1, "virtual_stages": 1, "dp": 16, "zero_stage": 3})
        _emit("kempnerforge", c1, "llama3-70b", precision=Precision.FP8)
    with pytest.raises(ValueError, match="nothing to shard"):
        c2 = ParallelConfig(tp=8, pp=1, dp=1, micro_batch_size=1, num_microbatches=1)
        _emit("torchtitan", c2.model_copy(update={"zero_stage": 3}), "llama3-8b")


def test_default_kind_is_the_request_framework() -> None:
    c = ParallelConfig(tp=1, pp=1, dp=8, micro_batch_size=2, num_microbatches=2, zero_stage=3)
    t = TrainingSpec(seq_len=4096, framework=Framework.TORCHTITAN)
    text = emit(None, c, ModelSpec(preset="llama3-8b"), t, 8 * 2 * 2 * 4096)
    assert read_torchtitan_py(text)["dp"] == 8


def test_unknown_kind_names_it_and_the_supported_kinds() -> None:
    c = ParallelConfig(tp=1, pp=1, dp=8, micro_batch_size=1, num_microbatches=1)
    with pytest.raises(ValueError) as e:
        emit("nemo", c, ModelSpec(preset="llama3-8b"), TrainingSpec(seq_len=4096), 8 * 4096)
    assert "nemo" in str(e.value) and all(k in str(e.value) for k in KINDS)


def test_inconsistent_global_batch_is_an_error() -> None:
    c = ParallelConfig(tp=1, pp=1, dp=8, micro_batch_size=1, num_microbatches=1)
    with pytest.raises(ValueError, match="global_batch_tokens"):
        emit("megatron", c, ModelSpec(preset="llama3-8b"), TrainingSpec(seq_len=4096), 4096)


def test_megatron_launches_the_overlaps_its_profile_is_timed_with() -> None:
    # MEGATRON's timing: --tp-comm-overlap, --overlap-grad-reduce, --overlap-param-gather and
    # Transformer Engine's p2p ring for cp (solver/profiles/), as Megatron-Core's scaling runs
    c = ParallelConfig(tp=4, pp=2, dp=4, cp=2, micro_batch_size=1, num_microbatches=8)
    a = shell_args(_emit("megatron", c, "llama3-70b", seq_len=8192), MEGATRON_FLAGS)
    assert {"--tp-comm-overlap", "--overlap-grad-reduce", "--overlap-param-gather"} <= set(a)
    assert one(a, "--cp-comm-type") == "p2p"
    off = _emit("megatron", c, "llama3-70b", seq_len=8192, tp_comm_overlap=False)
    assert "--tp-comm-overlap" not in shell_args(off, MEGATRON_FLAGS)
    assert "only in the interleaved schedule" in off  # 1F1B does not overlap its sends


def test_megatron_moe_overlap_and_deepep() -> None:
    c = ParallelConfig(
        tp=2, pp=2, dp=16, ep=8, etp=1, micro_batch_size=1, num_microbatches=8, zero_stage=1
    )
    # Megatron refuses the overlap with 1F1B (pp > 1, v = 1) and with full recomputation: the
    # time model times the all-to-all exposed there, and the snippet leaves the switch off
    full = c.model_copy(update={"pp": 1, "dp": 32, "recompute": Recompute.FULL})
    for refused in (c, full):
        text = _emit("megatron", refused, "qwen3-235b-a22b", seq_len=4096, ep_comm_overlap=True)
        assert "--overlap-moe-expert-parallel-comm" not in shell_args(text, MEGATRON_FLAGS)
        assert "all-to-all is timed exposed" in text and "ep all-to-all exposed" in text
    v2 = c.model_copy(update={"virtual_stages": 2})
    text = _emit(
        "megatron",
        v2,
        "qwen3-235b-a22b",
        seq_len=4096,
        ep_comm_overlap=True,
        ep_dispatch_dedup=True,
    )
    a = shell_args(text, MEGATRON_FLAGS)
    assert "--overlap-moe-expert-parallel-comm" in a and "--moe-enable-deepep" in a
    assert a["--moe-token-dispatcher-type"] == ["flex"]  # DeepEP runs on the flex dispatcher


def test_torchtitan_async_tp_only_when_asked_and_with_compile() -> None:
    c = ParallelConfig(tp=8, pp=1, dp=32, micro_batch_size=2, num_microbatches=1, zero_stage=3)
    t = {"seq_len": 8192, "framework": Framework.TORCHTITAN}
    plain = read_torchtitan_py(_emit("torchtitan", c, "llama3-70b", **t))["raw"]
    assert plain["compile"] == {}  # the baseline's
    asked = read_torchtitan_py(_emit("torchtitan", c, "llama3-70b", tp_comm_overlap=True, **t))
    comp = asked["raw"]["compile"]
    assert comp["enable_async_tensor_parallel"] is True
    # the blocks only: the plan billed the eager loss (loss_kernel COMPILED compiles it too)
    assert comp["enable"] is True and comp["components"] == ["model"]
    # the TOML of torchtitan up to 0.2.2 keeps the switch in [parallelism]
    old = tomllib.loads(_emit("torchtitan-toml", c, "llama3-70b", tp_comm_overlap=True, **t))
    assert old["parallelism"]["enable_async_tensor_parallel"] is True
    assert old["compile"] == {"enable": True, "components": ["model"]}
    cp = c.model_copy(update={"dp": 16, "cp": 2})
    ring = tomllib.loads(_emit("torchtitan-toml", cp, "llama3-70b", **t))["parallelism"]
    assert ring["context_parallel_rotate_method"] == "allgather"  # what the profile times


def test_torchtitan_compile_follows_training_compiled_and_the_loss_kernel() -> None:
    c = ParallelConfig(tp=1, pp=1, dp=32, micro_batch_size=2, num_microbatches=1, zero_stage=3)
    t = {"seq_len": 8192, "framework": Framework.TORCHTITAN}
    cases = [
        ({"compiled": True}, ["model"]),
        ({"compiled": True, "loss_kernel": LossKernel.COMPILED}, ["model", "loss"]),
        ({"loss_kernel": LossKernel.COMPILED}, ["loss"]),
    ]
    for knobs, components in cases:
        new = read_torchtitan_py(_emit("torchtitan", c, "llama3-8b", **knobs, **t))["raw"]
        assert new["compile"]["enable"] is True and new["compile"]["components"] == components
        old = tomllib.loads(_emit("torchtitan-toml", c, "llama3-8b", **knobs, **t))
        assert old["compile"] == {"enable": True, "components": components}
    eager = tomllib.loads(_emit("torchtitan-toml", c, "llama3-8b", compiled=False, **t))
    assert "compile" not in eager  # the job config's default: not compiled
    fp8 = _emit("torchtitan", c, "llama3-8b", compiled=True, precision=Precision.FP8, **t)
    assert "model_compile_enabled=True" in fp8


def test_deepspeed_overlap_comm_follows_the_timed_zero_stage() -> None:
    c = ParallelConfig(tp=1, pp=1, dp=8, micro_batch_size=1, num_microbatches=1, zero_stage=3)
    t = {"seq_len": 4096, "framework": Framework.DEEPSPEED}
    z3 = json.loads(_emit("deepspeed", c, "llama3-8b", **t))["zero_optimization"]
    z1 = json.loads(_emit("deepspeed", c.model_copy(update={"zero_stage": 1}), "llama3-8b", **t))[
        "zero_optimization"
    ]
    assert z3["overlap_comm"] is True and z1["overlap_comm"] is False  # DeepSpeed's default
    asked = json.loads(
        _emit(
            "deepspeed",
            c.model_copy(update={"zero_stage": 1}),
            "llama3-8b",
            dp_comm_overlap=True,
            **t,
        )
    )
    assert asked["zero_optimization"]["overlap_comm"] is True
