"""What a solver slot runs to prepare a large scheduler query: the request (as its wire bytes)
parsed in steps, checked, keyed, and its observations fitted, in a worker process when the pool
has them, so the server process never holds the GIL for the second or more a request of 1 MiB
with thousands of observations takes to convert and fit (the event loop, and health checks,
would wait behind it). The query then runs on a query thread without its observations, with
their fit, its answers keyed by their digest (Fit.source)."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import Message
from pydantic import BaseModel

from meshplan.server.bounds import check_layouts
from meshplan.server.limits import RpcFailure
from meshplan.server.requests import check_strings, parse_in_steps, parse_wire
from meshplan.server.validate import Violation, shorten
from meshplan.solver.scheduler import (
    AdmitRequest,
    Budget,
    CurveRequest,
    FrontRequest,
    QueryStopped,
    ReplanRequest,
    SchedulerInputError,
    cache_key,
)
from meshplan.solver.scheduler.observe import Fit
from meshplan.v1 import scheduler_pb2

# method -> (request message, request model)
REQUESTS: dict[str, tuple[type[Message], type[BaseModel]]] = {
    "ScalingCurve": (scheduler_pb2.ScalingCurveRequest, CurveRequest),
    "Replan": (scheduler_pb2.ReplanRequest, ReplanRequest),
    "SmallestAllocation": (scheduler_pb2.SmallestAllocationRequest, AdmitRequest),
    "TrainingFront": (scheduler_pb2.TrainingFrontRequest, FrontRequest),
}


@dataclass(frozen=True)
class Prepared:
    """A query ready to run: its request (without its observations when `fit` is set), the
    observations' fit, and the key of its answer (None: not kept)."""

    request: Any
    fit: Fit | None
    key: str | None


def answer_key(method: str, req: Any) -> str | None:
    """The answer's cache key; None for a deadline against the server's clock (it moves)."""
    if isinstance(req, AdmitRequest) and req.deadline_unix_s and not req.now_unix_s:
        return None
    return f"{method}:{cache_key(method, req)}"


def curve_of(method: str, req: Any) -> CurveRequest:
    """The curve a query walks (its observations' cells)."""
    if method == "SmallestAllocation":
        from meshplan.solver.scheduler.admit import curve_request as admit_curve

        return admit_curve(req)
    if method == "TrainingFront":
        from meshplan.solver.scheduler.front import curve_request as front_curve

        return front_curve(req)
    return req


def prepare_query(
    method: str,
    data: bytes,
    max_chars: int,
    deadline: float,
    apart: bool = True,
    *,
    stop: threading.Event,
) -> Prepared:
    """The query in `data` parsed, checked, keyed and fitted under the call's deadline and stop
    event (a solver slot's function: RpcFailure for what is not a query). `apart`: the
    observations are left out of the prepared request (what crosses back from a worker
    process stays small) and their digest keys the answers; else the request is kept whole."""
    from meshplan.server.work import invalid
    from meshplan.solver.scheduler.curve import observed_fit

    budget = Budget(stop=stop, deadline=deadline)
    message_cls, model_cls = REQUESTS[method]
    req = None
    try:
        message = parse_wire(message_cls, data)
        check_strings(message, max_chars)
        req = parse_in_steps(message, model_cls, budget.check)
        check_layouts(req)
        key = answer_key(method, req)
        if not getattr(req, "observations", None):
            return Prepared(req, None, key)
        digest = ""
        if apart:
            text = req.model_dump_json(include={"observations"})
            digest = hashlib.sha256(text.encode()).hexdigest()[:32]
        fit = observed_fit(curve_of(method, req), budget, digest)
        kept = req.model_copy(update={"observations": []}) if apart else req
        return Prepared(kept, fit, key)
    except (SchedulerInputError, QueryStopped) as err:
        raise failure(method, err) from None
    except (ValueError, KeyError, OverflowError) as err:  # what the cost model refused
        if req is None:
            raise
        raise invalid(err, req) from None


def failure(method: str, err: Exception) -> Exception:
    """A query's exception as the RpcFailure it answers (others unchanged)."""
    if isinstance(err, SchedulerInputError):
        violation = Violation(err.field, shorten(err.description, 300))
        return RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, str(err), [violation])
    if isinstance(err, QueryStopped):
        code = grpc.StatusCode.CANCELLED if err.cancelled else grpc.StatusCode.DEADLINE_EXCEEDED
        return RpcFailure(code, f"{method} stopped: {err}")
    return err
