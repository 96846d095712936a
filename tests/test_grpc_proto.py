"""The proto API: generated code imports and is fresh, buf lint is clean, and every message
mirrors its pydantic model field for field, so conversion is generic and lossless."""

from __future__ import annotations

import importlib
import math
import shutil
import subprocess
import sys
from enum import Enum
from pathlib import Path

import pytest
from google.protobuf.descriptor import Descriptor
from pydantic import BaseModel

from meshplan.convert import (
    FieldValueError,
    dict_to_message,
    enum_from_proto,
    enum_prefix,
    enum_to_proto,
    from_proto,
    message_to_dict,
    to_proto,
)
from meshplan.server.validate import model_type
from meshplan.solver.catalog import GpuSpec, ModelPreset
from meshplan.solver.results import (
    Alternative,
    Evaluation,
    Explanation,
    MemoryBill,
    NumParameters,
    Performance,
    PlanResult,
    PlanStatus,
    SolverInfo,
    TimeBreakdown,
    Wall,
)
from meshplan.solver.schema import (
    EvaluateRequest,
    Framework,
    ParallelConfig,
    PlanRequest,
    Precision,
    Recompute,
)
from meshplan.v1 import catalog_pb2, planner_pb2, result_pb2, spec_pb2

ROOT = Path(__file__).resolve().parent.parent
PAIRS = [
    (planner_pb2.PlanRequest, PlanRequest),
    (planner_pb2.EvaluateRequest, EvaluateRequest),
    (planner_pb2.PlanResponse, PlanResult),
    (planner_pb2.EvaluateResponse, Evaluation),
    (catalog_pb2.GpuInfo, GpuSpec),
    (catalog_pb2.ModelInfo, ModelPreset),
]
ENUMS = [
    (spec_pb2.Precision, Precision),
    (spec_pb2.Recompute, Recompute),
    (spec_pb2.Framework, Framework),
    (result_pb2.PlanStatus, PlanStatus),
    (result_pb2.Wall, Wall),
]


def test_every_generated_module_imports() -> None:
    modules = sorted(
        p.stem for p in (ROOT / "meshplan" / "v1").glob("*.py") if p.stem != "__init__"
    )
    assert {"planner_pb2", "planner_pb2_grpc", "spec_pb2", "result_pb2", "catalog_pb2"} <= set(
        modules
    )
    for name in modules:
        importlib.import_module(f"meshplan.v1.{name}")


