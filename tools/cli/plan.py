"""`meshplan plan` and `meshplan evaluate`: one request, one answer.

stdout carries exactly one artefact: the table, the JSON (--json) or the launcher config
(--emit; the table then goes to stderr). Everything else (the "wrote FILE" of --plot, notes,
errors) goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
import threading
from dataclasses import field
from typing import TYPE_CHECKING

from meshplan.solver.record import record
from meshplan.tools.cli.flags import add_request_flags
from meshplan.tools.cli.glossary import PLAN_EPILOG
from meshplan.tools.cli.inputs import model_label, request_from_flags
from meshplan.tools.cli.interrupt import interruptible
from meshplan.tools.cli.main import EXIT_INFEASIBLE, EXIT_OK, imports_done

if TYPE_CHECKING:
    from meshplan.solver.results import Evaluation, PlanResult
    from meshplan.solver.schema import EvaluateRequest, PlanRequest


def add_plan_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of `meshplan plan`, and the binding walls and warnings in its --help."""
    add_request_flags(p, evaluate=False)
    p.epilog = PLAN_EPILOG + "\n" + (p.epilog or "")


def add_evaluate_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of `meshplan evaluate`."""
    add_request_flags(p, evaluate=True)


def emit_kind(flag: str | None, req: PlanRequest) -> str | None:
    """The launcher of --emit: as given, or with no value the request's framework."""
    if flag != "auto":
        return flag
    framework = req.training.framework.value
    if framework == "GENERIC":
        from meshplan.tools.cli.flags import EMIT_KINDS

        raise ValueError(
            "--emit: the framework is GENERIC, which has no launcher: name one (--emit "
            f"{'|'.join(EMIT_KINDS)}) or give --framework"
        )
    return framework.lower()


@record
class Answer:
    """What a command prints, made on the worker thread, printed by the main thread: Ctrl-C
    lands in the main thread's wait, never inside an import or a solve (an extension module
    interrupted while it initialises turns KeyboardInterrupt into ImportError, or loses it)."""

    stdout: str = ""
    stderr: list[str] = field(default_factory=list)
    status: int = EXIT_OK

    def show(self) -> int:
        if self.stdout:
            sys.stdout.write(self.stdout if self.stdout.endswith("\n") else self.stdout + "\n")
        for line in self.stderr:
            print(line, file=sys.stderr)
        return self.status


def cmd_plan(a: argparse.Namespace) -> int:
    if a.json and a.emit:
        raise ValueError("--emit: not with --json: stdout carries one document, pick one")
    return interruptible(lambda stop: _plan(a, stop)).show()


def _plan(a: argparse.Namespace, stop: threading.Event) -> Answer:
    from meshplan.solver.schema import PlanRequest
    from meshplan.tools.render.tables import render_plan

    req = PlanRequest.model_validate(request_from_flags(a, evaluate=False))
    kind = emit_kind(a.emit, req)
    if a.server:
        from meshplan.tools.cli.batch import remote_plan

        imports_done()
        res = remote_plan(a.server, req)
    else:
        from meshplan.solver.planner import plan

        imports_done()
        res = plan(req, stop)
    label = model_label(a.model, req.model.preset)
    out = Answer(status=EXIT_OK if res.config is not None else EXIT_INFEASIBLE)
    if kind:
        out.stderr.append(render_plan(req, res, label))  # the plan, for the person
        if res.config is not None:
            from meshplan.tools.export.emit import emit

            batch = res.performance.global_batch_tokens
            out.stdout = emit(kind, res.config, req.model, req.training, batch, req.cluster)
    else:
        out.stdout = res.model_dump_json(indent=2) if a.json else render_plan(req, res, label)
    if a.plot:
        out.stderr.append(_plot_memory(a.plot, label, req, res))
    return out


def cmd_evaluate(a: argparse.Namespace) -> int:
    return interruptible(lambda stop: _evaluate(a)).show()


def _evaluate(a: argparse.Namespace) -> Answer:
    from meshplan.solver.schema import EvaluateRequest
    from meshplan.tools.render.tables import render_evaluation

    req = EvaluateRequest.model_validate(request_from_flags(a, evaluate=True))
    if a.server:
        from meshplan.tools.cli.batch import remote_evaluate

        imports_done()
        res = remote_evaluate(a.server, req)
    else:
        from meshplan.solver.planner import evaluate

        imports_done()
        res = evaluate(req)
    label = model_label(a.model, req.model.preset)
    text = res.model_dump_json(indent=2) if a.json else render_evaluation(req, res, label)
    out = Answer(stdout=text, status=EXIT_OK if res.fits else EXIT_INFEASIBLE)
    if a.plot:
        out.stderr.append(_plot_memory(a.plot, label, req, res))
    return out


def _plot_memory(
    path: str, label: str, req: PlanRequest | EvaluateRequest, res: PlanResult | Evaluation
) -> str:
    """Draw the memory bill; the line that says so."""
    from meshplan.solver.hardware import resolve_cluster
    from meshplan.tools.render.plots import describe, plan_memory_plot

    hbm = resolve_cluster(req.cluster).hbm
    out = plan_memory_plot(path, label, req.cluster.gpu, req.cluster.num_gpus, hbm, res)
    return f"meshplan: {describe(out, 'memory bill')}"
