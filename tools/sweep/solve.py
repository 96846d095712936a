"""Sweeps: a grid of models x GPU types x precisions x sequence lengths x GPU counts, each cell one
plan request, solved in a process pool (in-process) or through a server's PlanBatch.

Every cell has a key (a hash of the model label and the whole request except `model` and
`options`: how long a solve may take does not change what is asked), so a rerun skips the cells
already written (tools/sweep/files.py). A cell that cannot be asked (a bad model name, a config that
does not load, a value the request rejects) is an ERROR row with the reason, never a traceback.
"""

from __future__ import annotations

import hashlib
import json
import signal
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any

from pydantic import ValidationError

from meshplan.solver.results import PlanResult
from meshplan.solver.schema import PlanRequest
from meshplan.tools.cli.interrupt import interruptible, sigterm_as_interrupt
from meshplan.tools.cli.messages import one_line, shorten
from meshplan.tools.sweep.grid import ModelItem


@dataclass(frozen=True)
class Job:
    """One cell of the grid: the model it names, its plan request (as JSON) and its key."""

    model: ModelItem
    request: dict[str, Any]
    key: str


@dataclass
class Outcome:
    """A solved (or failed) cell."""

    job: Job
    result: PlanResult | None = None
    error: str | None = None


@dataclass
class Stats:
    """What a sweep run did."""

    total: int = 0
    skipped: int = 0
    solved: int = 0
    statuses: dict[str, int] = field(default_factory=dict)


def describe_error(err: BaseException) -> str:
    """One line naming the field (pydantic), the unknown name (KeyError) or the failure, with
    echoed values cut short."""
    if isinstance(err, ValidationError | KeyError):
        return one_line(err)
    if isinstance(err, TimeoutError):
        return shorten(f"{err} (time limit; --time-limit gives more)")
    if isinstance(err, ValueError):
        return shorten(f"invalid request: {err}")
    return shorten(f"{type(err).__name__}: {err}")


def _canonical(request: dict[str, Any]) -> dict[str, Any]:
    rest = {k: v for k, v in request.items() if k not in ("model", "options")}
    try:  # defaults filled in, so `--seq-len 8192` and no flag give the same key
        full = PlanRequest.model_validate({"model": {"preset": "x"}, **rest})
        return full.model_dump(mode="json", exclude={"model", "options"})
    except ValidationError:
        return rest


