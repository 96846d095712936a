"""JSON over HTTP on --http-port: the same answers as gRPC for 20 requests, the gRPC suite's bad
input answered 400 with the same field violations, deadlines, tokens, TLS and mTLS, metrics,
JSON lines from PlanBatch, the page's helpers, and the page's assets within 300 KB gzipped."""

from __future__ import annotations

import json
import math
import ssl
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
import trustme
from conftest import Pki, _leaf, _write
from google.protobuf import json_format
from http_support import Answer, http_server, send
from test_grpc_server import BAD_INPUTS
from test_grpc_support import LOOPBACK, big_request, raw_stub, small_request
from test_scheduler_grpc import CURVE, REPLAN
from test_service_security import TOKENS

from meshplan.client.exceptions import error_from_rpc
from meshplan.client.scheduler import _message
from meshplan.client.sync import plan_message
from meshplan.server.http.page import load_assets
from meshplan.solver import cache
from meshplan.solver.scheduler import AdmitRequest, CurveRequest, FrontRequest, ReplanRequest
from meshplan.v1 import planner_pb2


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    with http_server(
        max_concurrent_solves=2,
        max_calls_per_caller=64,
        max_solves_per_caller=2,
        max_queued_solves=64,
    ) as (base, port, _):
        yield base, port


def as_json(message: object) -> dict:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)  # type: ignore[arg-type]


# --- the same answers ---------------------------------------------------------------------------

ADMIT = {
    **{k: CURVE[k] for k in ("model", "training", "batch")},
    "clusters": [{"gpu": "h100-sxm-80gb", "max_gpus": 16, "price_per_gpu_hour": 2.5}],
    "work": {"steps": 1000},
    "deadline_s": 86400.0,
}
FRONT = {**CURVE, "clusters": ADMIT["clusters"], "grid": {"max_nodes": 2}, "token_budget": 10**10}
PLANS = [
    {"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": 8}},
    {"model": {"preset": "llama2-7b"}, "cluster": {"gpu": "a100-sxm-80gb", "num_gpus": 8},
     "training": {"seq_len": 4096}},
    {"model": {"preset": "mixtral-8x7b"}, "cluster": {"gpu": "a100-sxm-80gb", "num_gpus": 32},
     "search": {"recompute": "RECOMPUTE_FULL", "zero_stage": 1}},
    {"model": {"preset": "llama3-405b"}, "cluster": {"num_gpus": 8}},  # infeasible
    {"model": {"preset": "llama3-70b"}, "cluster": {"num_gpus": 64}, "options": {"top_k": 2}},
    {"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": 16},
     "training": {"framework": "FRAMEWORK_TORCHTITAN", "precision": "PRECISION_FP8"}},
    {"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": 32}, "search": {"tp": 2, "pp": 2}},
]  # fmt: skip
EVAL_CONFIG = {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1, "num_microbatches": 64, "zero_stage": 3}  # fmt: skip
EVALS = [
    {"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": 8}, "config": EVAL_CONFIG},
    {"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": 8},
     "config": {"tp": 8, "pp": 1, "dp": 1, "micro_batch_size": 64, "num_microbatches": 64}},
    {"model": {"preset": "llama3-70b"}, "cluster": {"num_gpus": 64},
     "config": {"tp": 8, "pp": 2, "dp": 4, "micro_batch_size": 1, "num_microbatches": 64,
                "zero_stage": 1, "sequence_parallel": True}},
]  # fmt: skip
SCHEDULER = [
    ("ScalingCurve", CurveRequest, CURVE),
    ("ScalingCurve", CurveRequest, {**CURVE, "training": {"seq_len": 8192}}),
    ("Replan", ReplanRequest, REPLAN),
    ("Replan", ReplanRequest, {**REPLAN, "event": {"delta_nodes": 1}}),
    ("SmallestAllocation", AdmitRequest, ADMIT),
    ("SmallestAllocation", AdmitRequest, {**ADMIT, "work": {"steps": 100}}),
    ("TrainingFront", FrontRequest, FRONT),
    ("TrainingFront", FrontRequest, {**FRONT, "token_budget": 10**11}),
]


