"""nanotron's training steps on world rank 0 (its first pipeline stage), allocation by
allocation, through the caching allocator (tools/calibration/memory_allocator.py): the reserved
peak its benchmark prints. The print is max_memory_reserved at step 3, read after the optimizer
step; training_step's log_memory resets the peaks before and after each train_batch_iter of
the first five steps, so the print covers step 3's optimizer step and all-gather, starting from
what the segments held when its pipeline ended; nothing frees a segment after the loop's one
empty_cache but a cudaMalloc that fails, which releases the cached segments and retries
(nanotron @ e24d248 trainer.py train, training_step, train_step_logs; logging.py log_memory;
helpers.py create_table_log "Mem Res (GB)", / 1024**3).

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

The one figure the code does not give is what cudaMalloc can give the allocator: the device's
79 GiB or so less the CUDA context and NCCL's buffers, which nanotron's process groups allocate
outside PyTorch (`CEILING_GIB`). What it shows (`python -m meshplan.tools.calibration.memory_replay`;
`--window 62 78 1` for the ceilings): at any ceiling from 70 to 74 GiB, 11 of the 14 rows land
within -1.6% to +1.4% of their prints, the pipelined 8B rows among them (their all-gather's
18 GiB pass the ceiling at the first step: the allocator releases its cached segments, and
the print, reset after the pipeline, never sees the 65 GiB they held before); the 8B at tp 4
stays 11.5% under, and the 1B at 1 node and the 70B at pp 16, whose prints are below the
tensors the recipe holds at once, 10% over. Without a ceiling the pipelined 8B rows are 24-26%
over.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from meshplan.solver.arch import resolve_model
from meshplan.solver.costmodel.memory_parts import cost_balanced_layers
from meshplan.tools.calibration.memory_replay_layers import (
    BF16,
    FP32,
    Replay,
    Shape,
    backward_layer,
    forward_layer,
    loss_backward,
    loss_forward,
)
from meshplan.tools.calibration.runs import CalibrationRun

__all__ = ["Replay", "ReplayResult", "Shape", "replay_nanotron", "report"]

GIB = float(1 << 30)
STEPS = 3  # the benchmark logs at step 3
# What cudaMalloc can give PyTorch's allocator on the sweep's H100 80GB (about 79 GiB a device):
# less the CUDA context and the NCCL communicators' own buffers, which nanotron's dp, tp, pp and
# world groups each allocate outside the allocator (NCCL: about 1.6 GB for one communicator,
# about 6 GB with three or more, NVIDIA/nccl#864). The replay's one free parameter: its
# figures are the same for any ceiling from 70 to 74 GiB (measured: `--window`).
CEILING_GIB = 72.0


@dataclass(frozen=True)
class ReplayResult:
    """The replay's figures (GiB)."""

    reserved: float  # what the benchmark prints: max_memory_reserved since the last reset
    peak_allocated: float  # the live tensors' high-water mark over the whole replay
    top_reserved: float  # the segments' high-water mark over the whole replay (never reset)
    before_gather: tuple[float, ...]  # reserved before each step's ZeRO-1 all-gather
    releases: int  # cudaMalloc failures that released the cached segments


def replay_nanotron(
    run: CalibrationRun,
    staging: bool = True,
    ceiling_gib: float | None = CEILING_GIB,
    held: int = 0,
) -> ReplayResult:
    """nanotron's first pipeline stage through STEPS steps at the run's layout (tp = 1 or
    reduce_scatter mode; pp ranks by cost, models/base.py build_model), with what cudaMalloc
    can give the allocator capped at `ceiling_gib` (None: no cap), and the tp collectives'
    whole inputs freed `held` collectives late (`Replay.later`; held blocks count as
    allocated here, where PyTorch counts them freed: reserved is the same)."""
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
    r = Replay(None if ceiling_gib is None else int(ceiling_gib * GIB), held)
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
        r.al.reset_peaks()  # training_step's log_memory before train_batch_iter
        _step(r, s, n, pp, M, A.V, w, embed, head, last)
        r.flush()
        r.al.reset_peaks()  # and after it: the print covers the optimizer step on
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
    return ReplayResult(
        al.peak_reserved / GIB,
        al.top_allocated / GIB,
        al.top_reserved / GIB,
        tuple(before),
        al.releases,
    )


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
            loss_forward(r, s, m, V, x)
        todo.append(m)

    def bwd() -> None:
        m = todo.pop(0)
        if last:
            dy = loss_backward(r, s, m, V, head, f"m{m}.l{n - 1}.y")
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


Row = tuple[str, float, "ReplayResult | None", "ReplayResult | None", "ReplayResult | None"]