def test_generated_code_is_fresh() -> None:
    pytest.importorskip("grpc_tools")
    script = ROOT / "scripts" / "gen_proto.py"
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_buf_lint_is_clean() -> None:
    buf = shutil.which("buf") or shutil.which("buf", path=str(Path(sys.executable).parent))
    if buf is None:
        pytest.skip("buf (pip package buf-bin) is not installed")
    done = subprocess.run([buf, "lint"], cwd=ROOT / "proto", capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def _mirror(desc: Descriptor, model: type[BaseModel], path: str) -> list[str]:
    problems = []
    proto_names = set(desc.fields_by_name)
    model_names = set(model.model_fields)
    if proto_names != model_names:
        problems.append(f"{path}: proto-only {proto_names - model_names}, "
                        f"pydantic-only {model_names - proto_names}")  # fmt: skip
    for name in proto_names & model_names:
        field = desc.fields_by_name[name]
        sub = model_type(model.model_fields[name].annotation)
        if field.message_type is not None:
            if sub is None:
                problems.append(f"{path}.{name}: a message in proto, not a model in pydantic")
            else:
                problems += _mirror(field.message_type, sub, f"{path}.{name}")
    return problems


@pytest.mark.parametrize(("message", "model"), PAIRS, ids=lambda x: x.__name__)
def test_message_mirrors_model(message: type, model: type[BaseModel]) -> None:
    assert _mirror(message.DESCRIPTOR, model, message.DESCRIPTOR.name) == []


@pytest.mark.parametrize(("proto_enum", "domain"), ENUMS, ids=lambda x: getattr(x, "__name__", ""))
def test_enum_mapping_round_trips(proto_enum: object, domain: type[Enum]) -> None:
    desc = proto_enum.DESCRIPTOR
    prefix = enum_prefix(desc)
    assert desc.values_by_number[0].name == prefix + "UNSPECIFIED"
    assert len(desc.values) == len(domain) + 1  # every domain value, plus UNSPECIFIED
    for member in domain:
        name = enum_to_proto(desc, member)
        assert name == prefix + member.value
        assert enum_from_proto(desc, name) == member.value
        assert enum_from_proto(desc, desc.values_by_name[name].number) == member.value
    assert enum_to_proto(desc, None) is None
    assert enum_from_proto(desc, prefix + "UNSPECIFIED") is None
    with pytest.raises(ValueError):
        enum_to_proto(desc, "NO_SUCH_VALUE")
    with pytest.raises(ValueError):
        enum_to_proto(desc, "UNSPECIFIED")


def test_enum_names_on_the_wire() -> None:
    assert enum_to_proto(spec_pb2.Precision.DESCRIPTOR, Precision.BF16) == "PRECISION_BF16"
    assert enum_from_proto(result_pb2.Wall.DESCRIPTOR, "WALL_DP_CAP") == "DP_CAP"
    msg = dict_to_message({"training": {"precision": "FP8"}}, planner_pb2.PlanRequest)
    assert msg.training.precision == spec_pb2.PRECISION_FP8


def test_request_keeps_presence_and_defaults() -> None:
    req = PlanRequest.model_validate(
        {
            "model": {"preset": "llama3-8b", "num_layers": 2},
            "cluster": {"num_gpus": 8},
            "search": {"zero_stage": 0, "recompute": "FULL", "sequence_parallel": False},
            "options": {"time_limit_s": 2.5},
        }
    )
    msg = to_proto(req, planner_pb2.PlanRequest, only_set=True)
    assert msg.search.HasField("zero_stage") and msg.search.zero_stage == 0
    assert not msg.search.HasField("tp") and not msg.HasField("training")
    assert not msg.options.HasField("num_workers")
    back = from_proto(msg, PlanRequest)
    assert back == req
    assert back.options.model_fields_set == {"time_limit_s"}
    assert back.search.sequence_parallel is False and back.model.hidden_size is None


def _full_result() -> PlanResult:
    config = ParallelConfig(
        tp=8, pp=4, dp=16, cp=2, ep=8, virtual_stages=2, micro_batch_size=1,
        num_microbatches=32, zero_stage=3, recompute=Recompute.SELECTIVE, sequence_parallel=False,
    )  # fmt: skip
    memory = MemoryBill(
        weights=3 * 2**33, gradients=2**34, optimizer=5 * 2**34, activations=7, reserve=2**31,
        total=2**40, hbm=80 * 2**30, stage="first",
    )  # fmt: skip
    perf = Performance(
        step_time_s=1.25, tokens_per_s=1e7, mfu=0.41, hfu=0.5, global_batch_tokens=2**24,
        num_gpus_used=1024, model_flops_per_token=6.1e11, bubble_fraction=0.0,
        breakdown=TimeBreakdown(
            compute_s=1.0, recompute_s=0.0, tp_comm_s=0.1, cp_comm_s=0.0, ep_comm_s=0.05,
            pp_comm_s=0.01, dp_comm_s=0.09, bubble_s=0.0, optimizer_s=0.0,
        ),
    )  # fmt: skip
    return PlanResult(
        status=PlanStatus.FEASIBLE,
        config=config,
        num_parameters=NumParameters(total=671 * 10**9, active=37 * 10**9),
        memory=memory,
        performance=perf,
        binding_wall=Wall.DP_CAP,
        warnings=["a bubble over 20%", "tp crosses a node"],
        alternatives=[
            Alternative(config=config, memory=memory, performance=perf, binding_wall=Wall.NONE)
        ],
        explanation=Explanation(reason="none", min_gpus=0, min_memory_bytes=2**45),
        solver=SolverInfo(
            status="FEASIBLE", objective=123.0, bound=100.0, gap=math.inf, wall_time_s=0.5,
            solve_time_s=0.4, num_variables=10, num_constraints=20, num_layouts=3,
            used_fallback=True,
        ),
    )  # fmt: skip


def test_result_round_trips_losslessly() -> None:
    result = _full_result()
    msg = to_proto(result, planner_pb2.PlanResponse)
    assert msg.status == result_pb2.PLAN_STATUS_FEASIBLE
    assert msg.binding_wall == result_pb2.WALL_DP_CAP
    assert msg.num_parameters.total == 671 * 10**9  # int64, no float rounding
    assert from_proto(msg, PlanResult, with_defaults=True) == result
    wire = planner_pb2.PlanResponse.FromString(msg.SerializeToString())
    assert from_proto(wire, PlanResult, with_defaults=True) == result


def test_infeasible_result_round_trips() -> None:
    result = PlanResult(
        status=PlanStatus.INFEASIBLE,
        num_parameters=NumParameters(total=1, active=1),
        explanation=Explanation(reason="96 GiB per GPU against 80", min_gpus=512),
    )
    msg = to_proto(result, planner_pb2.PlanResponse)
    assert not msg.HasField("config") and not msg.HasField("solver")
    assert from_proto(msg, PlanResult, with_defaults=True) == result


def test_response_dict_has_zeros_and_no_unspecified() -> None:
    msg = planner_pb2.PlanResponse(status=result_pb2.PLAN_STATUS_OPTIMAL)
    data = message_to_dict(msg, with_defaults=True)
    assert data["status"] == "OPTIMAL" and "binding_wall" not in data
    assert data["warnings"] == [] and data["config"] is None


def test_response_dict_lists_every_field_once_read() -> None:
    """with_defaults: every field but an unset enum, None where a field has presence, zero
    scalars, and a new empty list for each repeated field (two dicts never share one)."""
    empty = planner_pb2.PlanResponse()
    first, second = (message_to_dict(empty, with_defaults=True) for _ in range(2))
    names = {f.name for f in planner_pb2.PlanResponse.DESCRIPTOR.fields if f.enum_type is None}
    assert set(first) == names
    assert first["warnings"] == [] and first["warnings"] is not second["warnings"]
    assert first["config"] is None and first["solver"] is None
    nested = message_to_dict(planner_pb2.PlanResponse(solver={}), with_defaults=True)["solver"]
    assert nested["num_layouts"] == 0 and nested["gap"] == 0.0 and nested["status"] == ""


def test_unknown_enum_number_names_its_field_path() -> None:
    msg = planner_pb2.PlanResponse(status=result_pb2.PLAN_STATUS_OPTIMAL)
    msg.config.recompute = 99  # open proto3 enum: a newer server's value
    with pytest.raises(FieldValueError) as err:
        message_to_dict(msg, with_defaults=True)
    assert err.value.path == "config.recompute" and "numbered 99" in err.value.message