def job_key(label: str, request: dict[str, Any]) -> str:
    """The resume key of a cell: 16 hex digits over the model label and the request knobs."""
    text = json.dumps({"model": label, "request": _canonical(request)}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def build_jobs(
    models: Sequence[ModelItem],
    gpus: Sequence[int],
    seq_lens: Sequence[int | None] = (None,),
    gpu_types: Sequence[str | None] = (None,),
    precisions: Sequence[str | None] = (None,),
    base: dict[str, Any] | None = None,
) -> list[Job]:
    """The grid's cells in order model, GPU type, precision, sequence length, GPU count."""
    jobs: dict[str, Job] = {}
    for m in models:
        for gpu in gpu_types:
            for prec in precisions:
                for s in seq_lens:
                    for n in gpus:
                        req = json.loads(json.dumps(base or {}))
                        req["model"] = m.spec or {"preset": m.label}
                        cluster = req.setdefault("cluster", {})
                        cluster["num_gpus"] = n
                        if gpu:
                            cluster["gpu"] = gpu
                        training = req.setdefault("training", {})
                        if s:
                            training["seq_len"] = s
                        if prec:
                            training["precision"] = prec
                        key = job_key(m.label, req)
                        jobs.setdefault(key, Job(m, req, key))
    return list(jobs.values())


def solve_request(
    request: dict[str, Any], stop: threading.Event | None = None
) -> tuple[dict[str, Any] | None, str | None]:
    """Plan one request in this process: (result as JSON, None) or (None, the error in one line).

    Module-level so a process pool can pickle it.
    """
    from meshplan.server.memory import settle_heap
    from meshplan.solver.planner import plan

    try:
        return plan(PlanRequest.model_validate(request), stop).model_dump(mode="json"), None
    except Exception as err:  # noqa: BLE001  any failure of one cell is that cell's error row
        return None, describe_error(err)
    finally:
        settle_heap()  # as a server's solver process does after each call


def split_unloaded(jobs: Iterable[Job]) -> tuple[list[Outcome], list[Job]]:
    """The cells whose model did not load, answered at once with its error, and the rest."""
    jobs = list(jobs)
    failed = [Outcome(j, error=j.model.error) for j in jobs if j.model.error]
    return failed, [j for j in jobs if not j.model.error]


def solve_local(jobs: Sequence[Job], workers: int = 0) -> Iterator[Outcome]:
    """Solve in-process: a pool of `workers` processes (0: one per usable CPU, as the server
    counts them), in the order they finish."""
    from meshplan.server.pool import one_thread_per_library
    from meshplan.server.settings import usable_cpus

    failed, todo = split_unloaded(jobs)
    yield from failed
    workers = min(workers or usable_cpus(), len(todo))
    if workers <= 1:
        for job in todo:
            yield _outcome(job, *interruptible(lambda stop, r=job.request: solve_request(r, stop)))
        return
    # spawn: a forked child would inherit the parent's threads (gRPC, OR-Tools) mid-flight.
    # The workers ignore Ctrl-C (they start with SIGINT ignored, which Python keeps): the parent
    # hears it, stops them and says so once.
    # SIGTERM too: it raises in this thread like Ctrl-C, so the workers are stopped, not orphaned.
    with (
        sigterm_as_interrupt(),
        ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool,
    ):
        main = threading.current_thread() is threading.main_thread()  # signals: main only
        before = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:  # submit() starts the worker processes, each with one BLAS thread (server.pool)
            with one_thread_per_library():
                futures: dict[Future, Job] = {
                    pool.submit(solve_request, j.request): j for j in todo
                }
        finally:
            if main:
                signal.signal(signal.SIGINT, before)
        try:
            for fut in as_completed(futures):
                yield _outcome(futures[fut], *fut.result())
        except KeyboardInterrupt:
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                proc.terminate()  # their cells are not written: a rerun resumes them
            raise
        except BaseException:
            for fut in futures:  # the consumer stopped early: drop what has not started
                fut.cancel()
            raise


def _outcome(job: Job, result: dict[str, Any] | None, error: str | None) -> Outcome:
    if result is None:
        return Outcome(job, error=error)
    return Outcome(job, result=PlanResult.model_validate(result))


def solve_remote(
    jobs: Sequence[Job], servers: Sequence[str], timeout: float = 3600.0, chunk: int = 256
) -> Iterator[Outcome]:
    """Solve through PlanBatch on `servers` (round-robin). A failed call raises PlannerError."""
    from meshplan.client.exceptions import PlannerError
    from meshplan.client.sync import PlannerClient, plan_message
    from meshplan.tools.sweep.remote import send_chunks

    ready: list[tuple[Job, PlanRequest]] = []
    for job in jobs:
        if job.model.error:
            yield Outcome(job, error=job.model.error)
            continue
        try:
            req = PlanRequest.model_validate(job.request)
            plan_message(req)  # a value the proto cannot hold fails this cell alone
        except (ValidationError, PlannerError) as err:
            msg = describe_error(err) if isinstance(err, ValidationError) else err.message
            yield Outcome(job, error=msg)
            continue
        ready.append((job, req))
    with PlannerClient(list(servers)) as client:
        reqs = [r for _, r in ready]
        for item in send_chunks(client, reqs, chunk, timeout, in_flight=len(servers)):
            job = ready[item.index][0]
            if item.error is not None:
                err = item.error
                fields = "; ".join(
                    f"{v.field}: {v.description}" for v in getattr(err, "violations", [])
                )
                yield Outcome(job, error=f"{err.code.name}: {fields or err.message}")
            else:
                yield Outcome(job, result=item.result)


def flat_row(out: Outcome) -> dict[str, Any]:
    """The CSV fields of a cell: what was asked, then the plan (or why there is none)."""
    req, res = out.job.request, out.result
    row: dict[str, Any] = {"key": out.job.key, "model": out.job.model.label} | _asked(req)
    if res is None:
        return row | {"status": "ERROR", "error": out.error or "unknown error"}
    row |= {
        "status": res.status.value,
        "total_params": res.num_parameters.total,
        "active_params": res.num_parameters.active,
        "binding_wall": res.binding_wall.value,
        "warnings": " | ".join(res.warnings),
    }
    if res.batch is not None:
        row["batch_cap_tokens"] = res.batch.cap_tokens
    if res.config is not None:
        row |= res.config.model_dump(mode="json")
    if res.performance is not None:
        p = res.performance
        row |= {
            "num_gpus_used": p.num_gpus_used,
            "plan_global_batch_tokens": p.global_batch_tokens,
            "step_time_s": p.step_time_s,
            "tokens_per_s": p.tokens_per_s,
            "mfu": p.mfu,
            "model_flops_per_token": p.model_flops_per_token,
            "bubble_fraction": p.bubble_fraction,
        }
    if res.memory is not None:
        row |= {"memory_total_bytes": res.memory.total, "hbm_bytes": res.memory.hbm}
    if res.explanation is not None:
        row |= {"reason": res.explanation.reason, "min_gpus": res.explanation.min_gpus}
    if res.solver is not None:
        row |= {"solver_status": res.solver.status, "wall_time_s": res.solver.wall_time_s}
    return row


def _asked(req: dict[str, Any]) -> dict[str, Any]:
    try:
        r = PlanRequest.model_validate(req)
    except ValidationError:  # a bad cell: what it asked, as written
        cl, tr = req.get("cluster", {}), req.get("training", {})
        return {"gpu": cl.get("gpu"), "num_gpus": cl.get("num_gpus"), "seq_len": tr.get("seq_len")}
    c, t = r.cluster, r.training
    return {
        "gpu": c.gpu,
        "num_gpus": c.num_gpus,
        "seq_len": t.seq_len,
        "precision": t.precision.value,
        "global_batch_tokens": t.global_batch_tokens,
        "critical_batch_tokens": t.critical_batch_tokens,
        "train_tokens": t.train_tokens,
    }


def full_row(out: Outcome) -> dict[str, Any]:
    """The JSON line of a cell: the flat fields, the request and the whole result."""
    result = out.result.model_dump(mode="json") if out.result is not None else None
    return flat_row(out) | {"request": out.job.request, "result": result}


def pending(jobs: Iterable[Job], done: set[str]) -> list[Job]:
    """The cells whose key is not written yet."""
    return [j for j in jobs if j.key not in done]