def _timeless(message: planner_pb2.PlanResponse) -> planner_pb2.PlanResponse:
    """A plan without the solver's own timings (the one part two solves may differ in)."""
    copy = type(message)()
    copy.CopyFrom(message)
    copy.solver.wall_time_s = copy.solver.solve_time_s = 0
    return copy


def _same_plan(http: planner_pb2.PlanResponse, rpc: planner_pb2.PlanResponse) -> None:
    a, b = _timeless(http), _timeless(rpc)
    if a.config == b.config:
        assert a == b
    else:  # ties are legal: the objective decides
        assert a.status == b.status
        assert math.isclose(a.solver.objective, b.solver.objective, rel_tol=1e-9)


def test_twenty_requests_answer_the_same_over_http_and_grpc(server: tuple[str, int]) -> None:
    base, port = server
    compared = 0
    with raw_stub(port) as stub:
        for body in PLANS:
            http = send(f"{base}/v1/plan", body)
            assert http.status == 200, http.body
            got = json_format.ParseDict(http.body, planner_pb2.PlanResponse())
            rpc = stub.Plan(json_format.ParseDict(body, planner_pb2.PlanRequest()), timeout=60)
            _same_plan(got, rpc)
            compared += 1
        for body in EVALS:
            http = send(f"{base}/v1/evaluate", body)
            rpc = stub.Evaluate(json_format.ParseDict(body, planner_pb2.EvaluateRequest()), timeout=60)  # fmt: skip
            assert json_format.ParseDict(http.body, planner_pb2.EvaluateResponse()) == rpc
            compared += 1
        http = send(f"{base}/v1/catalog")
        rpc = stub.ListCatalog(planner_pb2.ListCatalogRequest(), timeout=10)
        assert json_format.ParseDict(http.body, planner_pb2.ListCatalogResponse()) == rpc
        compared += 1
        for method, model, body in SCHEDULER:
            msg = _message(method, model.model_validate(body))
            http = send(f"{base}/v1/{_kebab(method)}", as_json(msg))
            assert http.status == 200, http.body
            rpc = getattr(stub, method)(msg, timeout=120)
            assert json_format.ParseDict(http.body, type(rpc)()) == rpc
            compared += 1
        batch = {"requests": [PLANS[0], PLANS[3], {**PLANS[0], "cluster": {"num_gpus": 0}}]}
        http = send(f"{base}/v1/plan-batch", batch)
        rpc = list(stub.PlanBatch(json_format.ParseDict(batch, planner_pb2.PlanBatchRequest()), timeout=60))  # fmt: skip
        lines = sorted(http.body, key=lambda x: x["index"])
        assert [x["index"] for x in lines] == [0, 1, 2]
        for line, item in zip(lines, sorted(rpc, key=lambda x: x.index), strict=True):
            got = json_format.ParseDict(line, planner_pb2.PlanBatchResponse())
            if item.HasField("result"):
                _same_plan(got.result, item.result)
            else:
                assert got.error == item.error and got.error.code == "INVALID_ARGUMENT"
        compared += 1
    assert compared == 20


def _kebab(method: str) -> str:
    return "".join(
        "-" + c.lower() if c.isupper() and i else c.lower() for i, c in enumerate(method)
    )


def test_short_enum_names_and_camel_case_read_as_the_proto_names(server: tuple[str, int]) -> None:
    base, _ = server
    short = {"model": {"preset": "llama3-8b"}, "cluster": {"numGpus": 8},
             "training": {"precision": "BF16", "framework": "MEGATRON"}}  # fmt: skip
    full = {"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": 8},
            "training": {"precision": "PRECISION_BF16", "framework": "FRAMEWORK_MEGATRON"}}  # fmt: skip
    a, b = send(f"{base}/v1/plan", short), send(f"{base}/v1/plan", full)
    assert a.status == b.status == 200
    assert a.body["config"] == b.body["config"]
    assert a.headers["x-request-id"] and a.body["memory"]["total"].isdigit()  # int64 as a string


