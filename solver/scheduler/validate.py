"""Rules across the fields of a scheduler request; each failure names its field and value."""

from __future__ import annotations

import re

from meshplan.solver.arch import Arch, resolve_model
from meshplan.solver.hardware import Hardware, resolve_cluster
from meshplan.solver.planner import check_pins
from meshplan.solver.profiles import check_request
from meshplan.solver.scheduler.requests import (
    MAX_CELLS,
    MAX_CLUSTERS,
    BatchPolicy,
    BatchPolicyKind,
    ClusterTemplate,
    CountGrid,
    Observation,
)
from meshplan.solver.schema import ModelSpec, SearchSpec, TrainingSpec

_FIELD = re.compile(r"^((?:model|search|training|cluster)(?:\.[a-z_]+)+)")
_LIMIT = 1_048_576  # ClusterSpec.num_gpus's cap


class SchedulerInputError(ValueError):
    """A request the scheduler queries reject: `field` is its dotted path, `description` says
    what is wrong, with the value."""

    def __init__(self, field: str, description: str) -> None:
        super().__init__(f"{field}: {description}")
        self.field = field
        self.description = description


def _field_of(message: str, default: str) -> str:
    m = _FIELD.match(message)
    return m.group(1) if m else default


def check_model(model: ModelSpec) -> Arch:
    try:
        return resolve_model(model)
    except KeyError as err:
        raise SchedulerInputError("model.preset", str(err.args[0])) from None
    except ValueError as err:
        raise SchedulerInputError(_field_of(str(err), "model"), str(err)) from None


def check_pins_for_model(arch: Arch, search: SearchSpec) -> None:
    """Pins that no GPU count can satisfy (a count they do not divide is a cell's problem)."""
    loose = search.model_copy(update={"allow_fewer_gpus": True})
    try:
        check_pins(arch, resolve_cluster(_ONE), loose)
    except ValueError as err:
        raise SchedulerInputError(_field_of(str(err), "search"), str(err)) from None


def hardware_of(template: ClusterTemplate, field: str) -> Hardware:
    """The template's hardware (on one GPU); an unknown GPU names `field`.gpu."""
    try:
        return resolve_cluster(template.spec(1))
    except KeyError as err:
        raise SchedulerInputError(f"{field}.gpu", str(err.args[0])) from None


def check_clusters(clusters: list[ClusterTemplate], field: str = "clusters") -> list[Hardware]:
    if not clusters:
        raise SchedulerInputError(field, "is empty: send at least one cluster template")
    if len(clusters) > MAX_CLUSTERS:
        raise SchedulerInputError(
            field, f"holds {len(clusters)} templates, more than the cap of {MAX_CLUSTERS}"
        )
    seen: dict[str, int] = {}
    for i, c in enumerate(clusters):
        if c.label in seen:
            raise SchedulerInputError(
                f"{field}[{i}].name",
                f"label {c.label!r} repeats clusters[{seen[c.label]}]; give each a distinct name",
            )
        seen[c.label] = i
    return [hardware_of(c, f"{field}[{i}]") for i, c in enumerate(clusters)]


def check_precision(
    training: TrainingSpec, hws: list[Hardware], field: str = "clusters", labels: bool = True
) -> None:
    """A precision that a GPU type (or the framework) cannot train in names the type: FP8 on a
    GPU without FP8 tensor cores (an A100 in a mixed fleet) is bad input, not a cell's failure."""
    for i, hw in enumerate(hws):
        where = f"{field}[{i}].gpu" if labels else f"{field}.gpu"
        try:
            check_request(training.framework, training.precision, hw.name, hw.fp8)
        except ValueError as err:
            raise SchedulerInputError(where, str(err)) from None


def _cap(template: ClusterTemplate) -> int:
    return template.max_gpus or _LIMIT


def grid_counts(grid: CountGrid, template: ClusterTemplate, gpn: int, field: str) -> list[int]:
    """The counts of one type, checked against its cap."""
    cap = _cap(template)
    where = f"the cap of {template.label} ({cap} GPUs)"
    if grid.counts and (grid.max_nodes or grid.min_nodes):
        raise SchedulerInputError(field, "give counts or a node range (min/max_nodes), not both")
    if grid.counts:
        for i, n in enumerate(grid.counts):
            if n < 1:
                raise SchedulerInputError(f"{field}.counts[{i}]", f"must be >= 1 (got {n})")
            if n > cap and not grid.clip_to_cap:
                raise SchedulerInputError(f"{field}.counts[{i}]", f"{n} GPUs is above {where}")
        return sorted({n for n in grid.counts if n <= cap})
    if not grid.max_nodes:
        raise SchedulerInputError(field, "is empty: give counts, or max_nodes (whole nodes)")
    lo = max(grid.min_nodes, 1)
    if lo > grid.max_nodes:
        raise SchedulerInputError(
            f"{field}.min_nodes", f"{lo} is above max_nodes ({grid.max_nodes})"
        )
    if grid.max_nodes * gpn > cap and not grid.clip_to_cap:
        raise SchedulerInputError(
            f"{field}.max_nodes",
            f"{grid.max_nodes} nodes of {gpn} = {grid.max_nodes * gpn} GPUs is above {where}",
        )
    if grid.max_nodes - lo + 1 > MAX_CELLS:
        raise SchedulerInputError(f"{field}.max_nodes", f"more than {MAX_CELLS} counts")
    counts = [k * gpn for k in range(lo, grid.max_nodes + 1)]
    if grid.sub_node:
        counts += [1 << i for i in range(gpn.bit_length()) if (1 << i) < gpn]
    return sorted({n for n in counts if n <= cap})


