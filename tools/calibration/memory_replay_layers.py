"""The allocations of nanotron's layers and loss, in its order (nanotron @ e24d248: models/
llama.py, parallel/tensor_parallel/functional.py), through the caching allocator: the steps
tools/calibration/memory_replay.py replays."""

from __future__ import annotations

from dataclasses import dataclass

from meshplan.tools.calibration.memory_allocator import Allocator

BF16, FP32 = 2, 4


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

    def __init__(self, limit: int | None = None, held: int = 0) -> None:
        self.al = Allocator(limit=limit)
        self.live: dict[str, int] = {}
        self.held = held  # see `later`
        self.pending: list[str] = []

    def a(self, name: str, nbytes: int) -> None:
        assert name not in self.live, name
        self.live[name] = self.al.alloc(int(nbytes))

    def f(self, *names: str) -> None:
        for n in names:
            self.al.free(self.live.pop(n))

    def later(self, name: str) -> None:
        """Free a tp collective's input once `held` more are queued: a lead, not the code's
        rule. ProcessGroupNCCL records its tensors on the NCCL stream (recordStream), so a freed
        block is not reused before the GPU has run the collective, and the CPU runs ahead of the
        GPU by a number of layers no code fixes (0: freed at once, as the rest of the replay)."""
        self.pending.append(name)
        while len(self.pending) > self.held:
            self.f(self.pending.pop(0))

    def flush(self) -> None:
        """The CPU waits for the GPU (train_step_logs reads the loss with .item() each step)."""
        self.f(*self.pending)
        self.pending.clear()


def _row_out(r: Replay, s: Shape, name: str) -> None:
    """A row-parallel linear's output: the whole matmul, reduce-scattered to the shard."""
    if s.tp == 1:
        r.a(name, s.sh)
        return
    r.a(name + ".full", s.full)
    r.a(name, s.sh)
    r.later(name + ".full")


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


def loss_forward(r: Replay, s: Shape, m: int, V: int, x: str) -> None:
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


def loss_backward(r: Replay, s: Shape, m: int, V: int, head: int, x: str) -> str:
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