# --- the same validation ------------------------------------------------------------------------


@pytest.mark.parametrize(("mutate", "field", "value"), [b[1:] for b in BAD_INPUTS],
                         ids=[b[0] for b in BAD_INPUTS])  # fmt: skip
def test_bad_input_is_400_with_the_violations_grpc_gives(
    server: tuple[str, int],
    mutate: Callable[[planner_pb2.PlanRequest], None],
    field: str,
    value: str,
) -> None:
    base, port = server
    msg = plan_message(small_request(time_limit_s=5))
    if field == "model.num_attention_heads":
        msg.model.num_attention_heads, msg.model.hidden_size = 64, 4096
    mutate(msg)
    http = send(f"{base}/v1/plan", as_json(msg))
    assert http.status == 400 and http.body["error"]["status"] == "INVALID_ARGUMENT"
    with raw_stub(port) as stub, pytest.raises(grpc.RpcError) as raised:
        stub.Plan(msg, timeout=30)
    rpc = [(v.field, v.description) for v in error_from_rpc(raised.value).violations]
    assert http.violations == rpc
    assert [f for f, _ in http.violations] == [field] and value in http.violations[0][1]


@pytest.mark.parametrize(
    ("method", "body", "field"),
    [
        ("ScalingCurve", {**CURVE, "clusters": [{"max_gpus": 8}], "grid": {"counts": [8, 64]}},
         "grid.counts[1]"),
        ("ScalingCurve", {**CURVE, "grid": {}}, "grid"),
        ("Replan", {**REPLAN, "config": {**REPLAN["config"], "tp": 3}}, "config.tp"),
        ("TrainingFront", {**CURVE, "token_budget": 10**9, "batch": {"kind": "FREE",
                           "global_batch_tokens": 4096}}, "batch.global_batch_tokens"),
        ("SmallestAllocation", {**ADMIT, "deadline_s": None, "deadline_unix_s": 1_000_000.0},
         "deadline_unix_s"),
    ],
)  # fmt: skip
def test_scheduler_bad_input_is_400_naming_the_field_as_grpc(
    server: tuple[str, int], method: str, body: dict, field: str
) -> None:
    base, port = server
    model = {"ScalingCurve": CurveRequest, "Replan": ReplanRequest,
             "SmallestAllocation": AdmitRequest, "TrainingFront": FrontRequest}[method]  # fmt: skip
    msg = _message(method, model.model_validate({k: v for k, v in body.items() if v is not None}))
    http = send(f"{base}/v1/{_kebab(method)}", as_json(msg))
    with raw_stub(port) as stub, pytest.raises(grpc.RpcError) as raised:
        getattr(stub, method)(msg, timeout=60)
    rpc = [(v.field, v.description) for v in error_from_rpc(raised.value).violations]
    assert http.status == 400 and http.violations == rpc and rpc[0][0] == field


