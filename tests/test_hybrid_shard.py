"""training.hybrid_shard (FSDP1 HYBRID_SHARD, FSDP2 HSDP): the ZeRO state is sharded over the
data-parallel ranks inside one node and replicated across nodes, its gathers stay in the node
and the gradient shards are all-reduced across nodes; a request field in JSON, proto and on the
command line, refused where the framework cannot shard inside a node, and exported in each
FSDP framework's own words."""

from __future__ import annotations

import ast
import tomllib

import pytest
import yaml
from pydantic import ValidationError

from meshplan.convert import from_proto, to_proto
from meshplan.solver import EvaluateRequest, evaluate
from meshplan.solver.schema import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec
from meshplan.tools.cli.main import main
from meshplan.tools.export.emit import emit
from meshplan.v1 import spec_pb2

GIB = 2**30
MODEL = {"preset": "llama3-8b"}
S = 4096


def _evaluate(
    framework: str, hybrid: bool, zero: int = 3, gpus: int = 32, gpn: int = 8
) -> EvaluateRequest:
    req = EvaluateRequest.model_validate(
        {
            "model": MODEL,
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": gpus, "gpus_per_node": gpn},
            "training": {
                "seq_len": S,
                "global_batch_tokens": gpus * S,
                "framework": framework,
                "hybrid_shard": hybrid,
            },
            "config": {
                "tp": 1,
                "pp": 1,
                "dp": gpus,
                "micro_batch_size": 1,
                "num_microbatches": 1,
                "zero_stage": zero,
                "recompute": "FULL",
            },
        }
    )
    return evaluate(req)


@pytest.mark.parametrize("framework", ["TORCHTITAN", "LLM_FOUNDRY", "GENERIC"])
def test_state_is_sharded_over_the_node_only(framework: str) -> None:
    # 32 GPUs in 4 nodes of 8: the optimizer state is split 8 ways, not 32
    full, hybrid = _evaluate(framework, False), _evaluate(framework, True)
    assert hybrid.memory.optimizer == pytest.approx(4 * full.memory.optimizer, rel=1e-3)
    assert hybrid.memory.gradients > full.memory.gradients
    assert hybrid.memory.activations == full.memory.activations
    # one node: the node is the whole data-parallel group, nothing changes
    one, one_h = _evaluate(framework, False, gpus=8), _evaluate(framework, True, gpus=8)
    assert one_h.memory == one.memory
    assert one_h.performance.step_time_s == pytest.approx(one.performance.step_time_s)


def test_traffic_gathers_in_the_node_and_all_reduces_across_nodes() -> None:
    # ZeRO-3 over 32 GPUs on 8-GPU nodes: FSDP's gathers and reduce-scatters run on NVLink, plus
    # an all-reduce of each rank's 1/8 gradient shard over 4 nodes; with one GPU per node the
    # shard group is a single rank and the whole gradient is all-reduced over the NICs
    full = _evaluate("TORCHTITAN", False).performance
    hybrid = _evaluate("TORCHTITAN", True).performance
    assert hybrid.breakdown.dp_comm_s != full.breakdown.dp_comm_s
    spread = _evaluate("TORCHTITAN", True, gpn=1).performance
    assert spread.breakdown.dp_comm_s > hybrid.breakdown.dp_comm_s


@pytest.mark.parametrize("framework", ["MEGATRON", "DEEPSPEED", "NANOTRON"])
def test_frameworks_without_it_refuse_it(framework: str) -> None:
    with pytest.raises(ValidationError, match="training.hybrid_shard needs a profile"):
        TrainingSpec(framework=framework, hybrid_shard=True)


def test_a_request_field_in_proto_and_on_the_command_line(capsys: pytest.CaptureFixture) -> None:
    t = TrainingSpec(framework="LLM_FOUNDRY", hybrid_shard=True, loss_kernel="COMPILED")
    msg = to_proto(t, spec_pb2.TrainingSpec)
    assert msg.hybrid_shard and msg.loss_kernel == spec_pb2.LOSS_KERNEL_COMPILED
    assert from_proto(msg, TrainingSpec) == t
    args = ["plan", "--model", "llama3-8b", "--gpus", "32", "--framework", "llm_foundry"]
    args += ["--tp", "1", "--pp", "1", "--zero-stage", "3", "--seq-len", "4096", "--json"]
    assert main([*args, "--hybrid-shard", "true"]) == 0
    hybrid = capsys.readouterr().out
    assert main(args) == 0
    full = capsys.readouterr().out
    assert hybrid != full  # the flag reached the request


def _plan(gpus: int = 32) -> ParallelConfig:
    return ParallelConfig(tp=1, pp=1, dp=gpus, micro_batch_size=1, num_microbatches=1, zero_stage=3)


@pytest.mark.parametrize(("zero", "name"), [(3, "HYBRID_SHARD"), (2, "_HYBRID_SHARD_ZERO2")])
def test_llm_foundry_names_its_hybrid_sharding_strategy(zero: int, name: str) -> None:
    t = TrainingSpec(seq_len=S, framework="LLM_FOUNDRY", hybrid_shard=True)
    c = _plan().model_copy(update={"zero_stage": zero})
    doc = yaml.safe_load(emit(None, c, ModelSpec(**MODEL), t, 32 * S))
    assert doc["fsdp_config"]["sharding_strategy"] == name


def test_torchtitan_and_kempnerforge_split_dp_into_shard_and_replicate() -> None:
    cluster = ClusterSpec(gpu="h100-sxm-80gb", num_gpus=32, gpus_per_node=8)
    t = TrainingSpec(seq_len=S, framework="TORCHTITAN", hybrid_shard=True)
    text = emit("torchtitan", _plan(), ModelSpec(**MODEL), t, 32 * S, cluster)
    ast.parse(text)  # a Python module
    assert "data_parallel_replicate_degree=4," in text
    assert "data_parallel_shard_degree=8," in text
    toml = tomllib.loads(emit("torchtitan-toml", _plan(), ModelSpec(**MODEL), t, 32 * S, cluster))
    assert toml["parallelism"]["data_parallel_replicate_degree"] == 4
    assert toml["parallelism"]["data_parallel_shard_degree"] == 8
    k = TrainingSpec(seq_len=S, framework="KEMPNERFORGE", hybrid_shard=True)
    kf = tomllib.loads(emit("kempnerforge", _plan(), ModelSpec(**MODEL), k, 32 * S, cluster))
    assert (kf["distributed"]["dp_shard"], kf["distributed"]["dp_replicate"]) == (8, 4)
    with pytest.raises(ValueError, match="needs the cluster"):
        emit("torchtitan", _plan(), ModelSpec(**MODEL), t, 32 * S)
    g = TrainingSpec(seq_len=S, framework="GENERIC", hybrid_shard=True)
    with pytest.raises(ValueError, match="megatron has no sharding inside a node"):
        emit(None, _plan(), ModelSpec(**MODEL), g, 32 * S, cluster)
