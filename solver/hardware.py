"""The resolved cluster: one GPU type, its node size and links, in SI units."""

from __future__ import annotations

from meshplan.solver.record import record
from meshplan.solver.schema import ClusterSpec, Precision

GIB = 1 << 30


@record(frozen=True)
class Hardware:
    """Per-GPU figures in bytes, FLOP/s and bytes/s."""

    name: str
    family: str
    num_gpus: int
    gpn: int  # GPUs per node
    hbm: int  # bytes
    peak_bf16: float  # FLOP/s, dense
    peak_fp8: float  # FLOP/s, dense
    hbm_bw: float  # bytes/s
    intra_bw: float  # bytes/s per GPU, one direction
    inter_bw: float  # bytes/s per GPU, one direction
    fp8: bool = True  # FP8 tensor cores (catalog fp8_tensor_cores)

    def peak(self, precision: Precision) -> float:
        return self.peak_fp8 if precision is Precision.FP8 else self.peak_bf16

    def link_bw(self, span: int) -> float:
        """Bandwidth of a group whose ranks span `span` consecutive GPUs (in-node if it fits)."""
        return self.intra_bw if span <= self.gpn else self.inter_bw


def resolve_cluster(spec: ClusterSpec) -> Hardware:
    from meshplan.solver.catalog import get_gpu

    g = get_gpu(spec.gpu)
    bf16 = (spec.peak_bf16_tflops or g.peak_bf16_tflops) * 1e12
    fp8_ratio = g.peak_fp8_tflops / g.peak_bf16_tflops
    return Hardware(
        name=g.name,
        family=g.family,
        num_gpus=spec.num_gpus,
        gpn=spec.gpus_per_node or g.gpus_per_node,
        hbm=int((spec.hbm_gib or g.hbm_gib) * GIB),
        peak_bf16=bf16,
        peak_fp8=bf16 * fp8_ratio,
        hbm_bw=g.hbm_tbps * 1e12,
        intra_bw=(spec.intra_node_gbps or g.intra_node_gbps) * 1e9,
        inter_bw=(spec.inter_node_gbps or g.inter_node_gbps) * 1e9,
        fp8=g.fp8_tensor_cores,
    )
