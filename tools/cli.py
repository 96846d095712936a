"""`meshplan`: plan, evaluate, catalog, serve, batch, sweep, ladder. Tables for people, --json
for machines, PNGs with --plot."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from meshplan.tools.flags import add_request_flags, one_line, request_from_flags
from meshplan.tools.render import render_evaluation, render_plan

if TYPE_CHECKING:
    from meshplan.solver.results import Evaluation, PlanResult
    from meshplan.solver.schema import EvaluateRequest, PlanRequest


def cmd_plan(a: argparse.Namespace) -> int:
    from meshplan.solver import PlanRequest, plan

    req = PlanRequest.model_validate(request_from_flags(a, evaluate=False))
    if a.server:
        from meshplan.tools.batch import remote_plan

        res = remote_plan(a.server, req)
    else:
        res = plan(req)
    if a.json:
        print(res.model_dump_json(indent=2))
    else:
        print(render_plan(req, res))
    if a.emit and res.config is not None:
        from meshplan.tools.export import emit

        print(
            emit(a.emit, res.config, req.model, req.training, res.performance.global_batch_tokens)
        )
    if a.plot:
        _plot_memory(a, req, res)
    return 0


def _plot_memory(
    a: argparse.Namespace, req: PlanRequest | EvaluateRequest, res: PlanResult | Evaluation
) -> None:
    from meshplan.solver.hardware import resolve_cluster
    from meshplan.tools.plots import describe, plan_memory_plot

    path = Path(a.model or "model")
    label = req.model.preset or (path.parent.name if path.name == "config.json" else path.stem)
    hbm = resolve_cluster(req.cluster).hbm
    out = plan_memory_plot(a.plot, label, req.cluster.gpu, req.cluster.num_gpus, hbm, res)
    print(f"meshplan: {describe(out, 'memory bill')}", file=sys.stderr)


def cmd_evaluate(a: argparse.Namespace) -> int:
    from meshplan.solver import EvaluateRequest, evaluate

    req = EvaluateRequest.model_validate(request_from_flags(a, evaluate=True))
    if a.server:
        from meshplan.tools.batch import remote_evaluate

        res = remote_evaluate(a.server, req)
    else:
        res = evaluate(req)
    print(res.model_dump_json(indent=2) if a.json else render_evaluation(req, res))
    if a.plot:
        _plot_memory(a, req, res)
    return 0


def cmd_catalog(a: argparse.Namespace) -> int:
    from meshplan.solver.catalog import get_gpu, get_model, gpu_names, model_names

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
    add_request_flags(p, evaluate=False)
    p.set_defaults(fn=cmd_plan)
    e = sub.add_parser("evaluate", help="score one layout")
    add_request_flags(e, evaluate=True)
    e.set_defaults(fn=cmd_evaluate)
    c = sub.add_parser("catalog", help="list GPUs and models")
    c.add_argument("--json", action="store_true")
    c.set_defaults(fn=cmd_catalog)
    from meshplan.server.cli import add_serve_arguments, run_serve
    from meshplan.tools.batch import add_batch_arguments, run_batch

    s = sub.add_parser("serve", help="run the gRPC server")
    add_serve_arguments(s)
    s.set_defaults(fn=run_serve)
    b = sub.add_parser("batch", help="send many plan requests to a server (PlanBatch)")
    add_batch_arguments(b)
    b.set_defaults(fn=run_batch)
    from meshplan.tools.cli_sweep import (
        add_ladder_arguments,
        add_sweep_arguments,
        cmd_ladder,
        cmd_sweep,
    )

    w = sub.add_parser("sweep", help="plan a grid of models x GPU counts x sequence lengths")
    add_sweep_arguments(w)
    w.set_defaults(fn=cmd_sweep)
    ld = sub.add_parser("ladder", help="seed 000's ladder: the wall and the axis each rung adds")
    add_ladder_arguments(ld)
    ld.set_defaults(fn=cmd_ladder)
    from meshplan.tools.cmd_scheduler import add_scheduler_commands

    add_scheduler_commands(sub)  # curve, replan, admit, front
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except (ValidationError, ValueError, KeyError, json.JSONDecodeError, OSError) as e:
        print(f"meshplan: {one_line(e)}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001  typed client errors etc.: one line, never a traceback
        print(f"meshplan: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
