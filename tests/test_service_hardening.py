"""The findings of a hostile-client probe of the service, each reproduced on a real server on
loopback: starved health, streams that hold shutdown, optional deadlines, random queue order,
oversized echoes, garbage bytes, leaked exception text, forgeable request ids, overflowing
overrides and answers too large for their proto fields."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from test_grpc_support import (
    LOOPBACK,
    BlockingPlan,
    no_plan,
    raw_stub,
    running_server,
    small_request,
)

from meshplan.client import InvalidRequestError, PlannerClient
from meshplan.client.sync import batch_message, plan_message
from meshplan.server.app import server_options
from meshplan.server.logs import TextFormatter
from meshplan.server.scheduler import QUERIES
from meshplan.server.settings import Settings
from meshplan.solver.results import PlanResult
from meshplan.solver.schema import PlanRequest
from meshplan.v1 import planner_pb2

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _check(channel: grpc.Channel, timeout: float = 1.0) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    return stub.Check(health_pb2.HealthCheckRequest(), timeout=timeout).status


def _reflection_stream(
    channel: grpc.Channel, timeout: float = 30
) -> tuple[Iterator[reflection_pb2.ServerReflectionResponse], queue.Queue]:
    """An open reflection stream that has had one answer and then stays idle."""
    requests: queue.Queue = queue.Queue()
    requests.put(reflection_pb2.ServerReflectionRequest(list_services=""))
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    call = stub.ServerReflectionInfo(iter(requests.get, None), timeout=timeout)
    assert next(call).HasField("list_services_response")
    return call, requests


def test_idle_reflection_streams_do_not_starve_health_catalog_or_plans() -> None:
    with (
        running_server(max_concurrent_solves=1) as (port, _),
        grpc.insecure_channel(f"{LOOPBACK}:{port}") as channel,
    ):
        streams = [_reflection_stream(channel) for _ in range(41)]
        started = time.monotonic()
        assert _check(channel) == SERVING
        assert time.monotonic() - started < 0.5
        with PlannerClient(f"{LOOPBACK}:{port}") as client:
            assert client.list_catalog(timeout=2).gpus
            assert client.plan(small_request(time_limit_s=10), timeout=30).config is not None
        for call, requests in streams:
            requests.put(None)
            call.cancel()


def test_reflection_streams_are_bounded_and_closed_when_idle() -> None:
    with (
        running_server(max_open_streams=3, stream_idle_timeout_s=0.3) as (port, _),
        grpc.insecure_channel(f"{LOOPBACK}:{port}") as channel,
    ):
        streams = [_reflection_stream(channel) for _ in range(3)]
        with pytest.raises(grpc.RpcError) as refused:
            _reflection_stream(channel)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        time.sleep(0.5)  # idle past the timeout: closed by the server, with OK
        for call, _ in streams:
            assert list(call) == [] and call.code() == grpc.StatusCode.OK
        _reflection_stream(channel)[0].cancel()  # room again


def test_drain_answers_not_serving_and_an_open_watch_does_not_hold_it() -> None:
    def slow_plan(req: PlanRequest, stop_event: threading.Event | None = None) -> PlanResult:
        time.sleep(1.0)
        return no_plan("INFEASIBLE")

    with (
        running_server(plan_fn=slow_plan) as (port, server),
        grpc.insecure_channel(f"{LOOPBACK}:{port}") as channel,
    ):
        stub = health_pb2_grpc.HealthStub(channel)
        watch = stub.Watch(health_pb2.HealthCheckRequest(service="meshplan.v1.Planner"), timeout=60)
        assert next(watch).status == SERVING
        answers: list[object] = []
        in_flight = threading.Thread(
            target=lambda: answers.append(
                PlannerClient(f"{LOOPBACK}:{port}").plan(small_request(), timeout=30)
            )
        )
        in_flight.start()
        time.sleep(0.3)  # the plan is solving
        outcome: list[bool] = []
        started = time.monotonic()
        drainer = threading.Thread(target=lambda: outcome.append(server.drain(20.0)))
        drainer.start()
        assert next(watch).status == NOT_SERVING
        assert list(watch) == []  # then the stream ends: it cannot hold the shutdown
        assert _check(channel) == NOT_SERVING  # answered, not UNAVAILABLE
        with pytest.raises(grpc.RpcError) as late:
            raw = channel.unary_unary("/meshplan.v1.Planner/Plan")
            raw(plan_message(small_request()).SerializeToString(), timeout=5)
        assert late.value.code() == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(grpc.RpcError) as catalog:  # no ticket needed, still a new call
            channel.unary_unary("/meshplan.v1.Planner/ListCatalog")(b"", timeout=5)
        assert catalog.value.code() == grpc.StatusCode.UNAVAILABLE
        drainer.join(20)
        in_flight.join(20)
        assert outcome == [True] and len(answers) == 1  # the call in flight finished
        assert time.monotonic() - started < 5  # not the 20 s grace


def test_a_batch_the_grace_cannot_finish_answers_every_item_before_the_stream_ends() -> None:
    fake = BlockingPlan(max_s=0.4)  # 8 items, one slot: ~3 s of work against a 1 s grace
    with (
        running_server(plan_fn=fake, max_concurrent_solves=1) as (port, server),
        raw_stub(port) as stub,
    ):
        batch = batch_message([small_request(time_limit_s=10)] * 8)
        stream = stub.PlanBatch(batch, timeout=30)
        fake.wait_started(1)
        drained: list[bool] = []
        drainer = threading.Thread(target=lambda: drained.append(server.drain(1.0)))
        drainer.start()
        items = list(stream)  # ends normally: no item is left without an answer
        drainer.join(10)
    assert sorted(i.index for i in items) == list(range(8))
    unfinished = [i for i in items if i.WhichOneof("outcome") == "error"]
    assert unfinished and all(i.error.code == "UNAVAILABLE" for i in unfinished)
    assert "send it again" in unfinished[0].error.message
    assert stream.code() == grpc.StatusCode.OK and drained == [True]


def test_one_peer_cannot_hold_every_health_watch() -> None:
    with (
        running_server(max_open_streams=8) as (port, _),
        grpc.insecure_channel(f"{LOOPBACK}:{port}") as channel,
    ):
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest()
        watches = [stub.Watch(request, timeout=30) for _ in range(2)]  # a quarter of 8
        assert [next(w).status for w in watches] == [SERVING, SERVING]
        with pytest.raises(grpc.RpcError) as refused:
            next(stub.Watch(request, timeout=5))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "from ipv4:127.0.0.1" in (refused.value.details() or "")
        assert _check(channel) == SERVING  # Check stays open
        watches[0].cancel()
        time.sleep(0.2)
        assert next(stub.Watch(request, timeout=5)).status == SERVING  # room again


def test_a_call_without_a_deadline_gets_the_servers_maximum() -> None:
    fake = BlockingPlan()
    with running_server(plan_fn=fake, max_deadline_s=0.5) as (port, _), raw_stub(port) as stub:
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as err:
            stub.Plan(plan_message(small_request(time_limit_s=30)))  # no timeout
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - started < 2.0
    assert fake.requests[0].options.time_limit_s <= 0.5


def test_queued_solves_run_in_arrival_order() -> None:
    gate, order = threading.Event(), []

    def plan(req: PlanRequest, stop_event: threading.Event | None = None) -> PlanResult:
        if req.cluster.num_gpus == 1:
            gate.wait(10)  # holds the only slot while the others queue
        order.append(req.cluster.num_gpus)
        return no_plan("INFEASIBLE")

    with (
        running_server(plan_fn=plan, max_concurrent_solves=1, max_calls_per_caller=32) as (port, _),
        grpc.insecure_channel(f"{LOOPBACK}:{port}") as channel,
    ):
        stub = planner_pb2.DESCRIPTOR.services_by_name["Planner"]
        call = channel.unary_unary(f"/{stub.full_name}/Plan")
        arrivals = list(range(2, 26))
        futures = [call.future(_wire(1), timeout=30)]
        time.sleep(0.1)
        for n in arrivals:
            futures.append(call.future(_wire(n), timeout=30))
            time.sleep(0.02)  # a clear arrival order
        gate.set()
        for f in futures:
            f.result()
    assert order == [1, *arrivals]


def _wire(num_gpus: int) -> bytes:
    req = PlanRequest.model_validate(
        {"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": num_gpus}}
    )
    return plan_message(req).SerializeToString()


@pytest.mark.parametrize(
    ("length", "said"),
    [(2_500, "2,500 characters"), (100_000, "more than the 65,536 a meshplan.v1.PlanRequest")],
)
def test_long_strings_are_refused_and_echoed_truncated(length: int, said: str) -> None:
    name = "x" * length
    with (
        running_server(plan_fn=lambda req, stop_event=None: no_plan("INFEASIBLE")) as (port, _),
        raw_stub(port) as stub,
    ):
        with pytest.raises(grpc.RpcError) as err:
            stub.Plan(
                planner_pb2.PlanRequest(model={"preset": name}, cluster={"num_gpus": 8}), timeout=5
            )
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert len(err.value.details()) < 400 and said in err.value.details()
        batch = planner_pb2.PlanBatchRequest(
            requests=[
                plan_message(small_request()),
                planner_pb2.PlanRequest(cluster={"gpu": name, "num_gpus": 8}),
            ]
        )
        items = {a.index: a for a in stub.PlanBatch(batch, timeout=30)}
        assert items[1].error.code == "INVALID_ARGUMENT"
        assert items[1].error.field_violations[0].field == "requests[1].cluster.gpu"
        assert len(items[1].error.message) < 400


def test_garbage_bytes_are_invalid_argument_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    with (
        running_server(plan_fn=BlockingPlan()) as (port, _),
        grpc.insecure_channel(f"{LOOPBACK}:{port}") as ch,
    ):
        for method, kind in (
            ("Plan", ch.unary_unary),
            ("PlanBatch", ch.unary_stream),
            ("Evaluate", ch.unary_unary),
            *((query, ch.unary_unary) for query in QUERIES),  # parsed off the loop (Wire)
        ):
            call = kind(f"/meshplan.v1.Planner/{method}")
            with pytest.raises(grpc.RpcError) as err:
                answer = call(b"\xff\xff\xff\xff\x0f garbage", timeout=5)
                list(answer) if method == "PlanBatch" else answer
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
            assert "is not a valid meshplan.v1." in err.value.details(), method
    assert not [r for r in caplog.records if "Traceback" in r.getMessage() or r.exc_info]


def test_an_unexpected_error_is_internal_with_the_request_id_and_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(req: PlanRequest, stop_event: threading.Event | None = None) -> PlanResult:
        raise RuntimeError("secret detail of the server")

    caplog.set_level(logging.INFO, logger="meshplan.server")
    with (
        running_server(plan_fn=broken) as (port, _),
        raw_stub(port) as stub,
        pytest.raises(grpc.RpcError) as err,
    ):
        stub.Plan(
            plan_message(small_request()), timeout=5, metadata=(("x-request-id", "job-42.a"),)
        )
    assert err.value.code() == grpc.StatusCode.INTERNAL
    assert "job-42.a" in err.value.details()
    assert "secret" not in err.value.details() and "RuntimeError" not in err.value.details()
    lines = [
        TextFormatter().format(r) for r in caplog.records if "request_id=job-42.a" in r.getMessage()
    ]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "status=INTERNAL" in lines[0] and "secret detail of the server" in lines[0]


@pytest.mark.parametrize(
    "sent", ["x status=OK method=Forged", "a" * 65, "slash/and;semi", 'quote"d']
)
def test_a_request_id_that_could_forge_a_log_field_is_replaced(
    sent: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="meshplan.server")
    with (
        running_server(plan_fn=lambda req, stop_event=None: no_plan("INFEASIBLE")) as (port, _),
        raw_stub(port) as stub,
    ):
        _, call = stub.Plan.with_call(
            plan_message(small_request()), timeout=5, metadata=(("x-request-id", sent),)
        )
    echoed = dict(call.trailing_metadata())["x-request-id"]
    assert echoed != sent and echoed.isalnum() and len(echoed) == 16
    text = "\n".join(TextFormatter().format(r) for r in caplog.records)
    assert "Forged" not in text and sent not in text and f"request_id={echoed}" in text


def test_tiny_bandwidth_is_invalid_argument_naming_the_field() -> None:
    with running_server() as (port, _), raw_stub(port) as stub:
        msg = planner_pb2.PlanRequest(
            model={"preset": "llama3-8b"}, cluster={"num_gpus": 16, "inter_node_gbps": 1e-12}
        )
        with pytest.raises(grpc.RpcError) as err:
            stub.Plan(msg, timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "cluster.inter_node_gbps" in err.value.details()


def test_an_overflow_in_the_solver_is_invalid_argument_naming_the_overrides() -> None:
    def overflowing(req: PlanRequest, stop_event: threading.Event | None = None) -> PlanResult:
        raise OverflowError("a cost-model table exceeds the integer range of the CP-SAT model")

    with (
        running_server(plan_fn=overflowing) as (port, _),
        PlannerClient(f"{LOOPBACK}:{port}") as client,
    ):
        req = PlanRequest.model_validate(
            {"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": 8, "intra_node_gbps": 0.5}}
        )
        with pytest.raises(InvalidRequestError) as err:
            client.plan(req, timeout=5)
    assert [v.field for v in err.value.violations] == ["cluster.intra_node_gbps"]


def test_an_evaluation_too_large_for_its_proto_fields_is_invalid_argument() -> None:
    with running_server() as (port, _), raw_stub(port) as stub:
        msg = planner_pb2.EvaluateRequest(
            model={"preset": "llama3-8b"},
            cluster={"num_gpus": 8},
            training={"seq_len": 16_777_216},
            config={
                "tp": 8,
                "pp": 1,
                "dp": 1,
                "micro_batch_size": 2**31 - 1,
                "num_microbatches": 1,
            },
        )
        with pytest.raises(grpc.RpcError) as err:
            stub.Evaluate(msg, timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "memory.activations" in err.value.details()


def test_an_evaluation_on_a_gpu_whose_memory_is_all_reserve_is_an_answer_not_internal() -> None:
    """hbm_gib 1 leaves no usable memory past the reserve: the layout does not fit (the soak's
    fuzz found it INTERNAL: a division by the zero budget in the binding wall)."""
    msg = planner_pb2.EvaluateRequest(
        model={"preset": "llama3-8b"},
        cluster={"gpu": "a100-sxm-40gb", "num_gpus": 8, "gpus_per_node": 8, "hbm_gib": 1},
        training={"seq_len": 256, "critical_batch_tokens": 1_048_576},  # a cap: its wall is read
        config={"tp": 8, "pp": 1, "dp": 1, "micro_batch_size": 1, "num_microbatches": 4},
    )
    with running_server() as (port, _), raw_stub(port) as stub:
        answer = stub.Evaluate(msg, timeout=30)
    assert not answer.fits and answer.violations


def test_a_request_no_cluster_can_fit_is_an_infeasible_answer() -> None:
    req = PlanRequest.model_validate(
        {
            "model": {"preset": "llama3-405b"},
            "cluster": {"num_gpus": 8192},
            "training": {"seq_len": 8192, "global_batch_tokens": 16777216},
            "search": {"tp": 8, "pp": 16, "dp": 64, "cp": 1, "zero_stage": 2, "recompute": "NONE"},
        }
    )
    with running_server() as (port, _), PlannerClient(f"{LOOPBACK}:{port}") as client:
        result = client.plan(req, timeout=60)
    assert result.status.value == "INFEASIBLE" and result.explanation is not None
    # Megatron runs no ZeRO-2 with pipelining: the reason is the framework's rule, at any size
    assert "training.framework MEGATRON" in result.explanation.reason
    assert "not zero_stage 2" in result.explanation.reason
    assert result.explanation.min_gpus == 0


def test_oversized_requests_are_refused_before_parsing() -> None:
    with (
        running_server(plan_fn=BlockingPlan(), max_request_bytes=64 * 1024) as (port, _),
        grpc.insecure_channel(f"{LOOPBACK}:{port}") as channel,
    ):
        call = channel.unary_unary("/meshplan.v1.Planner/Plan")
        with pytest.raises(grpc.RpcError) as err:
            call(b"\x0a" + b"\xff" * (100 * 1024), timeout=5)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert _check(channel) == SERVING


def test_keepalive_and_connection_age_are_set() -> None:
    options = dict(server_options(Settings(max_deadline_s=120)))
    assert options["grpc.keepalive_time_ms"] == 60_000
    assert options["grpc.keepalive_timeout_ms"] == 20_000
    assert options["grpc.max_connection_idle_ms"] == 120_000
    assert options["grpc.max_allowed_incoming_connections"] == 4096  # before fds run out
    assert options["grpc.server_handshake_timeout_ms"] == 10_000  # silent connections closed
    assert options["grpc.max_connection_age_ms"] == 1_800_000
    assert options["grpc.max_connection_age_grace_ms"] == 120_000  # no call is cut short
    assert options["grpc.max_receive_message_length"] == 1024 * 1024
    options = dict(server_options(Settings(max_connection_age_s=0, max_connection_idle_s=0)))
    assert (
        "grpc.max_connection_age_ms" not in options and "grpc.max_connection_idle_ms" not in options
    )


def test_memory_per_request_is_bounded() -> None:
    """32 requests of the largest size at once, twice: the server's RSS grows by a bounded
    amount (before, each 16 MiB request cost ~264 MB and 32 at once peaked at 2.7 GB)."""
    from test_grpc_process import ServerProcess

    server = ServerProcess("--max-calls-per-caller", "64", "--max-queued-solves", "64")
    try:
        server.wait_ready()
        with grpc.insecure_channel(
            server.address, options=[("grpc.max_send_message_length", 32 << 20)]
        ) as channel:
            plan = channel.unary_unary("/meshplan.v1.Planner/Plan")
            plan(_wire(8), timeout=60)  # warm: the solver's imports and tables
            base, peak = _rss(server.proc.pid), [0.0]
            body = planner_pb2.PlanRequest(
                model={"preset": "x" * ((1 << 20) - 300)}, cluster={"num_gpus": 8}
            ).SerializeToString()
            codes: list[grpc.StatusCode] = []

            def one() -> None:
                try:
                    plan(body, timeout=60)
                except grpc.RpcError as err:
                    codes.append(err.code())
                peak.append(_rss(server.proc.pid))

            for _ in range(2):
                callers = [threading.Thread(target=one) for _ in range(32)]
                for t in callers:
                    t.start()
                for t in callers:
                    t.join(60)
        assert codes == [grpc.StatusCode.INVALID_ARGUMENT] * 64
        assert max(peak) - base < 150, f"RSS {base:.0f} MB -> peak {max(peak):.0f} MB"
    finally:
        server.stop()


def _rss(pid: int) -> float:
    """Resident memory of a process (MB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


_FREEZE_PROBE = """
import gc, json, statistics, time
import meshplan.server.app, meshplan.solver.planner, meshplan.solver.scheduler
from meshplan.server.memory import freeze_startup_heap

def full_pass():
    times = []
    for _ in range(3):
        started = time.perf_counter()
        gc.collect()
        times.append(time.perf_counter() - started)
    return statistics.median(times)

before = full_pass()
frozen = freeze_startup_heap()
print(json.dumps({"before": before, "after": full_pass(), "frozen": frozen,
                  "full_every": gc.get_threshold()[2]}))
"""


def test_the_servers_start_up_heap_is_out_of_full_collections() -> None:
    """A full collection holds the GIL over every tracked object: with the server's modules
    loaded it took tens of ms and stalled the event loop (calls ended past their deadline);
    serve() freezes the start-up heap, so a full pass walks only what requests made."""
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _FREEZE_PROBE], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["frozen"] > 10_000
    assert got["after"] < got["before"] / 10, got
    assert got["full_every"] == 100  # and fewer full passes: one per 100 of generation 1


def test_the_scheduler_queries_bytes_are_not_parsed_on_the_event_loop() -> None:
    """gRPC's deserializer (on the loop) hands a scheduler query its bytes, bounded but unparsed
    (a 0.9 MB one took 4-10 ms to parse there); Plan's are parsed there as before."""
    from meshplan.server.handlers import service_handler
    from meshplan.server.requests import Wire
    from meshplan.server.scheduler import SchedulerServicer
    from meshplan.v1 import planner_pb2 as pb

    service = pb.DESCRIPTOR.services_by_name["Planner"]
    handler = service_handler(service, SchedulerServicer.__new__(SchedulerServicer), 1 << 20)
    for method in QUERIES:
        details = type("D", (), {"method": f"/meshplan.v1.Planner/{method}"})()
        parse = handler.service(details).request_deserializer
        got = parse(b"\xff\xff garbage")
        assert isinstance(got, Wire) and got.data == b"\xff\xff garbage", method
        assert not isinstance(parse(b"x" * ((1 << 20) + 1)), Wire)  # bounded all the same