def test_empty_bodies_name_every_missing_field(server: tuple[str, int]) -> None:
    base, _ = server
    plan = send(f"{base}/v1/plan", b"")
    assert plan.status == 400 and sorted(f for f, _ in plan.violations) == ["cluster", "model"]
    assert plan.body["error"]["request_id"] == plan.headers["x-request-id"]
    evaluate = send(f"{base}/v1/evaluate", {})
    assert sorted(f for f, _ in evaluate.violations) == ["cluster", "config", "model"]


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (b"{not json", "request", "not JSON"),
        (b"[1, 2]", "request", "JSON object"),
        (
            {"model": {"preset": "llama3-8b"}, "cluster": {"num_gpu": 8}},
            "cluster.num_gpu",
            "no field",
        ),  # fmt: skip
        (
            {"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": "eight"}},
            "cluster.num_gpus",
            "whole number",
        ),  # fmt: skip
        (
            {"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": 2**40}},
            "cluster.num_gpus",
            "range",
        ),  # fmt: skip
        ({"model": "llama3-8b", "cluster": {"num_gpus": 8}}, "model", "must be an object"),
        (
            {
                "model": {"preset": "llama3-8b"},
                "cluster": {"num_gpus": 8},
                "training": {"precision": "FP4"},
            },
            "training.precision",
            "BF16",
        ),  # fmt: skip
        (
            {"model": {"preset": "llama3-8b"}, "cluster": {"num_gpus": 8, "gpu": "x" * 5000}},
            "cluster.gpu",
            "5,000 characters",
        ),  # fmt: skip
    ],
)
def test_json_that_is_not_the_message_is_400_naming_the_field(
    server: tuple[str, int], body: object, field: str, words: str
) -> None:
    base, _ = server
    http = send(f"{base}/v1/plan", body)
    assert http.status == 400, http.body
    assert http.violations[0][0] == field and words in http.violations[0][1], http.violations
    assert len(json.dumps(http.body)) < 2000  # a long value is echoed truncated


def test_a_body_past_the_cap_is_refused_unread(server: tuple[str, int]) -> None:
    base, _ = server
    for size in (400_000, 8_000_000):  # past the call's cap; past every call's
        http = send(f"{base}/v1/plan", b'{"model": {"preset": "' + b"x" * size + b'"}}')
        assert http.status == 429 and http.body["error"]["status"] == "RESOURCE_EXHAUSTED"
        assert f"{size + 25:,} bytes" in http.body["error"]["message"]


# --- deadlines, streams, metrics ----------------------------------------------------------------


def _ended_by_its_deadline(answer: Answer) -> bool:
    """As over gRPC (test_grpc_server): a plan whose deadline comes first ends with
    DEADLINE_EXCEEDED, or with the best plan in hand, short of proven (FEASIBLE, FALLBACK)."""
    if answer.status == 504:
        return answer.body["error"]["status"] == "DEADLINE_EXCEEDED"
    return answer.status == 200 and answer.body["solver"]["status"] in ("FALLBACK", "FEASIBLE")


def test_the_timeout_field_is_the_calls_deadline(server: tuple[str, int]) -> None:
    base, _ = server
    body = as_json(plan_message(big_request(time_limit_s=30)))  # seconds of search to proof
    for query, headers in (("?timeout=0.5", {}), ("", {"timeout": "500ms"})):
        cache.clear()  # cold, as in test_grpc_server: the suite's kept tables answer it at once
        started = time.monotonic()
        answer = send(f"{base}/v1/plan{query}", body, headers=headers)
        assert _ended_by_its_deadline(answer), (answer.status, str(answer.body)[:300])
        assert time.monotonic() - started < 5
    bad = send(f"{base}/v1/plan?timeout=soon", body)
    assert bad.status == 400 and bad.violations[0][0] == "timeout"


def test_plan_batch_streams_json_lines_and_refuses_an_empty_batch(server: tuple[str, int]) -> None:
    base, _ = server
    lines = send(f"{base}/v1/plan-batch", {"requests": [PLANS[0], PLANS[1]]})
    assert lines.status == 200 and lines.headers["Content-Type"].startswith("application/x-ndjson")
    assert sorted(x["index"] for x in lines.body) == [0, 1]
    assert all(x["result"]["status"] == "PLAN_STATUS_OPTIMAL" for x in lines.body)
    empty = send(f"{base}/v1/plan-batch", {"requests": []})
    assert empty.status == 400 and empty.violations[0][0] == "requests"


