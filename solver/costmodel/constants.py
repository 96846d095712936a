"""Efficiency constants of the cost model.

Defaults are engineering priors; `scripts/fit_constants.py` fits them to the published runs in
tools/data/calibration (tools/calibration.py) and writes `fitted.json` beside this file, which
wins: its values replace the priors field by field (`eta` entries are merged).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from functools import cache
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class Constants:
    # Achievable fraction of dense peak for large GEMMs, per GPU family, or per catalog GPU
    # where the data tells one apart (the 500 W h100-sxm-96gb of torchtitan's runs).
    eta: dict[str, float] = field(
        default_factory=lambda: {
            "A100": 0.62,
            "H100": 0.55,
            "H200": 0.57,
            "B200": 0.5,
            "MI300X": 0.4,
        }
    )
    width0: float = 256.0  # GEMM efficiency x/(x+width0) of the per-GPU width x = h/tp (elements)
    fp8_gain: float = 1.35  # FP8 recipe speed-up of the matmul rate over BF16 (torchtitan, fitted)
    eps_tp: float = 1.0  # exposed fraction of tp collectives (a tp_exposed recipe counts all)
    eps_cp: float = 0.5  # exposed fraction of the ring K/V exchange
    eps_ep: float = 1.0  # exposed fraction of the expert all-to-all
    omega: float = 0.8  # fraction of the overlappable compute that hides dp/FSDP traffic
    kappa0: float = 30e-6  # fixed cost per layer per micro-batch: launches, small kernels (s)
    alpha_intra: float = 8e-6  # latency per in-node collective (s)
    alpha_inter: float = 15e-6  # latency per inter-node collective or send (s)
    link_eff: float = 0.75  # achievable fraction of nominal link bandwidth (NCCL bus bw)

    def family_eta(self, family: str) -> float:
        return self.eta.get(family, min(self.eta.values()))

    def gpu_eta(self, name: str, family: str) -> float:
        """eta of a catalog GPU: its own entry if fitted, else its family's."""
        return self.eta[name] if name in self.eta else self.family_eta(family)


def constants_from(data: dict[str, Any], base: Constants | None = None) -> Constants:
    """The priors with a fitted.json document's "constants" applied (unknown keys ignored)."""
    base = base or Constants()
    known = set(asdict(base))
    fitted = {k: v for k, v in data.get("constants", {}).items() if k in known}
    if "eta" in fitted:
        fitted["eta"] = {**base.eta, **fitted["eta"]}
    return replace(base, **fitted)


@cache
def load_constants() -> Constants:
    """The constants every CostModel uses by default: fitted.json over the priors."""
    try:
        text = resources.files("meshplan.solver.costmodel").joinpath("fitted.json").read_text()
    except FileNotFoundError:
        return Constants()
    return constants_from(json.loads(text))
