"""The soak benchmark's fuzz phase: the property tests' generated instances (tests/
test_oracle_property.py), the same with one field set to an extreme value, evaluations of random
layouts, small batches, scheduler queries built from the same instances (some with an extreme
field), and garbage bytes, each sent raw to a method of meshplan.v1.Planner; then the server's
log says how long it took over each call."""

from __future__ import annotations

import math
import random
import re
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from benchmarks.common import Summary

if TYPE_CHECKING:
    from benchmarks.soak import Server

ROOT = Path(__file__).resolve().parent.parent
PLAN, EVALUATE, BATCH, CATALOG = "Plan", "Evaluate", "PlanBatch", "ListCatalog"
CURVE, REPLAN, ADMIT, FRONT = "ScalingCurve", "Replan", "SmallestAllocation", "TrainingFront"
SCHEDULER = (CURVE, REPLAN, ADMIT, FRONT)
FUZZ_THREADS = 32  # concurrent fuzzing callers, each with its own token
LATE_S = 0.100  # a call the server ends later than its deadline + this is late

_INTS = [0, -1, 1, 7, 2**31 - 1, -(2**31)]
_INT64S = [*_INTS, 2**63 - 1, -(2**63)]
_FLOATS = [0.0, -1.0, 1e-300, 1e300, math.nan, math.inf, -math.inf, 0.099]
_STRINGS = ["", "x" * 300, "\x00", "é" * 40, "llama3-8b", "h100-sxm-80gb", "no-such-name"]


@dataclass(frozen=True)
class FuzzCall:
    """One raw call: the method, the request bytes, the deadline (s) and what kind it is."""

    method: str
    body: bytes
    deadline_s: float
    kind: str


