"""The service end to end through the real solver, on a real server bound to port 0."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator

import grpc
import pytest
from test_grpc_support import LOOPBACK, big_request, raw_stub, running_server, small_request

from meshplan import solver
from meshplan.client import InvalidRequestError, PlannerClient
from meshplan.client.exceptions import DeadlineExceededError, error_from_rpc
from meshplan.client.sync import plan_message
from meshplan.server.logs import TextFormatter
from meshplan.solver import cache
from meshplan.solver.results import PlanResult, PlanStatus
from meshplan.solver.schema import EvaluateRequest, ParallelConfig, PlanRequest
from meshplan.v1 import planner_pb2


class RecordingPlan:
    """The real solver.plan, noting when each call returns."""

    def __init__(self) -> None:
        self.returned: list[float] = []

    def __call__(self, req: PlanRequest, stop_event: threading.Event | None = None) -> PlanResult:
        try:
            return solver.plan(req, stop_event=stop_event)
        finally:
            self.returned.append(time.monotonic())


INFEASIBLE = PlanRequest.model_validate(
    {"model": {"preset": "llama3-405b"}, "cluster": {"num_gpus": 8}}
)


@pytest.fixture(scope="module")
def recorder() -> RecordingPlan:
    return RecordingPlan()


@pytest.fixture(scope="module")
def port(recorder: RecordingPlan) -> Iterator[int]:
    settings = {  # one loopback caller: the per-caller limits are as wide as the server's
        "max_concurrent_solves": 2,
        "max_queued_solves": 64,
        "max_calls_per_caller": 66,
        "max_solves_per_caller": 2,
    }
    with running_server(plan_fn=recorder, **settings) as (bound, _):
        yield bound


@pytest.fixture()
def client(port: int) -> Iterator[PlannerClient]:
    with PlannerClient(f"{LOOPBACK}:{port}", default_timeout=60) as c:
        yield c


def _same_plan(remote: PlanResult, local: PlanResult) -> None:
    """Equal answers: everything but the solver's own timings (ties are legal, so the objective
    decides when layouts differ)."""
    assert remote.status == local.status
    assert remote.num_parameters == local.num_parameters
    assert remote.solver is not None and local.solver is not None
    assert math.isclose(remote.solver.objective, local.solver.objective, rel_tol=1e-9)
    if remote.config == local.config:
        skip = {"solver": {"wall_time_s", "solve_time_s"}}
        assert remote.model_dump(exclude=skip) == local.model_dump(exclude=skip)


@pytest.mark.parametrize(
    "body",
    [
        {"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": 8}},
        {"model": {"preset": "llama2-7b"}, "cluster": {"gpu": "a100-sxm-80gb", "num_gpus": 8},
         "training": {"seq_len": 4096}},
        {"model": {"preset": "mixtral-8x7b"}, "cluster": {"gpu": "a100-sxm-80gb", "num_gpus": 32},
         "search": {"recompute": "FULL", "zero_stage": 1}},
        {"model": {"preset": "llama3-405b"}, "cluster": {"num_gpus": 8}},  # infeasible
    ],
    ids=["llama3-8b", "llama2-7b-a100", "mixtral-pinned", "infeasible"],
)  # fmt: skip
def test_remote_plan_equals_in_process(client: PlannerClient, body: dict) -> None:
    req = PlanRequest.model_validate(
        body | {"options": body.get("options", {}) | {"time_limit_s": 10}}
    )
    _same_plan(client.plan(req), solver.plan(req))


def test_infeasible_is_an_answer_with_its_explanation(client: PlannerClient) -> None:
    result = client.plan(INFEASIBLE)
    assert result.status == PlanStatus.INFEASIBLE
    assert result.explanation is not None and result.explanation.reason
    assert result.explanation.min_gpus > 8


def test_remote_evaluate_equals_in_process(client: PlannerClient) -> None:
    planned = solver.plan(small_request(time_limit_s=10))
    assert planned.config is not None
    req = EvaluateRequest(
        model=small_request().model, cluster=small_request().cluster, config=planned.config
    )
    assert client.evaluate(req) == solver.evaluate(req)
    broken = req.model_copy(update={"config": ParallelConfig(
        tp=8, pp=1, dp=1, micro_batch_size=64, num_microbatches=64)})  # fmt: skip
    remote, local = client.evaluate(broken), solver.evaluate(broken)
    assert remote == local and not remote.fits and remote.violations


def test_evaluate_with_hbm_below_the_reserve_says_so_not_a_negative_amount(
    client: PlannerClient,
) -> None:
    """0.5 GiB of HBM against the 1 GiB reserve: not fits, with the fields to change named (the
    usable memory was printed as "-0.5 GiB"), the same over gRPC as in process."""
    base = small_request()
    base = base.model_copy(update={"cluster": base.cluster.model_copy(update={"hbm_gib": 0.5})})
    req = EvaluateRequest(model=base.model, cluster=base.cluster, config=ParallelConfig(
        tp=1, pp=1, dp=8, micro_batch_size=1, num_microbatches=8))  # fmt: skip
    remote = client.evaluate(req)
    assert remote == solver.evaluate(req) and not remote.fits
    (memory,) = [v for v in remote.violations if v.startswith("memory:")]
    assert "no usable memory" in memory and "cluster.hbm_gib" in memory, memory
    assert "search.memory_reserve_gib" in memory and "-0" not in memory, memory


def _set(path: str, value: object) -> Callable[[planner_pb2.PlanRequest], None]:
    def apply(msg: planner_pb2.PlanRequest) -> None:
        *parents, leaf = path.split(".")
        node = msg
        for part in parents:
            node = getattr(node, part)
        setattr(node, leaf, value)

    return apply


BAD_INPUTS = [
    ("zero gpus", _set("cluster.num_gpus", 0), "cluster.num_gpus", "0"),
    ("negative gpus", _set("cluster.num_gpus", -8), "cluster.num_gpus", "-8"),
    ("huge gpus", _set("cluster.num_gpus", 2**31 - 1), "cluster.num_gpus", "2147483647"),
    ("negative layers", _set("model.num_layers", -1), "model.num_layers", "-1"),
    ("zero seq len", _set("training.seq_len", 0), "training.seq_len", "0"),
    ("nan hbm", _set("cluster.hbm_gib", math.nan), "cluster.hbm_gib", "nan"),
    ("huge hbm", _set("cluster.hbm_gib", 1e300), "cluster.hbm_gib", "1e+300"),
    ("inf time", _set("options.time_limit_s", math.inf), "options.time_limit_s", "inf"),
    ("negative pin", _set("search.tp", -2), "search.tp", "-2"),
    ("unknown preset", _set("model.preset", "llama-99"), "model.preset", "llama-99"),
    ("unknown gpu", _set("cluster.gpu", "h100-pcie-8gb"), "cluster.gpu", "h100-pcie-8gb"),
    ("heads vs pinned tp", _set("search.tp", 3), "search.tp", "3"),
    ("kv heads", _set("model.num_kv_heads", 5), "model.num_attention_heads", "5"),
    ("unknown enum", _set("training.precision", 42), "training.precision", "42"),
]


@pytest.mark.parametrize(("mutate", "field", "value"), [b[1:] for b in BAD_INPUTS],
                         ids=[b[0] for b in BAD_INPUTS])  # fmt: skip
def test_bad_input_names_field_and_value(
    port: int, mutate: Callable[[planner_pb2.PlanRequest], None], field: str, value: str
) -> None:
    msg = plan_message(small_request(time_limit_s=5))
    if field == "model.num_attention_heads":
        msg.model.num_attention_heads, msg.model.hidden_size = 64, 4096
    mutate(msg)
    with raw_stub(port) as stub, pytest.raises(grpc.RpcError) as raised:
        stub.Plan(msg, timeout=30)
    err = error_from_rpc(raised.value)
    assert isinstance(err, InvalidRequestError), err
    assert [v.field for v in err.violations] == [field]
    assert value in err.violations[0].description


def test_empty_request_names_every_missing_field(port: int) -> None:
    with raw_stub(port) as stub, pytest.raises(grpc.RpcError) as raised:
        stub.Plan(planner_pb2.PlanRequest(), timeout=10)
    err = error_from_rpc(raised.value)
    assert isinstance(err, InvalidRequestError) and err.request_id
    assert sorted(v.field for v in err.violations) == ["cluster", "model"]
    with raw_stub(port) as stub, pytest.raises(grpc.RpcError) as raised:
        stub.Evaluate(planner_pb2.EvaluateRequest(), timeout=10)
    assert sorted(v.field for v in error_from_rpc(raised.value).violations) == [
        "cluster", "config", "model"]  # fmt: skip


def test_short_deadline_is_honoured(client: PlannerClient) -> None:
    """A 10,800-layout space whose proof takes seconds from a cold cache: a 0.25 s deadline
    ends the call on time, with DEADLINE_EXCEEDED or (on a fast machine, where the greedy plan
    is in hand before it) that plan, unproven; the best-so-far answer of a search stopped
    between rounds is tested in tests/test_search.py."""
    cache.clear()  # cold: with its tables kept from an earlier plan a plan is in hand at once
    started = time.monotonic()
    try:
        res = client.plan(big_request(time_limit_s=60), timeout=0.25)
    except DeadlineExceededError:
        res = None
    assert time.monotonic() - started < 1.5
    assert res is None or res.solver.status in ("FALLBACK", "FEASIBLE"), res.solver


def test_cancelled_call_stops_the_real_solve(port: int, recorder: RecordingPlan) -> None:
    """End to end through the real solver: cancel while it builds its tables; solver.plan
    returns at once.

    The server's part (cancel -> stop event within 50 ms) is measured exactly in test_grpc_limits;
    here the solver checks for a stop between chunks of its tables and between CP-SAT rounds.
    The request (32 alternatives on up to 131,072 GPUs) runs for seconds, so an answer within
    the bound is a stop, not the end of the solve; the bound leaves room for a busy CI machine.
    """
    latencies = []
    with raw_stub(port) as stub:
        for delay in (0.5, 1.0):
            cache.clear()  # cold: the tables are built again
            req = big_request(60)
            future = stub.Plan.future(plan_message(req), timeout=60)
            time.sleep(delay)
            count = len(recorder.returned)
            cancelled = time.monotonic()
            future.cancel()
            deadline = cancelled + 5
            while len(recorder.returned) == count and time.monotonic() < deadline:
                time.sleep(0.001)
            assert len(recorder.returned) > count, "the solve did not stop"
            latencies.append(recorder.returned[-1] - cancelled)
    assert min(latencies) < 0.25 and max(latencies) < 1.0, latencies


def test_32_concurrent_clients(port: int) -> None:
    """32 clients at once; one in eight plans a feasible layout, the rest a fast infeasible one."""
    results: dict[int, PlanResult] = {}
    errors: list[Exception] = []

    def one(i: int) -> None:
        req = small_request(time_limit_s=10) if i % 8 == 0 else INFEASIBLE
        try:
            with PlannerClient(f"{LOOPBACK}:{port}") as c:
                results[i] = c.plan(req, timeout=120)
        except Exception as err:
            errors.append(err)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert errors == [] and len(results) == 32
    feasible = {results[i].solver.objective for i in range(0, 32, 8)}
    assert len(feasible) == 1 and all(results[i].config is not None for i in range(0, 32, 8))
    assert {results[i].status for i in range(32) if i % 8} == {PlanStatus.INFEASIBLE}


def test_batch_streams_each_answer_as_soon_as_it_is_solved(client: PlannerClient) -> None:
    slow = PlanRequest.model_validate(  # 4,415 layouts: seconds, where INFEASIBLE takes ms
        {"model": {"preset": "deepseek-v3"}, "cluster": {"num_gpus": 4096},
         "search": {"allow_fewer_gpus": True}})  # fmt: skip
    unknown = PlanRequest.model_validate({"model": {"preset": "nope"}, "cluster": {"num_gpus": 8}})
    reqs = [slow, INFEASIBLE, small_request(time_limit_s=10), unknown]
    items = list(client.plan_batch(reqs, timeout=60))
    order = [i.index for i in items]
    assert sorted(order) == [0, 1, 2, 3]
    assert order.index(1) < order.index(0)  # the fast one did not wait for the slow one
    by_index = {i.index: i for i in items}
    assert by_index[3].error is not None and by_index[3].result is None
    assert by_index[3].error.violations[0].field == "requests[3].model.preset"
    assert by_index[1].result is not None and by_index[1].result.status == PlanStatus.INFEASIBLE
    _same_plan(by_index[0].result, solver.plan(slow))
    _same_plan(by_index[2].result, solver.plan(reqs[2]))


def test_one_log_line_per_call(client: PlannerClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="meshplan.server")
    client.plan(small_request(time_limit_s=10))
    text = TextFormatter()
    lines = [text.format(r) for r in caplog.records if r.getMessage().startswith("method=Plan ")]
    assert len(lines) == 1
    assert "status=OK" in lines[0] and "request_id=" in lines[0] and "solve_s=" in lines[0]
