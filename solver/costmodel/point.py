"""A configuration as the values of the solver's axes.

The CP-SAT model chooses one value per axis: `lay` (tp, pp, cp, dp, gpus, sp: a factorisation of
the GPU count), `pv` (pp, virtual stages), `db` (dp, micro-batch size, micro-batch count), `te`
(tp, ep, etp: the expert group), `r` (recomputation) and `z` (ZeRO stage). Composite axes share
a component with `lay` and are channelled to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshplan.solver.schema import ParallelConfig, Recompute


@dataclass(frozen=True, order=True)
class Layout:
    tp: int
    pp: int
    cp: int
    dp: int
    gpus: int
    sp: bool


@dataclass(frozen=True)
class Point:
    lay: Layout
    v: int
    b: int
    M: int
    ep: int
    etp: int
    r: Recompute
    z: int

    def axis(self, name: str) -> object:
        """The value of one axis, as the term tables are keyed."""
        if name == "pv":
            return (self.lay.pp, self.v)
        if name == "db":
            return (self.lay.dp, self.b, self.M)
        if name == "te":
            return (self.lay.tp, self.ep, self.etp)
        if name == "r":
            return self.r
        if name == "z":
            return self.z
        raise KeyError(name)

    def config(self) -> ParallelConfig:
        return ParallelConfig(
            tp=self.lay.tp,
            pp=self.lay.pp,
            dp=self.lay.dp,
            cp=self.lay.cp,
            ep=self.ep,
            etp=self.etp,
            virtual_stages=self.v,
            micro_batch_size=self.b,
            num_microbatches=self.M,
            zero_stage=self.z,
            recompute=self.r,
            sequence_parallel=self.lay.sp,
        )

    @staticmethod
    def from_config(c: ParallelConfig) -> Point:
        sp = c.sequence_parallel and c.tp > 1
        lay = Layout(c.tp, c.pp, c.cp, c.dp, c.tp * c.pp * c.cp * c.dp, sp)
        return Point(
            lay,
            c.virtual_stages,
            c.micro_batch_size,
            c.num_microbatches,
            c.ep,
            c.etp if c.etp is not None else c.tp,
            c.recompute,
            c.zero_stage,
        )