def property_instances(count: int) -> list[Any]:
    """`count` PlanRequests drawn by the property test's Hypothesis strategy (deterministic)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from hypothesis import HealthCheck, Phase, given, settings
    from test_oracle_property import instances

    out: list[Any] = []

    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(instances())
    def collect(req: Any) -> None:
        out.append(req)

    collect()
    return out


def _set_extreme(msg: Message, rng: random.Random) -> None:
    """Set one random scalar field, at any depth, to an extreme or odd value."""
    fields = [f for f in msg.DESCRIPTOR.fields if not f.is_repeated]
    field = rng.choice(fields)
    if field.message_type is not None:
        _set_extreme(getattr(msg, field.name), rng)
        return
    if field.enum_type is not None:
        setattr(msg, field.name, rng.choice([0, 1, 2, 3, 57, 99]))  # 57, 99: unknown numbers
    elif field.type == FieldDescriptor.TYPE_BOOL:
        setattr(msg, field.name, not getattr(msg, field.name))
    elif field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        setattr(msg, field.name, rng.choice(_FLOATS))
    elif field.type == FieldDescriptor.TYPE_STRING:
        setattr(msg, field.name, rng.choice(_STRINGS))
    elif field.type == FieldDescriptor.TYPE_INT64:
        setattr(msg, field.name, rng.choice(_INT64S))
    else:
        setattr(msg, field.name, rng.choice(_INTS))


def _garbage(rng: random.Random, valid: bytes) -> bytes:
    roll = rng.random()
    if roll < 0.4:
        return rng.randbytes(rng.randint(0, 2000))
    if roll < 0.7 and valid:
        return valid[: rng.randint(0, len(valid) - 1)]  # cut short
    flipped = bytearray(valid or b"\x00")
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(flipped))
        flipped[i] ^= 1 << rng.randrange(8)
    return bytes(flipped)


def scheduler_message(method: str, base: Message, rng: random.Random) -> Message:
    """A scheduler query over the model, GPU and training of plan request `base`: a small grid
    around its GPU count, a batch policy, and (Replan) a random running layout."""
    from meshplan.v1 import scheduler_pb2

    n = max(base.cluster.num_gpus, 1)
    cls = {
        CURVE: scheduler_pb2.ScalingCurveRequest,
        REPLAN: scheduler_pb2.ReplanRequest,
        ADMIT: scheduler_pb2.SmallestAllocationRequest,
        FRONT: scheduler_pb2.TrainingFrontRequest,
    }[method]
    msg = cls()
    msg.model.CopyFrom(base.model)
    msg.training.CopyFrom(base.training)
    msg.options.cell_time_limit_s = rng.choice([0.05, 0.2, 1.0])
    kind = rng.choice(["FIXED_GLOBAL", "FIXED_PER_REPLICA", "FREE"])
    msg.batch.kind = scheduler_pb2.BatchPolicyKind.Value(f"BATCH_POLICY_KIND_{kind}")
    seq = base.training.seq_len or 4096
    if kind == "FIXED_GLOBAL":
        msg.batch.global_batch_tokens = seq * rng.choice([8, 64, 512])
    elif kind == "FIXED_PER_REPLICA":
        msg.batch.per_replica_batch_tokens = seq * rng.choice([1, 4])
    if method == REPLAN:
        msg.cluster.CopyFrom(base.cluster)
        for name in ("tp", "pp", "dp", "micro_batch_size", "num_microbatches"):
            setattr(msg.config, name, rng.choice([1, 1, 2, 4, 8, 3, 0]))
        msg.event.delta_nodes = rng.choice([-1, 1, -2])
        msg.compatibility = scheduler_pb2.CompatibilityLevel.Value(
            rng.choice(["COMPATIBILITY_LEVEL_SAME_MODEL_PARALLEL", "COMPATIBILITY_LEVEL_FREE"])
        )
        return msg
    template = msg.clusters.add()
    template.gpu = base.cluster.gpu or "h100-sxm-80gb"
    if base.cluster.HasField("gpus_per_node"):
        template.gpus_per_node = base.cluster.gpus_per_node
    msg.grid.counts.extend(sorted({max(n // 2, 1), n}))
    if method == ADMIT:
        template.max_gpus = n
        msg.work.tokens = rng.choice([10**9, 10**12])
        msg.deadline_s = rng.choice([3600.0, 86400.0 * 30])
    elif method == FRONT:
        template.price_per_gpu_hour = 2.0
        msg.token_budget = 10**11
    return msg


def with_observations(msg: Message, rng: random.Random, count: int) -> Message:
    """A ScalingCurve, SmallestAllocation or TrainingFront query with `count` observations of
    random layouts on its grid's counts (many repeated, some that no cell can run)."""
    counts = list(msg.grid.counts) or [max(t.max_gpus, 1) for t in msg.clusters]
    label = msg.clusters[0].name or msg.clusters[0].gpu
    layouts = []
    for _ in range(rng.randint(1, 8)):
        n = rng.choice(counts)
        tp = rng.choice([t for t in (1, 2, 4, 8) if n % t == 0])
        layouts.append((n, tp, n // tp, rng.choice([1, 2]), rng.choice([1, 4, 16])))
    for _ in range(count):
        n, tp, dp, mb, m = rng.choice(layouts)
        ob = msg.observations.add(cluster=label, num_gpus=n, step_time_s=rng.uniform(0.5, 20))
        ob.config.tp, ob.config.pp, ob.config.dp = tp, 1, dp
        ob.config.micro_batch_size, ob.config.num_microbatches = mb, m
    return msg


EDGE_KINDS = ("fp8-on-a100", "huge", "hbm-at-reserve")


def edge_case(
    method: str, base: Message, rng: random.Random, kind: str | None = None
) -> tuple[Message, str]:
    """FP8 on an A100 (alone, or in a fleet with an H100), a size past int64's answers, or HBM
    at or below the fixed memory reserve (no usable memory, with a critical batch so the DP-cap
    wall divides by it), at random or the `kind` named (EDGE_KINDS); the message and its kind."""
    from meshplan.v1 import planner_pb2, spec_pb2

    if method == PLAN:
        msg = planner_pb2.PlanRequest()
        msg.CopyFrom(base)
    else:
        msg = scheduler_message(method, base, rng)
    clusters = [msg.cluster] if method in (PLAN, REPLAN) else list(msg.clusters)
    roll = rng.random() if kind is None else EDGE_KINDS.index(kind) * 0.4
    if roll < 0.4:
        msg.training.precision = spec_pb2.Precision.Value("PRECISION_FP8")
        clusters[0].gpu = "a100-sxm-80gb"
        if method not in (PLAN, REPLAN) and rng.random() < 0.5:
            msg.clusters.add(gpu="h100-sxm-80gb", max_gpus=msg.clusters[0].max_gpus)
        return msg, "fp8-on-a100"
    if roll < 0.8:
        which = rng.choice(["num_layers", "hidden_size", "micro_batch_size", "num_microbatches"])
        if which in ("num_layers", "hidden_size"):
            msg.model.Clear()
            msg.model.num_layers, msg.model.hidden_size = 32, 4096
            msg.model.num_attention_heads = msg.model.num_kv_heads = 32
            msg.model.ffn_hidden_size, msg.model.vocab_size = 14336, 128256
            setattr(msg.model, which, 2**31 - 1 if which == "num_layers" else 2**30)
        elif method == REPLAN:
            setattr(msg.config, which, 2**31 - 1)
        elif method == PLAN:
            setattr(msg.search, which, 2**31 - 1)
        return msg, "huge"
    hbm = rng.choice([0.5, 1.0, 2.0])
    for cluster in clusters:
        cluster.hbm_gib = hbm
    if hbm == 2.0 or rng.random() < 0.5:
        msg.search.memory_reserve_gib = hbm
    seq = msg.training.seq_len or 4096
    msg.training.seq_len, msg.training.critical_batch_tokens = seq, seq * rng.choice([8, 128])
    msg.training.ClearField("global_batch_tokens")
    return msg, "hbm-at-reserve"


def fuzz_calls(count: int, seed: int = 0, max_deadline_s: float = 1.0) -> list[FuzzCall]:
    """`count` raw calls: 35% generated plans, 15% with one extreme field, 10% evaluations of a
    random layout, 5% batches, 12% scheduler queries (a third with an extreme field), 4% queries
    with 1..2,000 observations, 4% edge cases on Plan and every scheduler query (`edge_case`:
    FP8 on an A100 alone or beside an H100, a size whose answer passes int64 -- num_layers
    2^31-1, hidden_size 2^30, micro-batches 2^31-1 -- or HBM at or below the reserve), 15% garbage (to any method); each with a deadline of
    0.05..max_deadline_s."""
    from meshplan.client.sync import plan_message
    from meshplan.v1 import planner_pb2

    rng = random.Random(seed)
    pool = [plan_message(r) for r in property_instances(min(count, 2000))]
    for msg in pool:  # the server's cap applies; small limits keep the generated plans quick
        msg.options.time_limit_s = rng.choice([0.05, 0.2, 1.0])
    out: list[FuzzCall] = []
    for _ in range(count):
        roll, base = rng.random(), rng.choice(pool)
        deadline = rng.uniform(0.05, max_deadline_s)
        if roll < 0.35:
            out.append(FuzzCall(PLAN, base.SerializeToString(), deadline, "generated"))
        elif roll < 0.50:
            msg = planner_pb2.PlanRequest()
            msg.CopyFrom(base)
            for _ in range(rng.randint(1, 3)):
                _set_extreme(msg, rng)
            out.append(FuzzCall(PLAN, msg.SerializeToString(), deadline, "extreme"))
        elif roll < 0.60:
            ev = planner_pb2.EvaluateRequest(
                model=base.model, cluster=base.cluster, training=base.training
            )
            for name in ("tp", "pp", "dp", "micro_batch_size", "num_microbatches"):
                setattr(ev.config, name, rng.choice([1, 1, 2, 4, 8, 3, 2**31 - 1, 0, -4]))
            if rng.random() < 0.3:
                _set_extreme(ev, rng)
            out.append(FuzzCall(EVALUATE, ev.SerializeToString(), deadline, "evaluate"))
        elif roll < 0.65:
            items = [rng.choice(pool) for _ in range(rng.randint(1, 6))]
            batch = planner_pb2.PlanBatchRequest(requests=items)
            if rng.random() < 0.5:
                _set_extreme(batch.requests[0], rng)
            out.append(FuzzCall(BATCH, batch.SerializeToString(), deadline, "batch"))
        elif roll < 0.77:
            method = rng.choice(SCHEDULER)
            query = scheduler_message(method, base, rng)
            if rng.random() < 0.33:
                _set_extreme(query, rng)
            out.append(FuzzCall(method, query.SerializeToString(), deadline, "scheduler"))
        elif roll < 0.81:
            method = rng.choice([CURVE, ADMIT, FRONT])
            query = with_observations(
                scheduler_message(method, base, rng), rng, rng.choice([1, 2, 50, 2000])
            )
            out.append(FuzzCall(method, query.SerializeToString(), deadline, "observations"))
        elif roll < 0.85:
            method = rng.choice([PLAN, *SCHEDULER])
            query, kind = edge_case(method, base, rng)
            out.append(FuzzCall(method, query.SerializeToString(), deadline, kind))
        else:
            method = rng.choice([PLAN, PLAN, EVALUATE, BATCH, CATALOG, rng.choice(SCHEDULER)])
            out.append(
                FuzzCall(method, _garbage(rng, base.SerializeToString()), deadline, "garbage")
            )
    return out


def _fuzz_one(channel: Any, call: FuzzCall, index: int, token: str) -> tuple[str, int, float]:
    """(status, INTERNAL batch items, client-side seconds) of one raw call."""
    import grpc

    from meshplan.v1 import planner_pb2

    path = f"/meshplan.v1.Planner/{call.method}"
    metadata = (("authorization", f"Bearer {token}"), ("x-request-id", f"fz-{index}"))
    t0 = time.perf_counter()
    internal_items = 0
    try:
        if call.method == BATCH:
            for raw in channel.unary_stream(path)(
                call.body, timeout=call.deadline_s, metadata=metadata
            ):
                answer = planner_pb2.PlanBatchResponse.FromString(raw)
                internal_items += (
                    answer.WhichOneof("outcome") == "error" and answer.error.code == "INTERNAL"
                )
        else:
            channel.unary_unary(path)(call.body, timeout=call.deadline_s, metadata=metadata)
        status = "OK"
    except grpc.RpcError as err:
        status = err.code().name
    return status, internal_items, time.perf_counter() - t0


_REQUEST_ID = re.compile(r"request_id=fz-(\d+)")


def shape(call: FuzzCall) -> str:
    """A fuzzed request in short: its set fields as one line of protobuf text (observations
    counted, not listed), or its size if it does not parse."""
    from google.protobuf import text_format

    from meshplan.v1 import planner_pb2, scheduler_pb2

    cls = {
        PLAN: planner_pb2.PlanRequest,
        EVALUATE: planner_pb2.EvaluateRequest,
        BATCH: planner_pb2.PlanBatchRequest,
        CATALOG: planner_pb2.ListCatalogRequest,
        CURVE: scheduler_pb2.ScalingCurveRequest,
        REPLAN: scheduler_pb2.ReplanRequest,
        ADMIT: scheduler_pb2.SmallestAllocationRequest,
        FRONT: scheduler_pb2.TrainingFrontRequest,
    }[call.method]
    try:
        msg = cls.FromString(call.body)
    except Exception:  # noqa: BLE001  garbage: its size says enough
        return f"{len(call.body)} bytes that do not parse"
    observations = len(getattr(msg, "observations", ()))
    if observations:
        del msg.observations[:]
    text = text_format.MessageToString(msg, as_one_line=True)
    return text + (f" observations: {observations}" if observations else "")


def replaced_call(message: str, calls: list[FuzzCall]) -> dict[str, Any]:
    """The warning of a replaced worker, with the fuzzed call it was running (kind, method,
    deadline and shape) when the warning names one."""
    found = _REQUEST_ID.search(message)
    out: dict[str, Any] = {"message": message[:300]}
    if found is not None and int(found.group(1)) < len(calls):
        call = calls[int(found.group(1))]
        out |= {
            "kind": call.kind,
            "method": call.method,
            "deadline_s": call.deadline_s,
            "shape": shape(call),
        }
    return out


def fuzz_phase(server: Server, tokens: list[str], count: int) -> dict[str, Any]:
    import grpc

    from benchmarks.soak_load import lag_between, lag_buckets

    url = getattr(server, "metrics_url", None)
    gen2 = {"generation": "2"}
    lag_before = lag_buckets(url)
    gc_before = lag_buckets(url, "meshplan_gc_pause_seconds", gen2)
    calls = fuzz_calls(count)
    channels = [grpc.insecure_channel(server.target) for _ in range(FUZZ_THREADS)]
    t0 = time.monotonic()
    with ThreadPoolExecutor(FUZZ_THREADS) as pool:
        futures = [
            pool.submit(_fuzz_one, channels[i % FUZZ_THREADS], c, i, tokens[i % len(tokens)])
            for i, c in enumerate(calls)
        ]
        outcomes = [f.result() for f in futures]
    wall = time.monotonic() - t0
    lag = lag_between(lag_before, lag_buckets(url))
    full_gc = lag_between(gc_before, lag_buckets(url, "meshplan_gc_pause_seconds", gen2))
    for ch in channels:
        ch.close()
    by_id = {line.get("request_id"): line for line in server.lines() if line.get("method")}
    late, logged, internal_lines = [], 0, 0
    for i, call in enumerate(calls):
        line = by_id.get(f"fz-{i}")
        if line is None:
            continue  # refused by gRPC itself (e.g. a message over the size cap)
        logged += 1
        if line.get("call_s", 0.0) > call.deadline_s + LATE_S:
            late.append(
                {
                    "index": i,
                    "deadline_s": call.deadline_s,
                    "call_s": line["call_s"],
                    "kind": call.kind,
                }
            )
    internal = [line for line in server.lines() if line.get("status") == "INTERNAL"]
    internal_lines = len(internal)
    kind_of = {f"fz-{i}": call.kind for i, call in enumerate(calls)}
    examples = [
        {k: line.get(k) for k in ("method", "request_id", "item", "error")}
        | {"kind": kind_of.get(line.get("request_id", ""))}
        for line in internal[:10]
    ]
    return {
        "calls": len(calls),
        "seconds": wall,
        "codes": dict(Counter(status for status, _, _ in outcomes)),
        "kinds": dict(Counter(c.kind for c in calls)),
        "internal": sum(s == "INTERNAL" for s, _, _ in outcomes),
        "internal_items": sum(items for _, items, _ in outcomes),
        "internal_log_lines": internal_lines,
        "internal_examples": examples,
        "replaced": [
            replaced_call(line.get("message", ""), calls)
            for line in server.lines()
            if "replacing it" in line.get("message", "")
        ],
        "loop_lag": lag,
        "full_gc": full_gc,
        "logged": logged,
        "late": late[:20],
        "late_count": len(late),
        "client_s": Summary.of([s for _, _, s in outcomes]).__dict__,
    }