def test_http_calls_count_in_the_servers_metrics() -> None:
    with http_server(metrics_port=0) as (base, _, server):
        assert send(f"{base}/v1/plan", PLANS[0]).status == 200
        assert send(f"{base}/v1/plan", {"cluster": {"num_gpus": 8}}).status == 400
        assert send(f"{base}/page/meta").status == 200  # the page's helpers are calls too
        assert send(f"{base}/page/hf-config", b"[1]").status == 400
        with urllib.request.urlopen(f"http://{LOOPBACK}:{server.metrics_port}/metrics") as page:
            text = page.read().decode()
    assert 'meshplan_calls_total{code="OK",method="Plan",transport="http"} 1.0' in text
    assert (
        'meshplan_calls_total{code="INVALID_ARGUMENT",method="Plan",transport="http"} 1.0' in text
    )
    assert 'meshplan_plans_total{status="OPTIMAL"} 1.0' in text
    assert 'meshplan_calls_total{code="OK",method="PageMeta",transport="http"} 1.0' in text
    assert 'meshplan_calls_total{code="INVALID_ARGUMENT",method="PageHfConfig",transport="http"} 1.0' in text  # fmt: skip


# --- tokens and TLS -----------------------------------------------------------------------------


def test_tokens_accepted_missing_wrong_and_nothing_parsed_without_one(tmp_path: Path) -> None:
    tokens = _write(tmp_path / "tokens", ("\n".join(TOKENS) + "\n").encode())
    with http_server(auth_token_file=str(tokens)) as (base, _, server):
        for token in TOKENS:
            ok = send(f"{base}/v1/plan", PLANS[0], headers={"Authorization": f"Bearer {token}"})
            assert ok.status == 200
        for headers, words in (({}, "required"), ({"Authorization": "Bearer wrong-token-0123456789"}, "not valid")):  # fmt: skip
            refused = send(f"{base}/v1/plan", PLANS[0], headers=headers)
            assert refused.status == 401 and words in refused.body["error"]["message"]
        garbage = send(f"{base}/v1/plan", b"\xff\xff garbage")  # refused, not parsed
        assert garbage.status == 401
        assert send(f"{base}/v1/plan-batch", {"requests": [PLANS[0]]}).status == 401
        assert send(f"{base}/v1/catalog").status == 401
        assert send(f"{base}/page/export", {}).status == 401
        assert send(f"{base}/").status == 200  # the page itself: public code, no data
        refusals = server.metrics.calls.labels("Plan", "UNAUTHENTICATED", "http")._value.get()
        assert refusals == 3


def _https(pki: Pki, client: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca))
    if client:
        context.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    return context


def test_tls_serves_the_grpc_ports_certificate_and_refuses_plaintext(pki: Pki) -> None:
    with http_server(tls_cert=str(pki.cert), tls_key=str(pki.key)) as (base, _, _server):
        assert base.startswith("https://")
        assert send(f"{base}/v1/plan", PLANS[0], context=_https(pki)).status == 200
        with pytest.raises(urllib.error.URLError):  # a client that does not trust the CA
            send(f"{base}/v1/catalog", context=ssl.create_default_context(cafile=str(pki.other_ca)))  # fmt: skip
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # plaintext
            send(base.replace("https", "http") + "/v1/catalog", timeout=5)


def test_mtls_needs_a_client_certificate_from_the_client_ca(pki: Pki) -> None:
    with http_server(tls_cert=str(pki.cert), tls_key=str(pki.key), tls_client_ca=str(pki.ca)) as (
        base,
        _,
        _server,
    ):
        assert send(f"{base}/v1/catalog", context=_https(pki, client=True)).status == 200
        with pytest.raises((urllib.error.URLError, ConnectionError, ssl.SSLError)):
            send(f"{base}/v1/catalog", context=_https(pki))


