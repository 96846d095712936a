"""What a solver slot runs: module-level functions, so a worker process can run them as well as a
thread (server.dispatch). Each takes picklable arguments and a `stop` event, and returns the
response message (protobuf messages pickle as their bytes) or raises RpcFailure.

Time limits are computed here from the call's deadline as `time.monotonic()`, a clock every
process of the machine shares, so the time a request waited for a worker is not solve time.
"""

from __future__ import annotations

import functools
import inspect
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

from meshplan.convert import to_proto
from meshplan.server.bounds import check_layouts
from meshplan.server.limits import RpcFailure
from meshplan.server.requests import check_strings, parse
from meshplan.server.validate import Violation, echo, from_solver_error
from meshplan.solver.results import Evaluation, PlanResult, PlanStatus
from meshplan.solver.schema import EvaluateRequest, PlanRequest
from meshplan.v1 import planner_pb2

M = TypeVar("M", bound=Message)
PlanFn = Callable[..., PlanResult]
EvaluateFn = Callable[..., Evaluation]
_NO_PLAN = {"UNKNOWN", "MODEL_INVALID"}  # CP-SAT statuses that mean "nothing found yet"
_OVERRIDES = ("intra_node_gbps", "inter_node_gbps", "peak_bf16_tflops", "hbm_gib")


@dataclass(frozen=True)
class SolveLimits:
    """The server's limits on one solve, and the call's deadline (time.monotonic())."""

    deadline: float
    default_time_limit_s: float
    max_time_limit_s: float
    deadline_reserve: float
    deadline_margin_s: float
    workers_per_solve: int


def plan_call(
    req: PlanRequest,
    limits: SolveLimits,
    prefix: str = "",
    plan_fn: PlanFn | None = None,
    *,
    stop: threading.Event,
) -> tuple[str, planner_pb2.PlanResponse]:
    """The plan under the call's limits: (its status, the response); RpcFailure if no plan."""
    req, capped = limited(req, limits)
    try:
        if plan_fn is None:
            from meshplan.solver.planner import plan

            result = plan(req, stop_event=stop)
        elif _takes_stop_event(plan_fn):
            result = plan_fn(req, stop_event=stop)
        else:
            result = plan_fn(req)
    except (ValueError, KeyError, OverflowError) as err:
        raise invalid(err, req, prefix) from err
    except TimeoutError as err:  # stopped, or out of time, before any plan was found
        code = "CANCELLED" if stop.is_set() and not capped else "DEADLINE_EXCEEDED"
        raise RpcFailure(grpc.StatusCode[code], f"no plan found: {err}") from err
    if stop.is_set():  # the call ended (cancelled, or its deadline passed) mid-solve
        raise RpcFailure(grpc.StatusCode.CANCELLED, "call ended during the solve")
    found = result.status != PlanStatus.INFEASIBLE
    if capped and not found and result.solver is not None and result.solver.status in _NO_PLAN:
        raise RpcFailure(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            f"no plan found within the deadline ({req.options.time_limit_s:.3f} s of solving)",
        )
    return result.status.value, answer_proto(result, planner_pb2.PlanResponse, req, prefix)


def plan_bytes_call(
    data: bytes,
    max_string_chars: int,
    limits: SolveLimits,
    prefix: str = "",
    plan_fn: PlanFn | None = None,
    *,
    stop: threading.Event,
) -> tuple[str, planner_pb2.PlanResponse]:
    """plan_call for a request still in its wire form (a batch item): its strings checked and
    the request parsed here, in the worker, so the event loop only forwards bytes (the same
    INVALID_ARGUMENT answers as when the servicer parses)."""
    msg = planner_pb2.PlanRequest.FromString(data)
    check_strings(msg, max_string_chars, prefix)
    return plan_call(parse(msg, PlanRequest, prefix), limits, prefix, plan_fn, stop=stop)


def evaluate_call(
    req: EvaluateRequest, evaluate_fn: EvaluateFn | None = None, *, stop: threading.Event
) -> planner_pb2.EvaluateResponse:
    """One layout scored; INVALID_ARGUMENT for what the cost model refuses or cannot hold."""
    check_layouts(req)
    try:
        if evaluate_fn is None:
            from meshplan.solver.planner import evaluate

            result = evaluate(req)
        else:
            result = evaluate_fn(req)
    except (ValueError, KeyError, OverflowError) as err:
        raise invalid(err, req) from err
    return answer_proto(result, planner_pb2.EvaluateResponse, req)