def default_counts(gpn: int, available: int) -> list[int]:
    """1, 2, 4, ... below a node, then every whole node up to 32 nodes, then 32 counts per
    doubling, up to the nodes available (and the available count itself)."""
    out = {1 << i for i in range(gpn.bit_length()) if (1 << i) < gpn and (1 << i) <= available}
    nodes = available // gpn
    out |= {k * gpn for k in range(1, min(nodes, 32) + 1)}
    k = 32
    while k < nodes:
        out |= {x * gpn for x in range(k, min(2 * k, nodes) + 1, k // 32)}
        k *= 2
    out.add(available if nodes == 0 else nodes * gpn)
    return sorted(out)


def check_cells(total: int, field: str = "grid") -> None:
    if total > MAX_CELLS:
        raise SchedulerInputError(
            field, f"asks for {total} cells (types x counts), more than the cap of {MAX_CELLS}"
        )


def check_batch(
    batch: BatchPolicy, training: TrainingSpec, field: str = "batch", keep_ok: bool = False
) -> None:
    """The policy's own fields; `keep_ok` lets 0 mean "keep the running layout's" (Replan)."""
    s = training.seq_len
    if training.global_batch_tokens:
        raise SchedulerInputError(
            "training.global_batch_tokens",
            f"leave it 0: {field}.kind states the batch (got {training.global_batch_tokens})",
        )
    crit = training.critical_batch_tokens
    k = batch.kind
    wrong = {
        "global_batch_tokens": k is not BatchPolicyKind.FIXED_GLOBAL,
        "per_replica_batch_tokens": k is not BatchPolicyKind.FIXED_PER_REPLICA,
        "min_global_batch_tokens": k is not BatchPolicyKind.FREE,
        "max_global_batch_tokens": k is not BatchPolicyKind.FREE,
    }
    for name, bad in wrong.items():
        if bad and getattr(batch, name):
            raise SchedulerInputError(
                f"{field}.{name}", f"does not apply to {k.value} (got {getattr(batch, name)})"
            )
    if k is BatchPolicyKind.FIXED_GLOBAL:
        _tokens(batch.global_batch_tokens, s, f"{field}.global_batch_tokens", keep_ok)
        if crit and batch.global_batch_tokens > crit:
            raise SchedulerInputError(
                f"{field}.global_batch_tokens",
                f"{batch.global_batch_tokens} exceeds training.critical_batch_tokens ({crit})",
            )
    elif k is BatchPolicyKind.FIXED_PER_REPLICA:
        _tokens(batch.per_replica_batch_tokens, s, f"{field}.per_replica_batch_tokens", keep_ok)
    else:
        lo, hi = batch.min_global_batch_tokens, batch.max_global_batch_tokens
        if lo:
            _tokens(lo, s, f"{field}.min_global_batch_tokens", False)
        if hi and hi < s:
            raise SchedulerInputError(
                f"{field}.max_global_batch_tokens", f"{hi} is below one sequence ({s} tokens)"
            )
        if lo and hi and lo > hi:
            raise SchedulerInputError(
                f"{field}.min_global_batch_tokens", f"{lo} is above max_global_batch_tokens ({hi})"
            )


def _tokens(value: int, seq_len: int, field: str, zero_ok: bool) -> None:
    if value == 0 and not zero_ok:
        raise SchedulerInputError(field, "must be set (tokens, a multiple of training.seq_len)")
    if value % seq_len:
        raise SchedulerInputError(
            field, f"{value} is not a multiple of training.seq_len ({seq_len})"
        )


def check_observations(
    observations: list[Observation], counts: dict[str, list[int]], field: str = "observations"
) -> None:
    """Each observation names a cell of the grid."""
    grid = {label: set(ns) for label, ns in counts.items()}
    for i, ob in enumerate(observations):
        if ob.cluster not in counts:
            known = ", ".join(sorted(counts))
            raise SchedulerInputError(
                f"{field}[{i}].cluster", f"{ob.cluster!r} is not a cluster template ({known})"
            )
        if ob.num_gpus not in grid[ob.cluster]:
            raise SchedulerInputError(
                f"{field}[{i}].num_gpus",
                f"{ob.num_gpus} is not in the grid of {ob.cluster} ({_short(counts[ob.cluster])})",
            )


def _short(xs: list[int]) -> str:
    return ", ".join(map(str, xs)) if len(xs) <= 8 else f"{xs[0]}, {xs[1]}, ..., {xs[-1]}"


_ONE = ClusterTemplate().spec(1)
