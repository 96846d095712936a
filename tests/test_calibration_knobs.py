"""The knobs a source does not state (tools/calibration/knobs.py): a run is scored at the fastest
setting of those knobs its framework runs and that fits, every published knob kept."""

from __future__ import annotations

import pytest

from meshplan.solver import evaluate
from meshplan.solver.arch import resolve_model
from meshplan.tools.calibration.knobs import candidates
from meshplan.tools.calibration.score import evaluate_run, load_all

RUNS = {r.id: r for r in load_all()}


def _published(run, c) -> tuple:  # noqa: ANN001
    """The knobs a candidate must keep: the layout and the global batch."""
    return (
        c.tp,
        c.pp,
        c.dp,
        c.cp,
        c.ep,
        c.zero_stage,
        c.dp * c.micro_batch_size * c.num_microbatches,
    )


@pytest.mark.parametrize("run_id", [i for i, r in RUNS.items() if r.unstated])
def test_candidates_keep_the_published_knobs_and_are_runnable(run_id: str) -> None:
    run = RUNS[run_id]
    cands = candidates(run)
    assert cands[0] == run.config  # the stated default is always a candidate
    L = resolve_model(run.model).L
    for c in cands[1:]:
        assert _published(run, c) == _published(run, run.config)
        for knob in ("micro_batch_size", "virtual_stages", "recompute"):
            if knob not in run.unstated:
                assert getattr(c, knob) == getattr(run.config, knob), knob
        ev = evaluate(run.request().model_copy(update={"config": c}))
        assert ev.fits, ev.violations  # the framework runs it and it fits
        if run.even_layers:
            assert L % (c.pp * c.virtual_stages) == 0


def test_a_run_that_states_everything_has_one_candidate() -> None:
    run = RUNS["dgxc_2502_gpt3_bf16_128xh100"]
    assert run.unstated == () and candidates(run) == (run.config,)
    assert evaluate_run(run).setting == {}


def test_the_fastest_candidate_is_scored_and_recorded() -> None:
    # Megatron-Core r0.8.0 publishes no micro-batch size: at micro-batch 1 the 32B run's dp
    # traffic is exposed (predicted -30%); a tuned run takes the largest micro-batch that fits.
    run = RUNS["mcore_r080_h100_weak_32B_384gpu"]
    tuned, default = evaluate_run(run), evaluate_run(run, tune=False)
    assert tuned.setting["micro_batch_size"] == 4 and tuned.config.num_microbatches == 1
    assert default.config == run.config and default.setting["micro_batch_size"] == 1
    assert tuned.predicted_tokens_per_s_per_gpu > default.predicted_tokens_per_s_per_gpu
    best = max(
        evaluate(run.request().model_copy(update={"config": c})).performance.tokens_per_s
        for c in candidates(run)
    )
    assert tuned.predicted_tokens_per_s_per_gpu * run.cluster.num_gpus == pytest.approx(best)


def test_interleaving_is_tried_only_where_the_layers_split_evenly() -> None:
    # 2021 Megatron-LM: 128 layers over pp 64 allow v = 1 or 2 only (arguments.py asserts the
    # layers per stage divide by the layers per virtual stage).
    run = RUNS["narayanan2021_t1_1008p0B_3072gpu"]
    assert {c.virtual_stages for c in candidates(run)} <= {1, 2}
    assert "virtual_stages" not in RUNS["narayanan2021_t1_39p1B_512gpu"].unstated  # pp = 2


def test_a_default_that_does_not_fit_stays_a_candidate() -> None:
    # NeMo's Nemotron-4 340B layout needs more than the default usable memory in the model; the
    # run ran, so its stated default (no recomputation) is kept and only slower modes are added.
    run = RUNS["nemo2407_h100_fp8_nemotron-340b_128gpu"]
    assert not evaluate(run.request()).fits
    assert candidates(run)[0] == run.config
    assert evaluate_run(run).setting == {"recompute": "NONE"}
