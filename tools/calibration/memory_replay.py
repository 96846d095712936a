"""nanotron's training steps on world rank 0 (its first pipeline stage), allocation by
allocation, through the caching allocator (tools/calibration/memory_allocator.py): the reserved
peak its benchmark prints (max_memory_reserved at step 3: log_memory resets only the peaks, and
nothing frees a segment after the loop's one empty_cache: nanotron @ e24d248 trainer.py train,
training_step; logging.py log_memory).

What the replay allocates, in nanotron's order (nanotron @ e24d248; the tensors the "nanotron"
activation form of solver/costmodel/activations.py counts, one allocation each):

- before the loop: the stage's bf16 parameters one tensor each (models/llama.py), the fp32
  gradient buffer of every stage parameter and the fp32 master of this rank's ZeRO-1 slices, each
  one flat tensor (optim/gradient_accumulator.py FP32GradientAccumulator.__init__,
  build_grad_buffers), tp's two persistent gather buffers on first use (parallel/utils.py
  MemoryBuffer);
- each micro-batch in 1F1B order (parallel/pipeline_parallel/engine.py
  OneForwardOneBackwardPipelineEngine: pp - 1 warm-up forwards on rank 0): a layer's forward
  (the norm outputs, the qkv projection and its contiguous [3, b, s, heads, d] copy, the K,V
  concatenated and made contiguous, flash attention's output, the residuals, gate_up's output,
  silu(gate) and the product; the projections' transient outputs), its backward in reverse (each
  op's input gradients, flash attention's fp32 dq accumulator, each parameter's bf16 .grad kept
  until the micro-batch's backward ends: FP32GradientAccumulator.backward);
- the step's end: AdamW's two fp32 moments per slice at the first step (fused: no foreach
  intermediates; torch_adam_is_fused in examples/config_tiny_llama.yaml), then ZeRO-1's
  all-gather of the updated bf16 slices: one flat input and one flat output per dp rank
  (optim/zero.py _all_gather_params -> distributed.py all_gather_coalesced), which
  torch.distributed.all_gather gathers through one more flat tensor of them all when they are of
  equal size, as every nanotron parameter here splits evenly (pytorch @ 0007e75
  torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp ProcessGroupNCCL::allgather:
  flatten_for_scatter_gather, then a copy into each output): `staging`.

What it shows (`python -m meshplan.tools.calibration.memory_replay`): with the staging tensor
the 3B rows (+0.5% to +1.4%), the 1B at 2 nodes (-0.1%), the 8B at pp 4 and the 70B at tp 8
(-0.5%) land on their prints; the pipelined 8B rows do not (+24%, +26%: their prints leave no
room for the all-gather's 18 GiB of tensors larger than any block the step frees), nor the 8B
at tp 4 (-11.5%); the 1B at 1 node and the 70B at pp 16 print less than the tensors the recipe
holds at once (allocated +7.5%, +5.2%). No one replay fits every row.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from meshplan.solver.arch import resolve_model
from meshplan.solver.costmodel.memory_parts import cost_balanced_layers
from meshplan.tools.calibration.memory_allocator import Allocator
from meshplan.tools.calibration.runs import CalibrationRun

GIB = float(1 << 30)
BF16, FP32 = 2, 4
STEPS = 3  # the benchmark logs at step 3


@dataclass(frozen=True)
class Shape:
    """One nanotron layer's sizes on a GPU (bytes), for a micro-batch of T tokens."""

    T: int  # tokens of a micro-batch
    h: int
    f: int
    a: int
    tp: int

    @property
    def sh(self) -> int:  # [T, h] on the sequence shard (reduce_scatter mode), bf16
        return BF16 * self.T * self.h // self.tp

    @property
    def full(self) -> int:  # [T, h] whole, bf16
        return BF16 * self.T * self.h

    def cols(self, width: int, nb: int = BF16) -> int:  # [T, width / tp]
        return nb * self.T * width // self.tp


class Replay:
    """The allocator and the live tensors by name."""

    def __init__(self, limit: int | None = None) -> None:
        self.al = Allocator(limit=limit)
        self.live: dict[str, int] = {}

    def a(self, name: str, nbytes: int) -> None:
        assert name not in self.live, name
        self.live[name] = self.al.alloc(int(nbytes))

    def f(self, *names: str) -> None:
        for n in names:
            self.al.free(self.live.pop(n))