def test_certificates_are_reloaded_at_the_next_handshake(pki: Pki, tmp_path: Path) -> None:
    with http_server(tls_cert=str(pki.cert), tls_key=str(pki.key)) as (base, _, server):
        assert send(f"{base}/v1/catalog", context=_https(pki)).status == 200
        other = trustme.CA()
        cert, key = _leaf(other, tmp_path, "rotated", "localhost", "127.0.0.1")
        pki.cert.write_bytes(cert.read_bytes())
        pki.key.write_bytes(key.read_bytes())
        server.reload()  # SIGHUP
        trusting_new = ssl.create_default_context(cafile=str(_write(tmp_path / "new-ca.pem", other.cert_pem.bytes())))  # fmt: skip
        assert send(f"{base}/v1/catalog", context=trusting_new).status == 200
        with pytest.raises(urllib.error.URLError):
            send(f"{base}/v1/catalog", context=_https(pki))


# --- the page's helpers and assets --------------------------------------------------------------

LLAMA_CONFIG = {
    "model_type": "llama", "num_hidden_layers": 16, "hidden_size": 2048,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 8192,
    "vocab_size": 128256, "tie_word_embeddings": True,
}  # fmt: skip


def test_the_export_and_the_config_reader(server: tuple[str, int]) -> None:
    base, _ = server
    plan = send(f"{base}/v1/plan", PLANS[0]).body
    body = {**PLANS[0], "config": plan["config"]}
    megatron = send(f"{base}/page/export?kind=megatron", body)
    assert megatron.status == 200 and "--tensor-model-parallel-size 1" in megatron.body["text"]
    assert send(f"{base}/page/export", body).body["kind"] == "megatron"  # the framework's own
    titan_request = {**PLANS[0], "training": {"framework": "FRAMEWORK_TORCHTITAN"}}
    titan_plan = send(f"{base}/v1/plan", titan_request).body  # a layout torchtitan runs
    titan_body = {**titan_request, "config": titan_plan["config"]}
    titan = send(f"{base}/page/export?kind=torchtitan", titan_body)
    assert titan.status == 200 and "parallelism=ParallelismConfig(" in titan.body["text"]
    bad = send(f"{base}/page/export?kind=jax", body)
    assert bad.status == 400 and bad.violations[0][0] == "kind"
    spec = send(f"{base}/page/hf-config", LLAMA_CONFIG)
    assert spec.status == 200 and spec.body["model"]["num_layers"] == 16
    assert spec.body["model"]["num_kv_heads"] == 8
    planned = send(f"{base}/v1/plan", {"model": spec.body["model"], "cluster": {"num_gpus": 8}})
    assert planned.status == 200 and planned.body["status"] == "PLAN_STATUS_OPTIMAL"
    wrong = send(f"{base}/page/hf-config", {**LLAMA_CONFIG, "model_type": "bert"})
    assert wrong.status == 400 and wrong.violations[0][0] == "config.json"
    assert "bert" in wrong.violations[0][1]


def test_meta_lists_the_enums_walls_and_export_kinds(server: tuple[str, int]) -> None:
    base, _ = server
    meta = send(f"{base}/page/meta").body
    assert "MEGATRON" in meta["enums"]["Framework"] and "FULL" in meta["enums"]["Recompute"]
    assert meta["framework_export"]["TORCHTITAN"] == "torchtitan"
    assert set(meta["walls"]) >= {"MEMORY", "BUBBLE", "DP_CAP"} and meta["tokens"] is False


def test_the_page_is_served_offline_within_300_kb_gzipped(server: tuple[str, int]) -> None:
    base, _ = server
    page = send(f"{base}/")
    assert page.status == 200 and "<title>meshplan planner</title>" in page.body
    csp = page.headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp
    assets = load_assets()
    references = {n for n in assets if f"/static/{n}" in page.body or any(f"./{n}" in a.body.decode() for a in assets.values() if n != "index.html")}  # fmt: skip
    assert references == set(assets) - {"index.html"}  # every file is used, none is missing
    for name in assets:
        text = assets[name].body.decode()
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")
        assert "https://" not in text  # nothing is fetched from elsewhere
    total = sum(len(a.gzipped) for a in assets.values())
    assert total <= 300 * 1024, total
    assert send(f"{base}/static/nope.js").status == 404
