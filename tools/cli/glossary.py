"""Words for users: what the binding walls and the warnings of a plan mean, and how the batch
is chosen. `meshplan plan --help` prints them; the README says the same (a test checks that
every wall is defined in both)."""

from __future__ import annotations

import textwrap

BUBBLE_LIMIT = 0.20  # solver/walls.py BUBBLE_WARN (a test keeps them equal)
COMMUNICATION_LIMIT = 0.25  # solver/walls.py COMM_WALL

# The first wall that holds, in this order, is the plan's binding wall.
WALLS: dict[str, str] = {
    "DP_CAP": (
        "the critical batch caps data parallelism: a step takes at most critical_batch / "
        "seq_len sequences, so at most that many replicas, and the cluster has more GPUs than "
        "those replicas times the model parallelism the weights need; the rest go to model "
        "parallelism memory does not ask for, or idle"
    ),
    "BUBBLE": (
        f"the pipeline bubble (fill and drain, (pp-1)/(M*v+pp-1) of the schedule) is over "
        f"{BUBBLE_LIMIT:.0%} of the step"
    ),
    "COMMUNICATION": (
        f"communication that is not hidden behind compute (tp, cp, ep, pp and dp/FSDP "
        f"traffic) is over {COMMUNICATION_LIMIT:.0%} of the step"
    ),
    "WEIGHTS": (
        "the weights alone do not fit in one GPU's usable memory, so they force tensor or "
        "pipeline parallelism"
    ),
    "MEMORY": (
        "weights, gradients and optimizer state do not fit one GPU unsharded, or the plan "
        "fills over 90% of HBM: memory decides the layout"
    ),
    "NONE": "nothing above holds: the plan is compute-bound, the sweet spot",
}

WARNINGS: tuple[tuple[str, str], ...] = (
    ("past the DP cap", "the DP_CAP wall holds: GPUs beyond the critical batch are wasted"),
    ("tp=N crosses the node boundary", "tensor parallelism spans nodes, on the slow network"),
    ("the pipeline bubble is N% of the step", f"the bubble is over {BUBBLE_LIMIT:.0%}"),
    ("the plan uses N of the M GPUs", "with --allow-fewer-gpus, some GPUs are left idle"),
)

BATCH_RULE = (
    "With no --global-batch-tokens, the planner chooses the global batch, up to a cap:\n"
    "--critical-batch-tokens if given, else the optimal batch of DeepSeek LLM's scaling law\n"
    "(Bi et al. 2024, arXiv:2401.02954, Eq. 1), B_opt = 0.2920 * C^0.3271 tokens for the\n"
    "compute budget C = 6 * N * D FLOP, N the active parameters and D --train-tokens (default\n"
    "20 per active parameter, Hoffmann et al. 2022). The answer says which rule set the batch."
)


def plan_epilog() -> str:
    """The walls, the warnings and the batch rule, for `meshplan plan --help`."""
    width = max(len(w) for w in WALLS)
    pad = " " * (width + 4)
    lines = ["binding wall (what stops the next step up; the first that holds):"]
    lines += [
        textwrap.fill(text, 92, initial_indent=f"  {name:<{width}}  ", subsequent_indent=pad)
        for name, text in WALLS.items()
    ]
    lines += ["", "warnings:"]
    lines += [f"  {head}: {text}" for head, text in WARNINGS]
    lines += ["", "batch:", *("  " + line for line in BATCH_RULE.splitlines())]
    return "\n".join(lines) + "\n"


PLAN_EPILOG = plan_epilog()
