"""The experts' load spread under dropless learned routing (constants.py `moe_load_cv`), from
published pairs of runs that differ only in forcing the routing to balance.

Every published MoE run of the calibration data forces balanced routing (NVIDIA's benchmarks do),
so the fit of tools/calibration/fit.py cannot see the spread. The Megatron MoE model zoo prints
the same Qwen3-235B-A22B layouts with and without --moe-router-force-load-balancing
(tools/calibration/published/moezoo_dropless.json): the same FLOPs, so the ratio of their TFLOP/s
is the inverse ratio of their step times. `fit_load_cv` finds the spread at which the cost model's
step-time ratios match the measured ones (mean log ratio over the pairs), by bisection.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

from meshplan.solver.arch import resolve_model
from meshplan.solver.costmodel import CostModel, Point
from meshplan.solver.costmodel.constants import Constants
from meshplan.solver.costmodel.timing import Rates, dp_terms, objective_terms
from meshplan.solver.hardware import resolve_cluster
from meshplan.solver.schema import (
    ClusterSpec,
    Framework,
    ModelSpec,
    ParallelConfig,
    Precision,
    Recompute,
    SearchSpec,
    TrainingSpec,
)

PAIRS = Path(__file__).resolve().parent / "published" / "moezoo_dropless.json"
CV_RANGE = (0.0, 4.0)  # bisection bracket of the coefficient of variation


def step_time(cm: CostModel, p: Point, k: Constants) -> float:
    """Step time of point p (s) with constants k, as CostModel.performance computes it."""
    ctx = replace(cm.ctx, K=k)
    R = Rates(ctx)
    t = sum(term.float_value(p) for term in objective_terms(ctx, R))
    comm, credit = dp_terms(ctx, R, p.z)
    t += max(0.0, sum(x.float_value(p) for x in comm) - sum(x.float_value(p) for x in credit))
    return t * cm.tokens(p)


def load_pairs(path: Path = PAIRS) -> list[tuple[CostModel, CostModel, Point, float]]:
    """(dropless model, forced model, the layout, measured dropless / forced step time)."""
    doc = json.loads(path.read_text())
    c = doc["common"]
    A = resolve_model(ModelSpec(preset=c["model"]))
    out = []
    for pair in doc["pairs"]:
        n = c["num_gpus"]
        H = resolve_cluster(ClusterSpec(gpu=c["gpu"], num_gpus=n, gpus_per_node=c["gpus_per_node"]))
        tp, cp, pp = pair["tp"], pair["cp"], c["pp"]
        dp = n // (tp * cp * pp)
        seqs = c["global_batch_seqs"]
        config = ParallelConfig(
            tp=tp,
            pp=pp,
            dp=dp,
            cp=cp,
            ep=c["ep"],
            etp=c["etp"],
            virtual_stages=c["virtual_stages"],
            micro_batch_size=c["micro_batch"],
            num_microbatches=seqs // (dp * c["micro_batch"]),
            zero_stage=1,
            recompute=Recompute.NONE,
            sequence_parallel=tp > 1,
        )
        models = []
        for force in (False, True):
            training = TrainingSpec(
                seq_len=pair["seq_len"],
                global_batch_tokens=seqs * pair["seq_len"],
                precision=Precision(c["precision"]),
                framework=Framework(c["framework"]),
                ep_comm_overlap=c["a2a_overlap"],
                ep_dispatch_dedup=c["dispatcher"] == "DeepEP",
                dp_comm_overlap=True,
                moe_router_force_balance=force,
            )
            models.append(CostModel(A, H, training, SearchSpec()))
        ratio = pair["forced_tflops"] / pair["dropless_tflops"]
        out.append((models[0], models[1], Point.from_config(config), ratio))
    return out


def predicted_ratios(pairs: list, k: Constants) -> list[float]:
    """The cost model's dropless / forced step-time ratio of each pair."""
    return [step_time(free, p, k) / step_time(forced, p, k) for free, forced, p, _ in pairs]


def fit_load_cv(k: Constants, path: Path = PAIRS, iters: int = 30) -> tuple[float, list]:
    """(moe_load_cv, [(measured, predicted) ratio per pair]) with the other constants of k."""
    pairs = load_pairs(path)
    want = sum(math.log(r) for *_, r in pairs) / len(pairs)

    def gap(cv: float) -> float:
        got = predicted_ratios(pairs, replace(k, moe_load_cv=cv))
        return sum(math.log(x) for x in got) / len(got) - want

    lo, hi = CV_RANGE
    if gap(hi) < 0:  # the model cannot reach the measured loss: report the bracket's end
        lo = hi
    for _ in range(iters if lo < hi else 0):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gap(mid) < 0 else (lo, mid)
    cv = (lo + hi) / 2
    got = predicted_ratios(pairs, replace(k, moe_load_cv=cv))
    return cv, [(r, g) for (*_, r), g in zip(pairs, got, strict=True)]
