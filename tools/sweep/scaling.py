"""Scaling curves from sweep rows ("The scaling ceiling"): strong scaling (one model, growing
cluster) and weak scaling (the model grows with the cluster), with where the DP cap and the critical
batch bind.

Scaling efficiency is the speedup got over the speedup paid for, relative to the series' first
feasible point: strong E(P) = (T(P)/T0) / (P/P0) with T in tokens/s ("The scaling ceiling" §2); weak
scaling compares model FLOPs per GPU instead, E(P) = (T·F/P) / (T0·F0/P0) with F the model FLOPs per
token ("The scaling ceiling" §4: constant work per GPU holds efficiency flat).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

_GROUP = ("gpu", "seq_len", "precision", "global_batch_tokens", "critical_batch_tokens")


@dataclass(frozen=True)
class ScalePoint:
    """One feasible cell on a curve."""

    gpus: int
    model: str
    tokens_per_s: float
    efficiency: float
    mfu: float
    wall: str
    batch_tokens: int


@dataclass
class Series:
    """A curve: strong (fixed model) or weak (model grows with the cluster)."""

    label: str
    kind: str
    points: list[ScalePoint] = field(default_factory=list)
    dp_cap_gpus: int | None = None  # first GPU count whose binding wall is DP_CAP
    critical_batch_tokens: int = 0  # the cap on the global batch (0: none)
    # tokens per sequence: dp <= critical_batch_tokens / seq_len ("The scaling ceiling")
    seq_len: int = 0


def _num(row: dict[str, Any], key: str) -> float:
    v = row.get(key)
    return float(v) if v not in (None, "") else 0.0


def _feasible(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        r for r in rows if r.get("status") in ("OPTIMAL", "FEASIBLE") and _num(r, "tokens_per_s")
    ]


def _cap_tokens(row: dict[str, Any]) -> int:
    """The cap the planner applied (given, or the scaling law's); rows written before the
    planner reported it fall back to the cap the request gave."""
    return int(_num(row, "batch_cap_tokens")) or int(_num(row, "critical_batch_tokens"))


def _series(label: str, kind: str, rows: list[dict[str, Any]], flops: bool) -> Series:
    rows = sorted(rows, key=lambda r: _num(r, "num_gpus"))
    s = Series(label, kind, critical_batch_tokens=_cap_tokens(rows[0]))
    s.seq_len = int(_num(rows[0], "seq_len"))
    p0, r0 = _num(rows[0], "num_gpus"), rows[0]
    base = _num(r0, "tokens_per_s") * (_num(r0, "model_flops_per_token") if flops else 1) / p0
    for r in rows:
        p, t = _num(r, "num_gpus"), _num(r, "tokens_per_s")
        work = (
            t * (_num(r, "model_flops_per_token") if flops else 1) / p
        )  # "The scaling ceiling": E = speedup got / paid for
        batch = int(_num(r, "plan_global_batch_tokens"))
        pt = ScalePoint(
            int(p),
            str(r["model"]),
            t,
            work / base,
            _num(r, "mfu"),
            str(r.get("binding_wall") or ""),
            batch,
        )
        s.points.append(pt)
        if s.dp_cap_gpus is None and pt.wall == "DP_CAP":
            s.dp_cap_gpus = pt.gpus
    return s


def _group_label(row: dict[str, Any], varying: list[str]) -> str:
    return ", ".join(f"{k}={row.get(k)}" for k in varying)


def _weak(by_model: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One cell per model, largest models on the most GPUs, parameters per GPU kept as close as
    the grid allows to the smallest model's on its fewest GPUs (weak scaling, "The scaling
    ceiling")."""
    models = sorted(by_model, key=lambda m: _num(by_model[m][0], "total_params"))
    first = min(by_model[models[0]], key=lambda r: _num(r, "num_gpus"))
    per_gpu = _num(first, "total_params") / _num(first, "num_gpus")
    out = [first]
    for m in models[1:]:
        later = [r for r in by_model[m] if _num(r, "num_gpus") > _num(out[-1], "num_gpus")]
        if later:
            ratio = [
                abs(math.log(_num(r, "total_params") / _num(r, "num_gpus") / per_gpu))
                for r in later
            ]
            out.append(later[ratio.index(min(ratio))])
    return out


def scaling_series(rows: Iterable[dict[str, Any]]) -> list[Series]:
    """Strong series per (model, GPU type, seq_len, precision, batch knobs); one weak series per
    group of the other knobs when it holds several models (see _weak)."""
    rows = _feasible(rows)
    varying = [k for k in _GROUP if len({str(r.get(k)) for r in rows}) > 1]
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(str(r.get(k)) for k in _GROUP), []).append(r)
    out: list[Series] = []
    for members in groups.values():
        extra = _group_label(members[0], varying)
        by_model: dict[str, list[dict[str, Any]]] = {}
        for r in members:
            by_model.setdefault(str(r["model"]), []).append(r)
        for model, mrows in by_model.items():
            label = f"{model} ({extra})" if extra else model
            out.append(_series(label, "strong", mrows, flops=False))
        diag = _weak(by_model) if len(by_model) > 1 else []
        if len(diag) > 1:
            label = f"weak: {diag[0]['model']} → {diag[-1]['model']}"
            out.append(_series(f"{label} ({extra})" if extra else label, "weak", diag, flops=True))
    return out
