"""The cheap paths of a Plan call's checks: string caps skip the sub-messages that hold no
string (and still catch one at any depth), and whether a plan_fn takes a stop event is read
once per function."""

from __future__ import annotations

import inspect

import grpc
import pytest

from meshplan.server import work
from meshplan.server.limits import RpcFailure
from meshplan.server.requests import _holds_text, check_strings
from meshplan.v1 import planner_pb2, spec_pb2


def test_only_messages_that_can_hold_a_string_are_walked() -> None:
    assert _holds_text(planner_pb2.PlanRequest.DESCRIPTOR)
    assert _holds_text(planner_pb2.PlanBatchRequest.DESCRIPTOR)  # through requests[].model
    assert not _holds_text(spec_pb2.ParallelConfig.DESCRIPTOR)
    assert not _holds_text(spec_pb2.MoESpec.DESCRIPTOR)


def test_an_overlong_string_deep_in_a_batch_is_still_refused_with_its_path() -> None:
    ok = planner_pb2.PlanRequest(model=spec_pb2.ModelSpec(preset="llama3-8b"))
    long = planner_pb2.PlanRequest(cluster=spec_pb2.ClusterSpec(gpu="h" * 300))
    check_strings(planner_pb2.PlanBatchRequest(requests=[ok]), 256)
    with pytest.raises(RpcFailure) as err:
        check_strings(planner_pb2.PlanBatchRequest(requests=[ok, long]), 256)
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.violations[0].field == "requests[1].cluster.gpu"


def test_a_plan_fns_signature_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    reads = []
    real = inspect.signature

    def counted(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        reads.append(fn)
        return real(fn, *args, **kwargs)

    monkeypatch.setattr(inspect, "signature", counted)

    def with_stop(req, stop_event=None):  # type: ignore[no-untyped-def]
        return req

    def without_stop(req):  # type: ignore[no-untyped-def]
        return req

    for _ in range(3):
        assert work._takes_stop_event(with_stop)
        assert not work._takes_stop_event(without_stop)
    assert reads == [with_stop, without_stop]
