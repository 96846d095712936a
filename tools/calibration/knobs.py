"""The knobs a published run does not state, set as a tuned benchmark would set them.

A source that publishes a benchmark tuned it, and where it leaves a knob out (the micro-batch
size, the interleaving degree, the recomputation), the run is scored at the best setting of
those knobs among a few its framework can run, with every published knob kept:

- micro-batch size 1, 2 or 4 sequences, dividing the per-replica batch (the micro-batch count
  follows from the published global batch);
- virtual stages 1 to 4 (2 to 4 where the source says "interleaved"), as the framework's rules
  allow (solver/rules.py: the interleaved schedule's micro-batch rounds, pp·v within the
  layers), and splitting the layers evenly where the run's framework version could not do
  otherwise (Megatron-LM before --pipeline-model-parallel-layout: megatron/training/
  arguments.py @ 937571c asserts num_layers divisible by pp and the layers per stage by the
  layers per virtual stage);
- recomputation NONE, SELECTIVE or FULL.

A setting is a candidate if its framework can run it and the memory model says it fits (the
profile's recipe, the default reserve). The source's stated default (`run.config`) is always a
candidate: the run ran, and a memory model that over-predicts must not rule out what we would
otherwise assume. The chosen setting depends on the time constants (the fastest candidate
under them), so a fit re-chooses it at every step and each leave-one-source-out fold chooses it
with its own constants.
"""

from __future__ import annotations

import itertools
from functools import cache

from meshplan.solver.arch import resolve_model
from meshplan.solver.costmodel import CostModel, Point
from meshplan.solver.hardware import resolve_cluster
from meshplan.solver.schema import ParallelConfig, Recompute
from meshplan.solver.space import Batch, violations
from meshplan.tools.calibration.runs import CalibrationRun

MICRO_BATCHES = (1, 2, 4)
VIRTUAL_STAGES = (1, 2, 3, 4)


def _values(run: CalibrationRun) -> dict[str, list[object]]:
    c = run.config
    per_replica = c.micro_batch_size * (c.num_microbatches or 1)
    vals: dict[str, list[object]] = {
        "micro_batch_size": [c.micro_batch_size],
        "virtual_stages": [c.virtual_stages],
        "recompute": [c.recompute],
    }
    if "micro_batch_size" in run.unstated:
        vals["micro_batch_size"] = [b for b in MICRO_BATCHES if per_replica % b == 0]
    if "virtual_stages" in run.unstated and c.pp > 1:
        low = 2 if c.virtual_stages > 1 else 1  # "interleaved" is stated, its degree is not
        vals["virtual_stages"] = [v for v in VIRTUAL_STAGES if v >= low]
    if "recompute" in run.unstated:
        vals["recompute"] = list(Recompute)
    return vals


def _runnable(run: CalibrationRun, c: ParallelConfig) -> bool:
    """The framework can run `c` and the memory model says it fits."""
    A, H = resolve_model(run.model), resolve_cluster(run.cluster)
    if run.even_layers and A.L % (c.pp * c.virtual_stages):
        return False
    t = run.training
    p = Point.from_config(c)
    batch = Batch(t.global_batch_tokens // t.seq_len, t.critical_batch_tokens // t.seq_len)
    if violations(p, A, H, t, run.search, batch, check_pins=False):
        return False
    mem = t.model_copy(update={"precision": run.memory_precision})
    return CostModel(A, H, mem, run.search).fits(p)


@cache
def _candidates(key: str) -> tuple[ParallelConfig, ...]:
    run = CalibrationRun.model_validate_json(key)
    c = run.config
    per_replica = c.micro_batch_size * (c.num_microbatches or 1)
    out = [c]
    vals = _values(run)
    for b, v, r in itertools.product(*vals.values()):
        cand = c.model_copy(
            update={
                "micro_batch_size": b,
                "num_microbatches": per_replica // b,
                "virtual_stages": v,
                "recompute": r,
            }
        )
        if cand != c and _runnable(run, cand):
            out.append(cand)
    return tuple(out)


def candidates(run: CalibrationRun) -> tuple[ParallelConfig, ...]:
    """The settings a run is scored among: its stated default first, then every setting of its
    unstated knobs that its framework runs and that fits (cached per run)."""
    if not run.unstated:
        return (run.config,)
    return _candidates(run.model_dump_json())


def setting(run: CalibrationRun, c: ParallelConfig) -> dict[str, int | str]:
    """The values of the run's unstated knobs in `c` (what a report records with the run)."""
    out: dict[str, int | str] = {}
    for k in run.unstated:
        v = getattr(c, k)
        out[k] = v.value if isinstance(v, Recompute) else int(v)
    return out
