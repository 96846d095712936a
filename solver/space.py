"""The search space: legal values per axis, pruned in Python before any model is built.

The rules (`violations`) are the specification; `Space` generates exactly the points that obey
them, and the oracle checks that by enumerating raw ranges against the same rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import gcd

from meshplan.solver.arch import Arch
from meshplan.solver.batch_size import batch_choice
from meshplan.solver.costmodel import CostModel, Layout, Point
from meshplan.solver.hardware import Hardware
from meshplan.solver.schema import Framework, Precision, Recompute, SearchSpec, TrainingSpec


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def fewer_gpu_counts(n: int, gpn: int) -> list[int]:
    """GPU counts tried below n: m·2^k for m in {1, 3, 5, 7}, whole nodes (or within one)."""
    out = {n}
    for m in (1, 3, 5, 7):
        x = m
        while x < n:
            if x % gpn == 0 or gpn % x == 0:
                out.add(x)
            x *= 2
    return sorted(out, reverse=True)


@dataclass(frozen=True)
class Batch:
    """The global batch: fixed (sequences) or chosen below a cap (sequences)."""

    fixed_seqs: int  # 0 when the solver chooses
    cap_seqs: int  # 0: no cap

    def microbatches(self, dp: int, b: int, pin: int = 0) -> list[int]:
        """Micro-batch counts allowed for (dp, b): the space of the batch identity."""
        if self.fixed_seqs:
            if self.fixed_seqs % (dp * b):
                return []
            m = self.fixed_seqs // (dp * b)
            return [m] if not pin or pin == m else []
        top = self.cap_seqs // (dp * b)
        if pin:
            return [pin] if pin <= top else []
        if top < 1:
            return []
        # The largest batch under the cap, and powers of two below it: fewer micro-batches in
        # flight is the only reason to take a smaller batch (pipeline memory).
        out = {top}
        m = 1
        while m < top:
            out.add(m)
            m *= 2
        return sorted(out)


def batch_of(training: TrainingSpec, active_params: int) -> Batch:
    s = training.seq_len
    if training.global_batch_tokens:
        cap = training.critical_batch_tokens // s if training.critical_batch_tokens else 0
        return Batch(training.global_batch_tokens // s, cap)
    cap = batch_choice(training, active_params).cap_tokens  # given, or the scaling law's
    return Batch(0, cap // s)


def violations(
    p: Point,
    A: Arch,
    H: Hardware,
    training: TrainingSpec,
    search: SearchSpec,
    batch: Batch,
    *,
    check_pins: bool = True,
) -> list[str]:
    """Structural rules a point breaks (memory is checked by the cost model)."""
    c, lay, out = p, p.lay, []
    s = training.seq_len
    if lay.tp * lay.pp * lay.cp * lay.dp != lay.gpus:
        out.append(
            f"tp({lay.tp})*pp({lay.pp})*cp({lay.cp})*dp({lay.dp})={lay.gpus} is not the GPU count"
        )
    if lay.gpus > H.num_gpus:
        out.append(f"the layout needs {lay.gpus} GPUs but the cluster has {H.num_gpus}")
    elif lay.gpus != H.num_gpus and not search.allow_fewer_gpus:
        out.append(
            f"the layout uses {lay.gpus} of {H.num_gpus} GPUs (search.allow_fewer_gpus is off)"
        )
    if A.a % lay.tp or A.kv % lay.tp:
        out.append(f"tp ({lay.tp}) must divide the attention heads ({A.a}) and KV heads ({A.kv})")
    if A.f % lay.tp or (A.is_moe and A.fe % lay.tp):
        out.append(f"tp ({lay.tp}) must divide the FFN width")
    if s % (2 * lay.tp * lay.cp):
        out.append(f"seq_len ({s}) must be divisible by 2*tp*cp = {2 * lay.tp * lay.cp}")
    if lay.pp > A.L or lay.pp * c.v > A.L:
        out.append(f"pp*virtual_stages ({lay.pp}*{c.v}) exceeds the layers ({A.L})")
    if lay.pp == 1 and c.v > 1:
        out.append("virtual_stages > 1 needs pp > 1")
    if not A.is_moe and c.ep != 1:
        out.append(f"ep ({c.ep}) > 1 needs an MoE model")
    if A.is_moe and (A.E % c.ep or (lay.dp * lay.cp) % c.ep):
        out.append(f"ep ({c.ep}) must divide the experts ({A.E}) and dp*cp ({lay.dp * lay.cp})")
    if lay.sp and lay.tp == 1:
        out.append("sequence_parallel needs tp > 1")
    tokens = lay.dp * c.b * c.M * s
    if batch.fixed_seqs and tokens != batch.fixed_seqs * s:
        out.append(
            f"dp*micro_batch_size*num_microbatches*seq_len = {tokens} != global_batch_tokens ({batch.fixed_seqs * s})"
        )
    if batch.cap_seqs and tokens > batch.cap_seqs * s:
        out.append(
            f"global batch {tokens} tokens exceeds the critical batch ({batch.cap_seqs * s})"
        )
    if training.framework is Framework.KEMPNERFORGE:
        if A.is_moe and lay.pp > 1:
            out.append("KempnerForge rejects MoE with pp > 1 (its config validation)")
        if training.precision is Precision.FP8 and lay.tp > 1:
            out.append("KempnerForge rejects FP8 with tp > 1 (its config validation)")
        if lay.cp > 1:
            out.append("KempnerForge's context parallelism is a stub (unused by its training loop)")
    if check_pins:
        out += _pin_violations(p, search)
    return out


def _pin_violations(p: Point, q: SearchSpec) -> list[str]:
    got = {
        "tp": p.lay.tp,
        "pp": p.lay.pp,
        "dp": p.lay.dp,
        "cp": p.lay.cp,
        "ep": p.ep,
        "virtual_stages": p.v,
        "micro_batch_size": p.b,
        "num_microbatches": p.M,
    }
    out = [
        f"search.{k} is pinned to {getattr(q, k)}"
        for k, v in got.items()
        if getattr(q, k) and getattr(q, k) != v
    ]
    if q.zero_stage is not None and q.zero_stage != p.z:
        out.append(f"search.zero_stage is pinned to {q.zero_stage}")
    if q.recompute is not None and q.recompute is not p.r:
        out.append(f"search.recompute is pinned to {q.recompute.value}")
    if q.sequence_parallel is not None and p.lay.tp > 1 and q.sequence_parallel != p.lay.sp:
        out.append(f"search.sequence_parallel is pinned to {q.sequence_parallel}")
    if p.lay.tp > 1 and q.sequence_parallel is None and not p.lay.sp:
        out.append("sequence_parallel is on whenever tp > 1 unless pinned off")
    return out


@dataclass
class Space:
    """Legal values per axis for one request, and the cost model that scores them."""

    A: Arch
    H: Hardware
    training: TrainingSpec
    search: SearchSpec
    cm: CostModel
    batch: Batch
    layouts: list[Layout] = field(default_factory=list)
    all_layouts: list[Layout] = field(default_factory=list)  # before the memory prune
    te_all: list[tuple[int, int]] = field(default_factory=list)
    db_all: list[tuple[int, int, int]] = field(default_factory=list)
    pv: list[tuple[int, int]] = field(default_factory=list)
    db: list[tuple[int, int, int]] = field(default_factory=list)
    te: list[tuple[int, int]] = field(default_factory=list)
    rs: list[Recompute] = field(default_factory=list)
    zs: list[int] = field(default_factory=list)

    @staticmethod
    def build(
        A: Arch,
        H: Hardware,
        training: TrainingSpec,
        search: SearchSpec,
        cm: CostModel,
        num_gpus: int | None = None,
        prune: bool = True,
    ) -> Space:
        """The space of a request; `prune` drops the layouts whose least memory overflows (the
        planner leaves that to its vectorised bounds, which find the same and more)."""
        sp = Space(A, H, training, search, cm, batch_of(training, A.active_params))
        sp._generate(num_gpus or H.num_gpus, prune)
        return sp

    # -- per-axis domains ------------------------------------------------------------------
    def tp_values(self) -> list[int]:
        A, q = self.A, self.search
        g = gcd(gcd(A.a, A.kv), gcd(A.f, A.fe) if A.is_moe else A.f)
        vals = [t for t in divisors(g) if t <= self.H.gpn or t == q.tp]
        vals = [t for t in vals if self.training.seq_len % (2 * t) == 0]
        if (
            self.training.framework is Framework.KEMPNERFORGE
            and self.training.precision is Precision.FP8
        ):
            vals = [t for t in vals if t == 1]
        return [t for t in vals if not q.tp or t == q.tp]

    def ep_values(self) -> list[int]:
        if not self.A.is_moe:
            return [1]
        return [e for e in divisors(self.A.E) if not self.search.ep or e == self.search.ep]

    def _generate(self, n: int, prune: bool = True) -> None:
        A, q, s = self.A, self.search, self.training.seq_len
        counts = fewer_gpu_counts(n, self.H.gpn) if q.allow_fewer_gpus else [n]
        kf = self.training.framework is Framework.KEMPNERFORGE
        no_pp, no_cp = kf and A.is_moe, kf
        eps = self.ep_values()
        rows: set[Layout] = set()
        for g in counts:
            for t in self.tp_values():
                if g % t:
                    continue
                for c in divisors(g // t):
                    if s % (2 * t * c) or (q.cp and c != q.cp) or (no_cp and c > 1):
                        continue
                    for p in divisors(g // (t * c)):
                        if p > A.L or (q.pp and p != q.pp) or (no_pp and p > 1):
                            continue
                        d = g // (t * c * p)
                        if (q.dp and d != q.dp) or not any((d * c) % e == 0 for e in eps):
                            continue
                        sp_on = t > 1 and (q.sequence_parallel is not False)
                        rows.add(Layout(t, p, c, d, g, sp_on))
        self.rs = [q.recompute] if q.recompute else list(Recompute)
        self.zs = [q.zero_stage] if q.zero_stage is not None else [0, 1, 2, 3]
        # Free micro-batch sizes are powers of two (what launchers and kernels are tuned for).
        pow2 = [1 << k for k in range(q.max_micro_batch_size.bit_length())]
        bs = [q.micro_batch_size] if q.micro_batch_size else pow2
        db = {
            (d, b, m)
            for d in {r.dp for r in rows}
            for b in bs
            for m in self.batch.microbatches(d, b, q.num_microbatches)
        }
        dps = {d for d, _, _ in db}
        rows = {r for r in rows if r.dp in dps}
        self.all_layouts = sorted(rows)
        self.db_all = sorted(db)
        self.layouts = sorted(self._prune(rows) if prune else rows)
        keep_d = {r.dp for r in self.layouts}
        self.db = [x for x in self.db_all if x[0] in keep_d]
        vs = range(1, q.max_virtual_stages + 1)
        self.pv = sorted(
            {
                (r.pp, v)
                for r in self.layouts
                for v in vs
                if (v == 1 or r.pp > 1)
                and r.pp * v <= A.L
                and (not q.virtual_stages or v == q.virtual_stages)
            }
        )
        self.te = sorted({(r.tp, e) for r in self.layouts for e in eps if (r.dp * r.cp) % e == 0})
        self.te_all = sorted({(r.tp, e) for r in self.all_layouts for e in eps})
        pps = {p for p, _ in self.pv}
        self.layouts = [r for r in self.layouts if r.pp in pps]

    def compatible(self, axis: str, row: Layout) -> list:
        """Values of a composite axis that agree with a layout row: (pp, v) with its pp,
        (dp, b, M) with its dp, (tp, ep) with its tp and ep dividing dp·cp."""
        if axis == "pv":
            return [v for v in self.pv if v[0] == row.pp]
        if axis == "db":
            return [v for v in self.db if v[0] == row.dp]
        return [v for v in self.te if v[0] == row.tp and (row.dp * row.cp) % v[1] == 0]

    def restrict(self, rows: list[Layout]) -> Space:
        """The same space over some of its layout rows, with the axis values those rows use."""
        pps, dps = {r.pp for r in rows}, {r.dp for r in rows}
        tes = {x for r in rows for x in self.compatible("te", r)}
        return replace(
            self,
            layouts=list(rows),
            pv=[x for x in self.pv if x[0] in pps],
            db=[x for x in self.db if x[0] in dps],
            te=[x for x in self.te if x in tes],
        )

    def micro_batch_sizes(self) -> list[int]:
        return sorted({b for _, b, _ in self.db})

    def least_memory_point(self, row: Layout) -> Point | None:
        """The row's point of least memory: memory falls monotonically with a higher ZeRO
        stage, fuller recomputation, a smaller micro-batch and count, more experts per rank and
        one chunk per stage, so this point bounds every other point of the row."""
        dbs = [x for x in self.db_all if x[0] == row.dp]
        eps = [e for e in self.ep_values() if (row.dp * row.cp) % e == 0]
        if not dbs or not eps:
            return None
        _, b, m = min(dbs, key=lambda x: (x[1], x[2]))
        order = [Recompute.FULL, Recompute.SELECTIVE, Recompute.NONE]
        return Point(row, 1, b, m, max(eps), min(self.rs, key=order.index), max(self.zs))

    def _prune(self, rows: set[Layout]) -> list[Layout]:
        """Drop layouts whose least-memory point overflows."""
        pts = [self.least_memory_point(row) for row in rows]
        return [p.lay for p in pts if p is not None and self.cm.fits(p)]

    def points(self):  # noqa: ANN201  (generator of Point; the product, for small spaces only)
        for lay in self.layouts:
            for _, v in self.compatible("pv", lay):
                for _, b, m in self.compatible("db", lay):
                    for _, e in self.compatible("te", lay):
                        for r in self.rs:
                            for z in self.zs:
                                yield Point(lay, v, b, m, e, r, z)
