"""The memory recipe's knobs (solver/schema.py TrainingSpec): each changes the bill by the bytes
the framework's code allocates (solver/profiles/ LOSS_BYTES, costmodel/activations.py), and
each is a request field in JSON, proto and on the command line."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from meshplan.convert import from_proto, to_proto
from meshplan.solver import EvaluateRequest, evaluate
from meshplan.solver.arch import resolve_model
from meshplan.solver.costmodel import CostModel, Point
from meshplan.solver.costmodel.memory_parts import cost_balanced_split
from meshplan.solver.hardware import resolve_cluster
from meshplan.solver.schema import ClusterSpec, ModelSpec, ParallelConfig, SearchSpec, TrainingSpec
from meshplan.v1 import spec_pb2

KIB = 1024
# a small dense model: h 1024, f 4096, 16 heads, 8 layers, vocabulary 32,000
MODEL = {
    "num_layers": 8,
    "hidden_size": 1024,
    "num_attention_heads": 16,
    "num_kv_heads": 16,
    "ffn_hidden_size": 4096,
    "vocab_size": 32000,
    "gated_mlp": True,
}
S, B = 2048, 2  # tokens per sequence, sequences per micro-batch


def _activations(training: dict, tp: int = 1, recompute: str = "NONE") -> int:
    """Activation bytes of the bill of a one-stage layout on 8 H100s."""
    ev = evaluate(
        EvaluateRequest.model_validate(
            {
                "model": MODEL,
                "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
                "training": {"seq_len": S, "global_batch_tokens": 8 // tp * B * S, **training},
                "config": {
                    "tp": tp,
                    "pp": 1,
                    "dp": 8 // tp,
                    "micro_batch_size": B,
                    "num_microbatches": 1,
                    "zero_stage": 1,
                    "recompute": recompute,
                    "sequence_parallel": tp > 1,
                },
            }
        )
    )
    return ev.memory.activations


@pytest.mark.parametrize(
    ("framework", "tp", "vocab_split"),
    [("GENERIC", 1, 1), ("MEGATRON", 2, 2), ("NANOTRON", 2, 2), ("LLM_FOUNDRY", 1, 1)],
)
def test_loss_kernel_changes_the_bill_by_its_logit_bytes(
    framework: str, tp: int, vocab_split: int
) -> None:
    # EAGER_FP32 holds bf16 logits, their fp32 copy and log-softmax, then fp32 gradients (12 B an
    # element); flash-attn's fused kernel the bf16 logits and their bf16 gradient (4 B)
    base = {"framework": framework}
    eager = _activations({**base, "loss_kernel": "EAGER_FP32"}, tp)
    fused = _activations({**base, "loss_kernel": "FUSED_BF16"}, tp)
    inplace = _activations({**base, "loss_kernel": "INPLACE_FP32"}, tp)
    elements = S * B * 32000 // vocab_split  # logits per GPU of one micro-batch
    assert abs((eager - fused) - 8 * elements) <= 4 * KIB  # each term rounded up to a KiB
    assert abs((eager - inplace) - 6 * elements) <= 4 * KIB


def test_compiled_and_copying_losses_hold_their_code_s_bytes() -> None:
    # torch.compile'd F.cross_entropy(logits.float()) (torchtitan with compile): the bf16 logits
    # and their bf16 gradient, 4 B; nanotron's sharded cross-entropy subtracts the max into a
    # second fp32 tensor beside the fp32 cast, 8 B, its profile's default
    eager = _activations({"framework": "TORCHTITAN", "loss_kernel": "EAGER_FP32"})
    compiled = _activations({"framework": "TORCHTITAN", "loss_kernel": "COMPILED"})
    elements = S * B * 32000
    assert abs((eager - compiled) - 8 * elements) <= 4 * KIB
    copy = _activations({"framework": "NANOTRON", "loss_kernel": "COPY_FP32"}, 2)
    inplace = _activations({"framework": "NANOTRON", "loss_kernel": "INPLACE_FP32"}, 2)
    assert abs((copy - inplace) - 2 * elements // 2) <= 4 * KIB
    assert _activations({"framework": "NANOTRON"}, 2) == copy


def test_chunked_loss_holds_a_chunk_of_logits_and_the_input_gradient() -> None:
    # Liger-Kernel: chunks of next_power_of_2(BT / ceil(V/h)) tokens hold bf16 logits (at most
    # 2·BT/ceil(V/h) tokens' worth), grad_input = zeros_like(input) holds BT·h bf16
    eager = _activations({"framework": "GENERIC", "loss_kernel": "EAGER_FP32"})
    chunked = _activations({"framework": "GENERIC", "loss_kernel": "CHUNKED"})
    ratio = -(-32000 // 1024)  # ceil(V / h)
    held = S * B * 2 * (2 * 32000 / ratio + 1024)
    assert abs((eager - chunked) - (S * B * 32000 * 12 - held)) <= 4 * KIB


def test_fp8_activation_storage_saves_the_linear_inputs_in_one_byte() -> None:
    # Transformer Engine keeps FP8 copies of its linears' inputs: per token and layer the two norm
    # outputs (2·h elements) and fc2's input (f) lose a byte each, proj's input (the attention
    # output, a·d) is kept again at one byte beside flash attention's bf16 copy
    fp8 = {"framework": "MEGATRON", "precision": "FP8"}
    kept = _activations({**fp8, "fp8_activations": True})
    bf16 = _activations({**fp8, "fp8_activations": False})
    h, f, aw = 1024, 4096, 1024
    assert abs((bf16 - kept) - S * B * 8 * (2 * h + f - aw)) <= 4 * KIB
    # Megatron's FP8 recipe stores them so by default
    assert _activations(fp8) == kept


def test_fp8_activations_need_fp8() -> None:
    with pytest.raises(ValidationError, match="fp8_activations needs precision FP8"):
        TrainingSpec(fp8_activations=True)


def test_fsdp_version_needs_an_fsdp_profile() -> None:
    with pytest.raises(ValidationError, match="training.fsdp_version FSDP1 needs a PyTorch FSDP"):
        TrainingSpec(framework="MEGATRON", fsdp_version="FSDP1")


def _state(
    training: dict, zero: int = 3, recompute: str = "NONE", pp: int = 1, m: int = 1
) -> dict[str, int]:
    ev = evaluate(
        EvaluateRequest(
            model=MODEL,
            cluster={"gpu": "h100-sxm-80gb", "num_gpus": 8},
            training={"seq_len": S, "global_batch_tokens": 8 // pp * m * S, **training},
            config=ParallelConfig(
                tp=1,
                pp=pp,
                dp=8 // pp,
                micro_batch_size=1,
                num_microbatches=m,
                zero_stage=zero,
                recompute=recompute,
            ),
        )
    )
    return ev.memory.model_dump()


def test_state_dtypes_change_the_bytes_per_parameter() -> None:
    # nanotron keeps fp32 main gradients (4 B, unsharded at ZeRO-1) unless it accumulates in bf16,
    # and then DDP's bf16 buckets sit beside the bf16 gradients at every ZeRO stage
    fp32 = _state({"framework": "NANOTRON"}, zero=1)
    bf16 = _state({"framework": "NANOTRON", "grad_dtype": "BF16"}, zero=1)
    assert fp32["gradients"] == pytest.approx(2 * (bf16["gradients"] - _ddp(bf16)), rel=1e-4)
    # a bf16 master is the bf16 parameter updated in place: 4 of GENERIC's 12 optimizer bytes go
    full = _state({"framework": "GENERIC"}, zero=1)
    none = _state({"framework": "GENERIC", "master_dtype": "BF16"}, zero=1)
    assert none["optimizer"] == pytest.approx(full["optimizer"] * 8 / 12, rel=1e-4)


def test_nanotron_wraps_ddp_only_without_zero_over_its_fp32_accumulator() -> None:
    # nanotron @ e24d248 trainer.py: make_ddp = dp > 1 and not (accumulate_grad_in_fp32 and
    # zero_stage > 0): the bf16 buckets (2 B) beside the fp32 gradients (4 B) at ZeRO-0 only
    zero0 = _state({"framework": "NANOTRON"}, zero=0)
    zero1 = _state({"framework": "NANOTRON"}, zero=1)
    assert zero0["gradients"] == pytest.approx(1.5 * zero1["gradients"], rel=1e-4)


def _ddp(bill: dict[str, int]) -> int:
    # with dp > 1 torch DDP's bf16 buckets sit beside bf16 main gradients: half of them
    return bill["gradients"] // 2


def test_fsdp1_reduces_a_units_gradient_in_the_parameter_dtype() -> None:
    # ZeRO-3 gathers two units' bf16 weights and one unit's gradient: FSDP2 (torchtitan) copies
    # it into an fp32 reduce buffer beside the bf16 one (4 + 2 B), FSDP1 reduce-scatters the bf16
    # flat gradient where it lies (2 B)
    two = _state({"framework": "TORCHTITAN", "fsdp_version": "FSDP2"})
    one = _state({"framework": "TORCHTITAN", "fsdp_version": "FSDP1"})
    layer = 4 * 1024 * 1024 + 3 * 1024 * 4096 + 2 * 1024  # one layer, its two norms too
    grown = (two["weights"] + two["gradients"]) - (one["weights"] + one["gradients"])
    assert abs(grown - 4 * layer) <= 4 * KIB


def test_nanotron_places_pipeline_blocks_by_cost() -> None:
    # nanotron @ e24d248 models/base.py: a rank takes blocks until the running cost passes its
    # share; Llama 3.2 1B-like (16 layers of 67M, a 268M output layer) on 2 stages: 11 + 5
    layer = 4 * 2048 * 2048 + 3 * 8192 * 2048
    assert cost_balanced_split(16, layer, 131072 * 2048, 2) == (11, 5)
    assert sum(cost_balanced_split(80, 10, 30, 16)) == 80


def test_knobs_cross_the_proto_and_back() -> None:
    t = TrainingSpec(
        framework="TORCHTITAN",
        precision="FP8",
        loss_kernel="CHUNKED",
        grad_dtype="BF16",
        master_dtype="FP32",
        fsdp_version="FSDP1",
        activation_form="NANOTRON",
        fp8_activations=True,
    )
    msg = to_proto(t, spec_pb2.TrainingSpec)
    assert spec_pb2.LossKernel.Name(msg.loss_kernel) == "LOSS_KERNEL_CHUNKED"
    assert from_proto(msg, TrainingSpec) == t


def test_knobs_are_cli_flags() -> None:
    from meshplan.tools.cli.inputs import request_from_flags
    from meshplan.tools.cli.main import build_parser

    a = build_parser().parse_args(
        [
            "plan",
            "--model",
            "llama3-8b",
            "--gpus",
            "8",
            "--loss-kernel",
            "fused_bf16",
            "--grad-dtype",
            "bf16",
            "--fp8-activations",
            "false",
        ]
    )
    req = request_from_flags(a, evaluate=False)
    assert req["training"] == {
        "loss_kernel": "FUSED_BF16",
        "grad_dtype": "BF16",
        "fp8_activations": False,
    }


def test_nanotron_tp_keeps_two_gather_buffers_of_a_micro_batch() -> None:
    # parallel/utils.py MemoryBuffer "allgather" and "allgather2": one micro-batch's [tokens, h]
    # in bf16 each, kept once tp > 1 gathers the sequence shards
    from dataclasses import replace

    from meshplan.solver.arch import resolve_model
    from meshplan.solver.costmodel import CostModel, Point
    from meshplan.solver.costmodel.context import recipe_of
    from meshplan.solver.hardware import resolve_cluster
    from meshplan.solver.schema import ClusterSpec, ModelSpec, SearchSpec

    A = resolve_model(ModelSpec(**MODEL))
    H = resolve_cluster(ClusterSpec(gpu="h100-sxm-80gb", num_gpus=8))
    t = TrainingSpec(seq_len=S, global_batch_tokens=4 * B * S, framework="NANOTRON")
    rec = recipe_of(t)
    assert rec.tp_gather_buffers == 2
    kept = CostModel(A, H, t, SearchSpec(), recipe=rec)
    none = CostModel(A, H, t, SearchSpec(), recipe=replace(rec, tp_gather_buffers=0))
    for tp, grown in ((2, 2 * B * S * 1024 * 2), (1, 0)):
        cfg = ParallelConfig(
            tp=tp, pp=1, dp=8 // tp, micro_batch_size=B, num_microbatches=1, zero_stage=1
        )
        p = Point.from_config(cfg)
        diff = kept.memory_bill(p).activations - none.memory_bill(p).activations
        assert diff == pytest.approx(grown, abs=2 * KIB * KIB)


@pytest.mark.parametrize(
    ("tp", "recompute", "per_token"),
    [
        # the norms' outputs (2 x 2h) and the gated MLP's silu(gate) and product (2 x 2f)
        (1, "NONE", 4 * 1024 + 4 * 4096),
        # tp > 1 all-gathers the norms' outputs (kept): the MLP's two, on a tp shard
        (2, "NONE", 4 * 4096 // 2),
        # op-level SAC: the block's last mm output (2h, a sequence shard), never read backward
        (1, "SELECTIVE", 2 * 1024),
        (2, "SELECTIVE", 2 * 1024 // 2),
        # full recomputation keeps the layer inputs; the recomputed block is billed as eager's
        (1, "FULL", 0),
    ],
)
def test_compiled_blocks_keep_only_what_their_backward_reads(
    tp: int, recompute: str, per_token: int
) -> None:
    t = {"framework": "TORCHTITAN"}
    eager = _activations({**t, "compiled": False}, tp=tp, recompute=recompute)
    compiled = _activations({**t, "compiled": True}, tp=tp, recompute=recompute)
    layers, tokens = 8, B * S
    assert eager - compiled == pytest.approx(layers * tokens * per_token, abs=2 * KIB * KIB)


def test_compiled_needs_eager_pytorch_layers() -> None:
    with pytest.raises(ValidationError, match="training.compiled needs a profile"):
        TrainingSpec(framework="MEGATRON", compiled=True)
    assert TrainingSpec(framework="MEGATRON", compiled=False).compiled is False


def test_compiled_is_a_proto_field_and_a_flag() -> None:
    from meshplan.tools.cli.inputs import request_from_flags
    from meshplan.tools.cli.main import build_parser

    t = TrainingSpec(framework="TORCHTITAN", compiled=True)
    msg = to_proto(t, spec_pb2.TrainingSpec)
    assert msg.HasField("compiled") and msg.compiled
    assert from_proto(msg, TrainingSpec) == t
    args = ["plan", "--model", "llama3-8b", "--gpus", "8", "--framework", "torchtitan"]
    a = build_parser().parse_args([*args, "--compiled", "true", "--fp8-all-gather", "false"])
    training = request_from_flags(a, evaluate=False)["training"]
    assert training["compiled"] is True and training["fp8_all_gather"] is False


def test_latent_attention_keeps_its_latents_and_up_projected_heads() -> None:
    # Megatron's MLA (multi_latent_attention.py): the normalised q and kv latents (q_compressed,
    # kv_combined with the rotary key, kv_compressed: input and output of each norm) on the
    # sequence shard, and for the core attention the up-projected query and key (nope + rope
    # per head) and the value, with the output, in place of q, k, v and the output of h / a
    from meshplan.solver.arch import resolve_model
    from meshplan.solver.costmodel import CostModel, Point
    from meshplan.solver.hardware import resolve_cluster
    from meshplan.solver.schema import ClusterSpec, ModelSpec, SearchSpec

    ranks = {"q_lora_rank": 384, "kv_lora_rank": 128, "qk_nope_head_dim": 64}
    ranks |= {"qk_rope_head_dim": 32, "v_head_dim": 64}
    H = resolve_cluster(ClusterSpec(gpu="h100-sxm-80gb", num_gpus=8))
    t = TrainingSpec(seq_len=S, global_batch_tokens=8 * B * S, framework="MEGATRON")
    cfg = ParallelConfig(tp=1, pp=1, dp=8, micro_batch_size=B, num_microbatches=1, zero_stage=1)
    p = Point.from_config(cfg)

    def acts(spec: ModelSpec) -> int:
        return CostModel(resolve_model(spec), H, t, SearchSpec()).memory_bill(p).activations

    mha = ModelSpec(**MODEL)
    mla = ModelSpec(**MODEL, latent_attention=ranks)
    h, heads = 1024, 16
    before = 4 * h + 4 * h  # q, output (h each); k, v (16 heads of 64)
    after = 4 * heads * (64 + 32) + 4 * heads * 64  # query, key; value, output
    latents = 2 * (2 * 384 + (128 + 32) + 128)
    grown = 8 * B * S * (after - before + latents)  # 8 layers
    assert acts(mla) - acts(mha) == pytest.approx(grown, abs=2 * KIB * KIB)


def test_fp8_all_gather_gathers_a_unit_s_layer_weights_in_one_byte() -> None:
    # torchao's float8 all-gather: the unit FSDP2 gathers and the one it prefetches hold their
    # Float8Linear weights in fp8, 1 byte a layer parameter instead of bf16's 2
    t = {"framework": "TORCHTITAN", "precision": "FP8"}
    full = {"recompute": "FULL"}  # and no Float8Linear cast saved (recomputed layers)
    bf16 = _state(t | {"fp8_all_gather": False}, **full)
    fp8 = _state(t | {"fp8_all_gather": True}, **full)
    layer = 4 * 1024 * 1024 + 3 * 1024 * 4096 + 2 * 1024  # one layer, its two norms too
    assert bf16["weights"] - fp8["weights"] == pytest.approx(2 * layer, abs=2 * KIB * KIB)
    assert bf16["gradients"] == fp8["gradients"]
    # nothing gathered at ZeRO-1 (and, recomputed, no Float8Linear cast saved either)
    full = {"zero": 1, "recompute": "FULL"}
    assert _state(t | {"fp8_all_gather": True}, **full) == _state(t, **full)


LAYER = 4 * 1024 * 1024 + 3 * 1024 * 4096 + 2 * 1024  # one layer of MODEL, its two norms too


def _stage_weights(training: dict, stage: str) -> int:
    """The weights tenant of a pipeline stage of 4 layers (pp 2, 4 micro-batches, ZeRO-1)."""
    t = TrainingSpec(seq_len=S, global_batch_tokens=4 * 4 * S, **training)
    A = resolve_model(ModelSpec(**MODEL))
    cm = CostModel(
        A, resolve_cluster(ClusterSpec(gpu="h100-sxm-80gb", num_gpus=8)), t, SearchSpec()
    )
    c = ParallelConfig(tp=1, pp=2, dp=4, micro_batch_size=1, num_microbatches=4, zero_stage=1)
    return cm.tenants_int(Point.from_config(c), stage)["weights"] * KIB


def test_float8_linear_saves_its_fp8_weight_per_micro_batch_in_flight() -> None:
    # torchao @ 0afa4c1 float8_linear.py: Float8Linear casts its weight to FP8 each forward and
    # saves the cast for backward: 1 byte a layer parameter for every layer not recomputed
    bf16, fp8 = {"framework": "TORCHTITAN"}, {"framework": "TORCHTITAN", "precision": "FP8"}
    got = _state(fp8)["weights"] - _state(bf16)["weights"]
    assert got == pytest.approx(8 * LAYER, abs=KIB * KIB)  # MODEL's 8 layers, once
    for r in ("FULL", "SELECTIVE"):  # a checkpointed layer casts again in its backward
        assert _state(fp8, recompute=r)["weights"] == _state(bf16, recompute=r)["weights"]
    # FSDP2's fp8 all-gather: the saved weight is the gathered unit, freed at reshard
    ag = _state(fp8 | {"fp8_all_gather": True})["weights"]
    assert ag < _state(bf16)["weights"]
    # the first of 2 stages (4 layers) holds a cast per micro-batch in flight, min(pp, M) = 2;
    # the last, one
    for stage, copies in (("first", 2), ("last", 1)):
        two = _stage_weights(fp8, stage) - _stage_weights(bf16, stage)
        assert two == pytest.approx(copies * 4 * LAYER, abs=KIB * KIB)
    kf = {"framework": "KEMPNERFORGE"}
    assert _state(kf | {"precision": "FP8"}, zero=0)["weights"] > _state(kf, zero=0)["weights"]
    # with fp8_all_gather, ZeRO-0 (DDP: no FSDP2 gather) still casts and saves
    kf_ag = kf | {"precision": "FP8", "fp8_all_gather": True}
    got = _state(kf_ag, zero=0)["weights"] - _state(kf, zero=0)["weights"]
    assert got == pytest.approx(8 * LAYER, abs=KIB * KIB)
    # ... but not on the layers it recomputes (the checkpoint drops the saved cast)
    assert _state(kf_ag, zero=0, recompute="FULL") == _state(
        kf | {"precision": "FP8"}, zero=0, recompute="FULL"
    )
    bf16_full = _state(kf, zero=0, recompute="FULL")["weights"]
    assert _state(kf_ag, zero=0, recompute="FULL")["weights"] == bf16_full


def test_fp8_all_gather_at_zero_0_saves_casts_only_where_nothing_recomputes() -> None:
    # both stages of a pipelined single-replica torchtitan run (dp 1: ZeRO-0, no FSDP2 gather)
    fp8 = {"framework": "TORCHTITAN", "precision": "FP8", "fp8_all_gather": True}
    bf16 = {"framework": "TORCHTITAN"}
    t = {"seq_len": S, "global_batch_tokens": 4 * S}
    A = resolve_model(ModelSpec(**MODEL))
    H = resolve_cluster(ClusterSpec(gpu="h100-sxm-80gb", num_gpus=2))
    for r, copies in (("NONE", {"first": 2, "last": 1}), ("FULL", {"first": 0, "last": 0})):
        c = ParallelConfig(tp=1, pp=2, dp=1, micro_batch_size=1, num_microbatches=4, recompute=r)
        p = Point.from_config(c)
        w = {}
        for name, tr in (("fp8", fp8), ("bf16", bf16)):
            cm = CostModel(A, H, TrainingSpec(**t, **tr), SearchSpec())
            w[name] = {st: cm.tenants_int(p, st)["weights"] * KIB for st in ("first", "last")}
        for st, n in copies.items():
            got = w["fp8"][st] - w["bf16"][st]
            assert got == pytest.approx(n * 4 * LAYER, abs=KIB * KIB), (r, st)


def test_fp8_all_gather_needs_fp8_and_fsdp2() -> None:
    for bad in (
        {"framework": "TORCHTITAN"},  # BF16
        {"framework": "LLM_FOUNDRY", "precision": "FP8"},  # FSDP1
        {"framework": "TORCHTITAN", "precision": "FP8", "fsdp_version": "FSDP1"},
    ):
        with pytest.raises(ValidationError, match="training.fp8_all_gather needs precision FP8"):
            TrainingSpec(**bad, fp8_all_gather=True)
    t = TrainingSpec(framework="TORCHTITAN", precision="FP8", fp8_all_gather=True)
    msg = to_proto(t, spec_pb2.TrainingSpec)
    assert msg.HasField("fp8_all_gather") and from_proto(msg, TrainingSpec) == t


def test_nanotron_keeps_the_backward_s_bf16_grads_beside_its_fp32_accumulator() -> None:
    # optim/gradient_accumulator.py FP32GradientAccumulator.backward: loss.backward() whole, then
    # each bf16 .grad added to the fp32 buffer and freed: at the end of a micro-batch's backward
    # 2 B for every parameter the 4 B buffer covers (tp-sharded, not ZeRO-1-sharded), in place of
    # that micro-batch's activations and logits; the bill is the larger of the two peaks
    from dataclasses import replace

    from meshplan.solver.arch import resolve_model
    from meshplan.solver.costmodel import CostModel, Point
    from meshplan.solver.costmodel.context import recipe_of
    from meshplan.solver.hardware import resolve_cluster
    from meshplan.solver.schema import ClusterSpec, ModelSpec, SearchSpec

    A = resolve_model(ModelSpec(**MODEL))
    H = resolve_cluster(ClusterSpec(gpu="h100-sxm-80gb", num_gpus=8))
    grew = set()
    for seq in (128, S):  # the grads exceed one micro-batch's activations and logits, then not
        t = TrainingSpec(seq_len=seq, global_batch_tokens=8 * seq, framework="NANOTRON")
        rec = recipe_of(t)
        assert rec.backward_grads == 2
        kept = CostModel(A, H, t, SearchSpec(), recipe=rec)
        none = CostModel(A, H, t, SearchSpec(), recipe=replace(rec, backward_grads=0))
        for zero in (0, 1):
            cfg = ParallelConfig(
                tp=1, pp=1, dp=8, micro_batch_size=1, num_microbatches=1, zero_stage=zero
            )
            p = Point.from_config(cfg)
            w, wo = kept.memory_bill(p), none.memory_bill(p)
            fp32 = wo.gradients - (wo.gradients // 3 if zero == 0 else 0)  # DDP's 2 of 6 B
            fwd = wo.activations  # one micro-batch in flight (pp = 1, tp = 1): all of it
            diff = w.gradients - wo.gradients
            assert diff == pytest.approx(max(0, fp32 / 2 - fwd), abs=4 * KIB)
            assert w.activations == wo.activations
            grew.add(diff > 0)
    assert grew == {True, False}


def test_cpsat_optimum_equals_oracle_where_the_backward_s_grads_bind() -> None:
    # a short sequence: the grads exceed one micro-batch's activations, the plan's bill grows
    from meshplan.solver import PlanRequest, plan
    from meshplan.solver.oracle import oracle

    model = {
        "num_layers": 16,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_kv_heads": 8,
        "ffn_hidden_size": 14336,
        "vocab_size": 128256,
        "gated_mlp": True,
    }
    for gpu, n in (("h100-sxm-80gb", 2), ("a100-sxm-40gb", 4)):
        req = PlanRequest.model_validate(
            {
                "model": model,
                "cluster": {"gpu": gpu, "num_gpus": n},
                "training": {
                    "seq_len": 128,
                    "global_batch_tokens": 128 * 96,
                    "framework": "NANOTRON",
                },
                "options": {"explain": False, "time_limit_s": 60},
            }
        )
        res, ref = plan(req), oracle(req)
        assert ref.objective is not None
        assert res.solver.objective == ref.objective
        assert res.memory.gradients > res.memory.weights * 2  # fp32 (4 B) + the bf16 grads


def test_cpsat_optimum_equals_oracle_with_float8_linear_s_saved_weights() -> None:
    # torchtitan FP8, 48 layers of Llama-3-8B's shape on 8 H100s: the saved casts (1 byte a layer
    # parameter) push the unrecomputed layouts out of memory
    from meshplan.solver import PlanRequest, plan
    from meshplan.solver.oracle import oracle

    model = MODEL | {"num_layers": 48, "hidden_size": 4096, "ffn_hidden_size": 14336}
    model |= {"num_attention_heads": 32, "num_kv_heads": 8, "vocab_size": 128256}
    req = PlanRequest.model_validate(
        {
            "model": model,
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
            "training": {
                "seq_len": 4096,
                "global_batch_tokens": 4096 * 64,
                "framework": "TORCHTITAN",
                "precision": "FP8",
            },
            # tp 1: with tp 2 (FP8 all-gathers) every layer is kept at about the same speed
            "search": {"tp": 1},
            "options": {"explain": False, "time_limit_s": 60},
        }
    )
    res, ref = plan(req), oracle(req)
    assert ref.objective is not None
    assert res.solver.objective == ref.objective
    # without the saved casts it keeps every layer (one sequence a micro-batch); with them, not
    assert res.config.recompute.value != "NONE"