def nanotron_printed() -> list[CalibrationRun]:
    """The nanotron runs that print their peak."""
    from meshplan.tools.calibration.loaders import load_fsdp  # noqa: PLC0415

    runs = load_fsdp()
    return sorted(
        (r for r in runs if r.framework.value == "NANOTRON" and r.memory_gib is not None),
        key=lambda r: r.id,
    )


def _summary(what: str, errs: list[float]) -> str:
    ok = [e for e in errs if e == e]  # NaN: out of memory
    if not ok:
        return f"{what}: every row out of memory"
    med = statistics.median(abs(e) for e in ok)
    bad = len(errs) - len(ok)
    return (
        f"{what}: median |error| {med:.1%}, worst under {min(ok):+.1%}, "
        f"worst over {max(ok):+.1%}" + (f"; {bad} out of memory" if bad else "")
    )


def _try(run: CalibrationRun, **kw: object) -> ReplayResult | None:
    """The replay, or None where its live tensors pass the ceiling (out of memory)."""
    try:
        return replay_nanotron(run, **kw)  # type: ignore[arg-type]
    except MemoryError:
        return None


def _err(x: ReplayResult | None, pub: float) -> float:
    return float("nan") if x is None else x.reserved / pub - 1


def _cell(x: ReplayResult | None, pub: float, width: int) -> str:
    if x is None:
        return f"{'out of memory':>{width + 8}}"
    return f"{x.reserved:{width}.2f}  {_err(x, pub):+6.1%}"


def report(ceiling_gib: float = CEILING_GIB, held: int = 0) -> tuple[str, list[Row]]:
    """Every nanotron run that prints its peak, replayed under the ceiling, with no ceiling (no
    cudaMalloc ever fails), and without ProcessGroupNCCL's flat staging tensor in ZeRO-1's
    all-gather: the table and the rows."""
    rows: list[Row] = [
        (
            r.id,
            float(r.memory_gib or 0.0),
            _try(r, ceiling_gib=ceiling_gib, held=held),
            _try(r, ceiling_gib=None, held=held),
            _try(r, staging=False, ceiling_gib=ceiling_gib, held=held),
        )
        for r in nanotron_printed()
    ]
    lines = [
        f"ceiling {ceiling_gib:g} GiB (what cudaMalloc gives the allocator), tp inputs held {held}",
        f"{'run':38}  {'GiB pub':>7}  {'replayed':>8}  {'error':>6}  {'rel':>3}"
        f"  {'no ceiling':>10}  {'error':>6}  {'no staging':>10}  {'error':>6}  {'allocated':>9}",
    ]
    for rid, pub, x, y, z in rows:
        rel = f"{x.releases:3d}" if x is not None else "  -"
        alloc = f"{x.peak_allocated:9.2f}" if x is not None else f"{'-':>9}"
        lines.append(
            f"{rid[len('nanotron_bench_') :]:38}  {pub:7.2f}  {_cell(x, pub, 8)}  {rel}"
            f"  {_cell(y, pub, 10)}  {_cell(z, pub, 10)}  {alloc}"
        )
    for k, what in ((2, "replayed"), (3, "no ceiling"), (4, "no staging")):
        lines.append(_summary(what, [_err(row[k], row[1]) for row in rows]))  # type: ignore[arg-type]
    return "\n".join(lines), rows


def window(ceilings: list[float]) -> str:
    """The replay's summary at each ceiling (the window its figures hold in)."""
    runs = nanotron_printed()
    return "\n".join(
        _summary(
            f"ceiling {ceil:5.1f} GiB",
            [_err(_try(r, ceiling_gib=ceil), float(r.memory_gib or 1)) for r in runs],
        )
        for ceil in ceilings
    )


def main(argv: list[str] | None = None) -> int:
    import argparse  # noqa: PLC0415

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument(
        "--ceiling",
        type=float,
        default=CEILING_GIB,
        help=f"what cudaMalloc gives the allocator, GiB (default {CEILING_GIB:g})",
    )
    ap.add_argument(
        "--held",
        type=int,
        default=0,
        help="free each tp collective's whole input this many collectives late (count; "
        "default 0: at once)",
    )
    ap.add_argument(
        "--window",
        nargs=3,
        type=float,
        metavar=("FROM", "TO", "STEP"),
        help="summarise the replay at each ceiling FROM..TO GiB by STEP GiB (slow: 15 s each)",
    )
    a = ap.parse_args(argv)
    if a.window:
        lo, hi, step = a.window
        n = int(round((hi - lo) / step)) + 1
        print(window([lo + k * step for k in range(n)]))
        return 0
    print(report(a.ceiling, a.held)[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
