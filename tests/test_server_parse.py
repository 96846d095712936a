"""A request's long repeated fields parsed in steps: the same request and the same field paths
as a parse in one go, stopped between two steps once the call has ended."""

from __future__ import annotations

import grpc
import pytest

from meshplan.convert import to_proto
from meshplan.server.limits import RpcFailure
from meshplan.server.requests import PARSE_CHUNK, parse, parse_in_steps
from meshplan.solver.scheduler import CurveRequest, QueryStopped
from meshplan.v1 import scheduler_pb2

N = 3 * PARSE_CHUNK + 5


def _message(n: int = N) -> scheduler_pb2.ScalingCurveRequest:
    cfg = {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1, "num_microbatches": 8}
    req = CurveRequest.model_validate(
        {"model": {"preset": "llama3-8b"}, "clusters": [{}], "grid": {"counts": [8]},
         "batch": {"kind": "FREE"},
         "observations": [{"cluster": "h100-sxm-80gb", "num_gpus": 8, "config": cfg,
                           "step_time_s": 1 + i / n} for i in range(n)]}
    )  # fmt: skip
    return to_proto(req, scheduler_pb2.ScalingCurveRequest)


def test_in_steps_gives_the_same_request_and_checks_between_steps() -> None:
    msg, checks = _message(), []
    stepped = parse_in_steps(msg, CurveRequest, lambda: checks.append(1))
    assert stepped == parse(msg, CurveRequest)
    assert len(checks) >= N // PARSE_CHUNK


def test_a_bad_item_far_down_is_named_by_its_index() -> None:
    msg = _message()
    msg.observations[N - 2].step_time_s = -1.0
    with pytest.raises(RpcFailure) as err:
        parse_in_steps(msg, CurveRequest, lambda: None)
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.violations[0].field == f"observations[{N - 2}].step_time_s"


def test_more_items_than_allowed_are_refused_before_any_is_converted() -> None:
    from meshplan.solver.scheduler.requests import MAX_OBSERVATIONS

    msg = _message(PARSE_CHUNK + 1)
    extra = msg.observations[0]
    for _ in range(MAX_OBSERVATIONS):
        msg.observations.add().CopyFrom(extra)
    with pytest.raises(RpcFailure) as err:
        parse_in_steps(msg, CurveRequest, lambda: None)
    assert err.value.violations[0].field == "observations"
    assert "16,384" in err.value.violations[0].description


def test_the_call_ending_stops_the_parse() -> None:
    def ended() -> None:
        raise QueryStopped("the query ran out of time", cancelled=False)

    with pytest.raises(QueryStopped):
        parse_in_steps(_message(), CurveRequest, ended)
