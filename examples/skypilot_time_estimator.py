"""A SkyPilot time estimator backed by meshplan's scaling curve.

SkyPilot's optimizer asks each candidate launch for its runtime with `task.estimate_runtime(
resources)`; a task sets the function with `task.set_time_estimator(func)`, where `func` maps a
`sky.Resources` to seconds (skypilot-org/skypilot, sky/task.py at f5d492f; marked experimental;
without one SkyPilot assumes one hour for any resources). This example does not import skypilot:
`Resources` below has the two attributes the estimator reads, and the last lines show the call.

The estimator asks a meshplan server for one ScalingCurve per accelerator type the first time it
sees the type (the server memoises it by its cache key, so other processes asking the same get it
from the cache) and answers every later candidate from that table: GPUs = accelerators per node x
nodes, time = start-up + tokens / the envelope's goodput at that count (the envelope never
decreases, so more GPUs never look slower).

    python examples/skypilot_time_estimator.py --server localhost:50051
    python examples/skypilot_time_estimator.py --server planner:50051 --tls-ca ca.pem --token-file token
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field

from meshplan.client import PlannerClient
from meshplan.solver.scheduler import CellStatus, CurveRequest, CurveResult
from meshplan.tools.cli.remote import add_connection_flags, connect

# SkyPilot accelerator names -> meshplan catalog GPUs.
ACCELERATORS = {
    "A100": "a100-sxm-40gb",
    "A100-80GB": "a100-sxm-80gb",
    "H100": "h100-sxm-80gb",
    "H200": "h200-141gb",
    "B200": "b200-192gb",
}
NEVER_S = 10 * 365 * 86400  # what a resource the model cannot run on is estimated at


@dataclass(frozen=True)
class Resources:
    """The part of sky.Resources the estimator reads: accelerators per node."""

    accelerators: dict[str, int] = field(default_factory=dict)


@dataclass
class MeshplanTimeEstimator:
    """`estimator(resources) -> seconds` for a training job of `tokens` tokens on `num_nodes`."""

    client: PlannerClient
    job: dict  # model, training, batch (and optional search) of a CurveRequest
    tokens: int
    num_nodes: int = 1
    startup_s: float = 600.0
    max_per_node: int = 8
    curves: dict[str, CurveResult] = field(default_factory=dict)

    def curve(self, gpu: str) -> CurveResult:
        """The curve of one GPU type over every count a candidate can ask for (memoised)."""
        if gpu not in self.curves:
            counts = [k * self.num_nodes for k in range(1, self.max_per_node + 1)]
            req = CurveRequest.model_validate(
                {**self.job, "clusters": [{"gpu": gpu}], "grid": {"counts": counts}}
            )
            self.curves[gpu] = self.client.scaling_curve(req, timeout=600)
        return self.curves[gpu]

    def __call__(self, resources: Resources) -> int:
        ((name, per_node),) = resources.accelerators.items()
        gpu = ACCELERATORS.get(name)
        if gpu is None:
            return NEVER_S
        n = per_node * self.num_nodes
        cells = [c for c in self.curve(gpu).cells if c.num_gpus <= n]
        best = max((c.envelope_goodput_tokens_per_s for c in cells), default=0.0)
        if not cells or best <= 0 or all(c.status is not CellStatus.PLANNED for c in cells):
            return NEVER_S
        return int(self.startup_s + self.tokens / best)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    ap.add_argument("--server", required=True, help="HOST:PORT of a meshplan server")
    add_connection_flags(ap)  # --tls-ca, --tls-cert/--tls-key, --token-file (or MESHPLAN_*)
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--tokens", type=int, default=20_000_000_000)
    ap.add_argument("--nodes", type=int, default=2)
    a = ap.parse_args(argv)
    job = {
        "model": {"preset": a.model},
        "training": {"seq_len": 4096},
        "batch": {"kind": "FIXED_GLOBAL", "global_batch_tokens": 4096 * 256},
    }
    with connect(a) as client:
        estimator = MeshplanTimeEstimator(client, job, a.tokens, num_nodes=a.nodes)
        # In a SkyPilot program: task.set_time_estimator(estimator); sky.optimize(dag)
        for name in ("H100", "A100-80GB", "TPU-v5"):
            for per_node in (1, 2, 4, 8):
                res = Resources({name: per_node})
                line = {"accelerator": name, "per_node": per_node, "nodes": a.nodes,
                        "seconds": estimator(res)}  # fmt: skip
                print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