def _row_out(r: Replay, s: Shape, name: str) -> None:
    """A row-parallel linear's output: the whole matmul, reduce-scattered to the shard."""
    if s.tp == 1:
        r.a(name, s.sh)
        return
    r.a(name + ".full", s.full)
    r.a(name, s.sh)
    r.f(name + ".full")


def _col_grad(r: Replay, s: Shape, name: str) -> None:
    """A column-parallel linear's input gradient: whole, reduce-scattered to the shard."""
    _row_out(r, s, name)


def forward_layer(r: Replay, s: Shape, m: int, i: int, x: str) -> str:
    """Layer i of micro-batch m on input tensor x; returns its output's name."""
    p = f"m{m}.l{i}."
    small = FP32 * s.T // s.tp  # a norm's fp32 rstd per token
    r.a(p + "rstd1", small)
    r.a(p + "n1", s.sh)
    r.a(p + "qkv", s.cols(3 * s.h))
    r.a(p + "qkvc", s.cols(3 * s.h))  # .permute(2, 1, 0, 3, 4).contiguous()
    r.f(p + "qkv")
    r.a(p + "kvcat", s.cols(2 * s.h))
    r.a(p + "kvc", s.cols(2 * s.h))  # .permute(1, 2, 0, 3, 4).contiguous(); rotary in place
    r.f(p + "kvcat")
    r.a(p + "o", s.cols(s.h))  # flash attention's output
    r.a(p + "lse", FP32 * s.T * s.a // s.tp)
    _row_out(r, s, p + "attn")
    r.a(p + "r1", s.sh)  # + residual
    r.f(p + "attn")
    r.a(p + "rstd2", small)
    r.a(p + "n2", s.sh)
    r.a(p + "gu", s.cols(2 * s.f))
    r.a(p + "silu", s.cols(s.f))
    r.a(p + "prod", s.cols(s.f))
    _row_out(r, s, p + "mlp")
    r.a(p + "y", s.sh)
    r.f(p + "mlp")
    return p + "y"


def backward_layer(r: Replay, s: Shape, m: int, i: int, x: str, dy: str, w: dict[str, int]) -> str:
    """Layer i's backward from gradient dy; frees what the layer saved, returns dx's name. The
    parameters' bf16 .grad (sizes w) are allocated here and kept by the caller."""
    p, g = f"m{m}.l{i}.", f"m{m}.l{i}.d"
    r.a(g + "prod", s.cols(s.f))  # down_proj backward
    r.a(f"m{m}.grad.l{i}.down", w["down"])
    r.f(p + "prod")
    r.a(g + "silu", s.cols(s.f))  # mul backward: d silu, d up
    r.a(g + "up", s.cols(s.f))
    r.f(g + "prod", p + "silu")
    r.a(g + "gate", s.cols(s.f))  # silu backward
    r.f(g + "silu")
    r.a(g + "gu", s.cols(2 * s.f))  # split backward: cat
    r.f(g + "gate", g + "up", p + "gu")
    _col_grad(r, s, g + "n2")
    r.a(f"m{m}.grad.l{i}.gu", w["gu"])
    r.f(g + "gu", p + "n2")
    r.a(g + "r1n", s.sh)  # post-attention norm backward
    r.a(f"m{m}.grad.l{i}.norm2", w["norm"])
    r.f(g + "n2", p + "r1", p + "rstd2")
    r.a(g + "r1", s.sh)  # the residual's two gradients summed
    r.f(g + "r1n", dy)
    r.a(g + "o", s.cols(s.h))  # o_proj backward
    r.a(f"m{m}.grad.l{i}.o", w["o"])
    r.a(g + "qkv", s.cols(3 * s.h))  # flash attention backward: dq, dk, dv (one each)
    r.a(g + "acc", s.cols(s.h, FP32))  # its fp32 dq accumulator
    r.f(g + "acc", g + "o", p + "o", p + "lse")
    r.a(g + "kv", s.cols(2 * s.h))  # split(kv) backward: cat
    r.a(g + "stack", s.cols(3 * s.h))  # unbind backward: stack of dq, dk, dv
    r.f(g + "kv", g + "qkv", p + "kvc", p + "qkvc")
    r.a(g + "qkvv", s.cols(3 * s.h))  # the view of a permuted tensor: a copy
    r.f(g + "stack")
    _col_grad(r, s, g + "n1")
    r.a(f"m{m}.grad.l{i}.qkv", w["qkv"])
    r.f(g + "qkvv", p + "n1")
    r.a(g + "xn", s.sh)  # input norm backward
    r.a(f"m{m}.grad.l{i}.norm1", w["norm"])
    r.f(g + "n1", p + "rstd1")
    if x:
        r.f(x)
    r.a(g + "x", s.sh)
    r.f(g + "xn", g + "r1")
    return g + "x"


@dataclass(frozen=True)
class ReplayResult:
    """The replay's figures (GiB)."""

    reserved: float
    peak_allocated: float
    before_gather: tuple[float, ...]  # reserved before each step's ZeRO-1 all-gather
    releases: int  # cudaMalloc failures that released the cached segments


def replay_nanotron(
    run: CalibrationRun, staging: bool = True, limit_gib: float | None = None
) -> ReplayResult:
    """nanotron's first pipeline stage through STEPS steps at the run's layout (tp = 1 or
    reduce_scatter mode; pp ranks by cost, models/base.py build_model)."""
    A = resolve_model(run.model)
    c = run.config
    tp, pp, dp, b, M = c.tp, c.pp, c.dp, c.micro_batch_size, c.num_microbatches
    s = Shape(b * run.training.seq_len, A.h, A.f, A.a, tp)
    n = cost_balanced_layers(A, pp)[0] if pp > 1 else A.L
    w = {
        "qkv": BF16 * 3 * A.h * A.h // tp,
        "o": BF16 * A.h * A.h // tp,
        "gu": BF16 * 2 * A.f * A.h // tp,
        "down": BF16 * A.f * A.h // tp,
        "norm": BF16 * A.h,
    }
    embed = BF16 * A.V * A.h // tp
    last = pp == 1
    head = 0 if (not last or A.tied) else BF16 * A.V * A.h // tp
    layer_params = [w["norm"], w["qkv"], w["o"], w["norm"], w["gu"], w["down"]]
    params = [embed] + layer_params * n + ([w["norm"], head] if last else [])
    params = [x for x in params if x]
    r = Replay(None if limit_gib is None else int(limit_gib * GIB))
    for k, x in enumerate(params):  # bf16 parameters
        r.a(f"param{k}", x)
    total = sum(params) // BF16  # elements
    r.a("fp32_grads", FP32 * total)
    zero = c.zero_stage >= 1 and dp > 1
    slices = [-(-x // BF16 // dp) if zero else x // BF16 for x in params]
    r.a("fp32_master", FP32 * sum(slices))
    if tp > 1:  # MemoryBuffer "allgather" (forward), "allgather2" (row-linear backward)
        r.a("buf.allgather", s.full)
        r.a("buf.allgather2", s.full)
    before: list[float] = []
    for step in range(STEPS):
        _step(r, s, n, pp, M, A.V, w, embed, head, last)
        before.append(r.al.reserved / GIB)
        if step == 0:  # AdamW's exp_avg, exp_avg_sq per slice, made at the first step
            for k, x in enumerate(slices):
                r.a(f"adam{k}.m", FP32 * x)
                r.a(f"adam{k}.v", FP32 * x)
        if zero:  # all_gather_coalesced: the flat input, then one flat output per rank
            piece = BF16 * sum(slices)
            r.a("ag.in", piece)
            for k in range(dp):
                r.a(f"ag.out{k}", piece)
            if staging:  # ProcessGroupNCCL::allgather: equal outputs go through one flat tensor
                r.a("ag.flat", dp * piece)
                r.f("ag.flat")
            r.f("ag.in", *(f"ag.out{k}" for k in range(dp)))
    al = r.al
    return ReplayResult(al.peak_reserved / GIB, al.peak_allocated / GIB, tuple(before), al.releases)


def _step(
    r: Replay, s: Shape, n: int, pp: int, M: int, V: int, w: dict, embed: int, head: int, last: bool
) -> None:
    """One train_batch_iter on rank 0: pp - 1 warm-up forwards, then one forward and one
    backward per micro-batch, then the rest's backwards (1F1B)."""
    todo: list[int] = []

    def fwd(m: int) -> None:
        x = f"m{m}.emb"
        r.a(x, s.sh)  # the embedding's output (reduce-scattered with tp > 1)
        for i in range(n):
            x = forward_layer(r, s, m, i, x)
        if last:
            _loss_forward(r, s, m, V, x)
        todo.append(m)

    def bwd() -> None:
        m = todo.pop(0)
        if last:
            dy = _loss_backward(r, s, m, V, head, f"m{m}.l{n - 1}.y")
        else:
            dy = f"m{m}.recv"
            r.a(dy, s.sh)  # the gradient received from the next stage
        for i in reversed(range(n)):
            x = f"m{m}.l{i - 1}.y" if i else f"m{m}.emb"
            if i == n - 1 and not last:
                r.f(f"m{m}.l{i}.y")  # the stage's output, kept by the engine until now
            dy = backward_layer(r, s, m, i, x, dy, w)
        r.a(f"m{m}.grad.embed", embed)  # embedding backward: the dense bf16 weight gradient
        r.f(dy)
        # FP32GradientAccumulator.backward: each .grad added to the fp32 buffer and freed
        grads = [k for k in r.live if k.startswith(f"m{m}.grad.")]
        r.f(*grads)

    warm = min(pp - 1, M)
    for m in range(warm):
        fwd(m)
    for m in range(warm, M):
        fwd(m)
        bwd()
    while todo:
        bwd()


def _loss_forward(r: Replay, s: Shape, m: int, V: int, x: str) -> None:
    """Final norm, lm_head, cast_to_fp32 and the sharded cross-entropy (pp = 1: rank 0 holds
    it): the bf16 logits freed by the cast, the fp32 logits by the max-subtracted copy kept as
    the softmax (parallel/tensor_parallel/functional.py _ShardedCrossEntropy.forward)."""
    p = f"m{m}.loss."
    r.a(p + "rstd", FP32 * s.T // s.tp)
    r.a(p + "nf", s.sh)
    r.a(p + "logits", s.cols(V))
    r.a(p + "fp32", s.cols(V, FP32))
    r.f(p + "logits")
    r.a(p + "softmax", s.cols(V, FP32))
    r.f(p + "fp32")


def _loss_backward(r: Replay, s: Shape, m: int, V: int, head: int, x: str) -> str:
    """The softmax becomes the logits' gradient in place; its bf16 cast feeds lm_head."""
    p, g = f"m{m}.loss.", f"m{m}.loss.d"
    r.a(g + "logits", s.cols(V))
    r.f(p + "softmax")
    _col_grad(r, s, g + "nf")
    r.a(f"m{m}.grad.head", head or 1)
    r.f(g + "logits")
    r.a(g + "y", s.sh)
    r.f(g + "nf", p + "rstd", p + "nf", x)
    return g + "y"


def report() -> tuple[str, list[tuple[str, float, ReplayResult, ReplayResult]]]:
    """Every nanotron run that prints its peak, replayed with and without ProcessGroupNCCL's
    flat staging tensor in ZeRO-1's all-gather: the table and the rows."""
    from meshplan.tools.calibration.loaders import load_fsdp  # noqa: PLC0415

    rows = [
        (r.id, r.memory_gib, replay_nanotron(r), replay_nanotron(r, staging=False))
        for r in load_fsdp()
        if r.framework.value == "NANOTRON" and r.memory_gib is not None
    ]
    head = f"{'run':42}  {'GiB pub':>7}  {'replayed':>8}  {'error':>6}  {'no staging':>10}"
    lines = [head + f"  {'error':>6}  {'allocated':>9}"]
    for rid, pub, x, y in sorted(rows):
        e, f = x.reserved / pub - 1, y.reserved / pub - 1
        lines.append(
            f"{rid:42}  {pub:7.2f}  {x.reserved:8.2f}  {e:+6.1%}  {y.reserved:10.2f}  {f:+6.1%}"
            f"  {x.peak_allocated:9.2f}"
        )
    for k, what in ((2, "replayed"), (3, "no staging")):
        errs = [row[k].reserved / row[1] - 1 for row in rows]
        med = statistics.median(abs(e) for e in errs)
        lines.append(
            f"{what}: median |error| {med:.1%}, worst under {min(errs):+.1%}, "
            f"worst over {max(errs):+.1%}"
        )
    return "\n".join(lines), rows


if __name__ == "__main__":
    print(report()[0])