def limited(req: PlanRequest, limits: SolveLimits) -> tuple[PlanRequest, bool]:
    """The request with its time limit capped by the settings and the call's deadline.

    Returns the request and whether the deadline (not the request) set the limit.
    """
    opts = req.options
    asked = opts.time_limit_s if "time_limit_s" in opts.model_fields_set else None
    limit = min(asked or limits.default_time_limit_s, limits.max_time_limit_s)
    left = limits.deadline - time.monotonic()
    remaining = left * (1 - limits.deadline_reserve) - limits.deadline_margin_s
    capped = remaining < limit
    if capped:
        limit = remaining
        if limit <= 0:
            raise RpcFailure(grpc.StatusCode.DEADLINE_EXCEEDED, "no time left to solve")
    workers = limits.workers_per_solve
    if "num_workers" in opts.model_fields_set:
        workers = min(opts.num_workers, workers)
    options = opts.model_copy(update={"time_limit_s": limit, "num_workers": workers})
    return req.model_copy(update={"options": options}), capped


# The request's sizes, largest first named when an answer cannot hold what they imply.
_SIZES = (
    "model.num_layers",
    "model.hidden_size",
    "model.ffn_hidden_size",
    "model.vocab_size",
    "model.moe.num_experts",
    "model.moe.expert_ffn_hidden_size",
    "training.seq_len",
    "training.global_batch_tokens",
    "training.critical_batch_tokens",
    "config.micro_batch_size",
    "config.num_microbatches",
    "config.dp",
    "search.micro_batch_size",
    "search.num_microbatches",
    "cluster.num_gpus",
)


def answer_proto(result: Any, message_cls: type[M], req: Any, prefix: str = "") -> M:
    """The answer as its response message; INVALID_ARGUMENT naming the request's largest size
    when a figure of the answer is beyond its proto field (int64): the request asked for
    something too large to state, which no retry changes."""
    try:
        return to_proto(result, message_cls)
    except (json_format.ParseError, OverflowError, ValueError) as err:
        raise unrepresentable(err, req, prefix) from err


def unrepresentable(err: Exception, req: Any, prefix: str = "") -> RpcFailure:
    """INVALID_ARGUMENT for an answer beyond its proto fields, naming the size that caused it."""
    what = ".".join(re.findall(r"Failed to parse (\w+) field", str(err))) or "answer"
    sizes = []
    for path in _SIZES:
        value: Any = req
        for part in path.split("."):
            value = getattr(value, part, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            sizes.append((value, path))
    value, path = max(sizes, default=(0, "request"))
    field = f"{prefix}.{path}" if prefix else path
    text = (
        f"the answer's {what} would be beyond a 64-bit integer: the request's sizes are far "
        f"too large (its largest, {path}, is {value:,})"
    )
    return RpcFailure(
        grpc.StatusCode.INVALID_ARGUMENT, f"{field}: {text}", [Violation(field, text)]
    )


def invalid(err: Exception, req: Any, prefix: str = "") -> RpcFailure:
    """The solver's ValueError / KeyError / OverflowError on a valid-looking request."""
    if isinstance(err, OverflowError):  # numbers beyond the model's integers: name the overrides
        cluster = req.cluster
        fields = [f for f in _OVERRIDES if getattr(cluster, f, None) is not None]
        where = [f"{prefix}.cluster.{f}" if prefix else f"cluster.{f}" for f in fields]
        text = f"the numbers this request implies exceed the planner's integer range: {err}"
        violations = [
            Violation(w, f"{text} (got {echo(getattr(cluster, f))})")
            for w, f in zip(where, fields, strict=True)
        ]
        return RpcFailure(
            grpc.StatusCode.INVALID_ARGUMENT, text, violations or [Violation(prefix, text)]
        )
    violations = from_solver_error(err, req, prefix)
    return RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, violations[0].description, violations)


def _takes_stop_event(fn: Callable[..., Any]) -> bool:
    """Whether `fn` accepts `stop_event`: read once per function (inspect.signature took
    ~0.05 ms, a twentieth of a cached plan's round trip), then remembered."""
    try:
        return _stop_event_params(fn)
    except TypeError:  # unhashable: not remembered
        return _accepts_stop_event(fn)


@functools.lru_cache(maxsize=64)
def _stop_event_params(fn: Callable[..., Any]) -> bool:
    return _accepts_stop_event(fn)


def _accepts_stop_event(fn: Callable[..., Any]) -> bool:
    try:
        return "stop_event" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
