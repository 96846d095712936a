"""`meshplan`: plan, evaluate, catalog, serve, batch, sweep, ladder. Tables for people, --json
for machines, PNGs with --plot."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from solver.render import render_evaluation, render_plan

if TYPE_CHECKING:
    from solver.results import Evaluation, PlanResult
    from solver.schema import EvaluateRequest, PlanRequest

PINS = ("tp", "pp", "dp", "cp", "ep", "virtual_stages", "micro_batch_size", "num_microbatches")


def _common(p: argparse.ArgumentParser, evaluate: bool) -> None:
    p.add_argument("--request", help="a full request as JSON (the contract's field names)")
    p.add_argument("--model", help="catalog name (e.g. llama3-70b) or a HF config.json path")
    p.add_argument("--gpu", help="catalog GPU (default h100-sxm-80gb)")
    p.add_argument("--gpus", type=int, help="number of GPUs")
    p.add_argument("--gpus-per-node", type=int)
    p.add_argument("--hbm-gib", type=float)
    p.add_argument("--seq-len", type=int)
    p.add_argument("--global-batch-tokens", type=int)
    p.add_argument("--critical-batch-tokens", type=int)
    p.add_argument("--precision", choices=["BF16", "FP8"])
    for name in PINS:
        p.add_argument("--" + name.replace("_", "-"), type=int, dest=name)
    p.add_argument("--zero-stage", type=int, choices=[0, 1, 2, 3])
    p.add_argument("--recompute", choices=["NONE", "SELECTIVE", "FULL"])
    p.add_argument("--sequence-parallel", choices=["true", "false"])
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--server", help="HOST:PORT of a meshplan server (default: in-process)")
    p.add_argument("--plot", help="draw the memory bill against HBM as a PNG to this path")
    if not evaluate:
        p.add_argument("--top-k", type=int, help="distinct alternatives to return")
        p.add_argument("--time-limit", type=float, help="solver time limit (s)")
        p.add_argument("--allow-fewer-gpus", action="store_true")
        p.add_argument("--framework", choices=["ANY", "KEMPNERFORGE"])
        p.add_argument(
            "--emit",
            choices=["megatron", "torchtitan", "deepspeed", "kempnerforge"],
            help="print a launcher snippet for the plan",
        )


def _model(value: str) -> dict:
    path = Path(value)
    if value.endswith(".json") or path.is_dir():
        from solver.hf_config import load_hf_config

        return load_hf_config(path).model_dump(exclude_none=True)
    return {"preset": value}


def _request(a: argparse.Namespace, evaluate: bool) -> dict:
    req: dict = json.loads(Path(a.request).read_text()) if a.request else {}
    model, cluster = req.setdefault("model", {}), req.setdefault("cluster", {})
    training, search = req.setdefault("training", {}), req.setdefault("search", {})
    if a.model:
        model.update(_model(a.model))
    for flag, key in (
        ("gpu", "gpu"),
        ("gpus", "num_gpus"),
        ("gpus_per_node", "gpus_per_node"),
        ("hbm_gib", "hbm_gib"),
    ):
        if getattr(a, flag) is not None:
            cluster[key] = getattr(a, flag)
    for key in ("seq_len", "global_batch_tokens", "critical_batch_tokens", "precision"):
        if getattr(a, key) is not None:
            training[key] = getattr(a, key)
    pins = {
        k: getattr(a, k) for k in (*PINS, "zero_stage", "recompute") if getattr(a, k) is not None
    }
    if a.sequence_parallel is not None:
        pins["sequence_parallel"] = a.sequence_parallel == "true"
    if evaluate:
        req.pop("search", None)
        cfg = req.setdefault("config", {})
        cfg.update(pins)
        return req
    search.update(pins)
    if a.allow_fewer_gpus:
        search["allow_fewer_gpus"] = True
    if a.framework:
        search["framework"] = a.framework
    opts = req.setdefault("options", {})
    if a.top_k is not None:
        opts["top_k"] = a.top_k
    if a.time_limit is not None:
        opts["time_limit_s"] = a.time_limit
    return req


def _one_line(e: Exception) -> str:
    if isinstance(e, ValidationError):
        parts = []
        for err in e.errors():
            loc = ".".join(str(x) for x in err["loc"])
            parts.append(f"{loc}: {err['msg']} (got {err.get('input')!r})")
        return "invalid request: " + "; ".join(parts)
    if isinstance(e, KeyError):
        return f"invalid request: {e.args[0]}"
    return f"invalid request: {e}"


def cmd_plan(a: argparse.Namespace) -> int:
    from solver import PlanRequest, plan

    req = PlanRequest.model_validate(_request(a, evaluate=False))
    if a.server:
        from client.cli import remote_plan

        res = remote_plan(a.server, req)
    else:
        res = plan(req)
    if a.json:
        print(res.model_dump_json(indent=2))
    else:
        print(render_plan(req, res))
    if a.emit and res.config is not None:
        from solver.export import emit

        print(
            emit(a.emit, res.config, req.model, req.training, res.performance.global_batch_tokens)
        )
    if a.plot:
        _plot_memory(a, req, res)
    return 0


def _plot_memory(
    a: argparse.Namespace, req: PlanRequest | EvaluateRequest, res: PlanResult | Evaluation
) -> None:
    from solver.hardware import resolve_cluster
    from solver.plots import describe, plan_memory_plot

    path = Path(a.model or "model")
    label = req.model.preset or (path.parent.name if path.name == "config.json" else path.stem)
    hbm = resolve_cluster(req.cluster).hbm
    out = plan_memory_plot(a.plot, label, req.cluster.gpu, req.cluster.num_gpus, hbm, res)
    print(f"meshplan: {describe(out, 'memory bill')}", file=sys.stderr)


def cmd_evaluate(a: argparse.Namespace) -> int:
    from solver import EvaluateRequest, evaluate

    req = EvaluateRequest.model_validate(_request(a, evaluate=True))
    if a.server:
        from client.cli import remote_evaluate

        res = remote_evaluate(a.server, req)
    else:
        res = evaluate(req)
    print(res.model_dump_json(indent=2) if a.json else render_evaluation(req, res))
    if a.plot:
        _plot_memory(a, req, res)
    return 0


def cmd_catalog(a: argparse.Namespace) -> int:
    from solver.catalog import get_gpu, get_model, gpu_names, model_names

    gpus = [get_gpu(n) for n in gpu_names()]
    models = [get_model(n) for n in model_names()]
    if a.json:
        print(
            json.dumps(
                {
                    "gpus": [g.model_dump() for g in gpus],
                    "models": [m.model_dump() for m in models],
                },
                indent=2,
            )
        )
        return 0
    print(f"{'GPU':<16}{'HBM GiB':>8}{'BF16 TF':>9}{'FP8 TF':>8}{'NVL GB/s':>9}{'IB GB/s':>8}")
    for g in gpus:
        print(
            f"{g.name:<16}{g.hbm_gib:>8g}{g.peak_bf16_tflops:>9g}{g.peak_fp8_tflops:>8g}"
            f"{g.intra_node_gbps:>9g}{g.inter_node_gbps:>8g}"
        )
    print(
        f"\n{'model':<18}{'layers':>7}{'hidden':>7}{'heads':>6}{'kv':>4}{'experts':>8}{'params':>9}"
    )
    for m in models:
        e = f"{m.moe.num_experts}x{m.moe.top_k}" if m.moe else "-"
        print(
            f"{m.name:<18}{m.num_layers:>7}{m.hidden_size:>7}{m.num_attention_heads:>6}"
            f"{m.num_kv_heads:>4}{e:>8}{m.published_params_b:>8g}B"
        )
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="meshplan", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="choose the best layout")
    _common(p, evaluate=False)
    p.set_defaults(fn=cmd_plan)
    e = sub.add_parser("evaluate", help="score one layout")
    _common(e, evaluate=True)
    e.set_defaults(fn=cmd_evaluate)
    c = sub.add_parser("catalog", help="list GPUs and models")
    c.add_argument("--json", action="store_true")
    c.set_defaults(fn=cmd_catalog)
    from client.cli import add_batch_arguments, run_batch
    from server.cli import add_serve_arguments, run_serve

    s = sub.add_parser("serve", help="run the gRPC server")
    add_serve_arguments(s)
    s.set_defaults(fn=run_serve)
    b = sub.add_parser("batch", help="send many plan requests to a server (PlanBatch)")
    add_batch_arguments(b)
    b.set_defaults(fn=run_batch)
    from solver.cli_sweep import add_ladder_arguments, add_sweep_arguments, cmd_ladder, cmd_sweep

    w = sub.add_parser("sweep", help="plan a grid of models x GPU counts x sequence lengths")
    add_sweep_arguments(w)
    w.set_defaults(fn=cmd_sweep)
    ld = sub.add_parser("ladder", help="seed 000's ladder: the wall and the axis each rung adds")
    add_ladder_arguments(ld)
    ld.set_defaults(fn=cmd_ladder)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except (ValidationError, ValueError, KeyError, json.JSONDecodeError, OSError) as e:
        print(f"meshplan: {_one_line(e)}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001  typed client errors etc.: one line, never a traceback
        print(f"meshplan: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
