"""The fit and the leave-one-source-out harness (tools/calibration/fit.py), on small synthetic
sets: the fit recovers constants that generated the data, and a source left out is scored by
constants fitted without it."""

from __future__ import annotations

import pytest

from meshplan.solver.costmodel.constants import Constants
from meshplan.tools.calibration.fit import Param, fit, leave_one_source_out, log_errors, prepare
from meshplan.tools.calibration.score import evaluate_runs, load_all, with_constants


@pytest.fixture(scope="module")
def few() -> list:
    runs = load_all()
    pick = {
        "dgxc_2502_gpt3_bf16_128xh100",
        "dgxc_2502_l8_bf16_8xh100",
        "nemo2407_h100_fp8_llama2-7b_8gpu",
    }
    pick |= {
        "torchtitan_2412_llama31_8B_t1_fsdp_compile",
        "torchtitan_2506_llama31_8B_fsdp_fp8_32xh200",
    }
    pick |= {"kempnerforge_13b_fsdp8_8gpu", "mosaicml_mpt70b_h100_64gpu_seq2048"}
    return [r for r in runs if r.id in pick]


def test_fit_recovers_the_constants_that_made_the_data(few) -> None:
    truth = with_constants(Constants(), {"eta": {"H100": 0.55}, "kernel_eff": {"TORCH": 0.8}})
    made = [
        r.model_copy(update={"tokens_per_s_per_gpu": x.predicted_tokens_per_s_per_gpu})
        for r, x in zip(few, evaluate_runs(few, truth, memory=False), strict=True)
    ]
    params = (Param("eta:H100", 0.3, 0.95), Param("kernel_eff:TORCH", 0.5, 1.2))
    res = fit(made, params=params)
    assert res.constants.eta["H100"] == pytest.approx(0.55, rel=0.02)
    assert res.constants.kernel_eff["TORCH"] == pytest.approx(0.8, rel=0.02)
    assert max(abs(log_errors(prepare(made), res.constants))) < 0.01
    assert res.at_bound == ()


def test_a_constant_at_its_bound_is_flagged(few) -> None:
    slow = [r.model_copy(update={"tokens_per_s_per_gpu": r.tokens_per_s_per_gpu / 3}) for r in few]
    res = fit(slow, params=(Param("eta:H100", 0.5, 0.95),))
    assert res.at_bound == ("eta:H100",)


def test_loso_scores_each_source_with_a_fit_that_never_saw_it(few) -> None:
    # Two synthetic sources; the fit marks its constants with the sources it was given.
    runs = [r.model_copy(update={"source": "a" if i % 2 else "b"}) for i, r in enumerate(few)]
    seen: list[frozenset[str]] = []

    def fit_fn(train) -> Constants:  # noqa: ANN001
        sources = frozenset(r.source for r in train)
        seen.append(sources)
        return with_constants(Constants(), {"eta": {"H100": 0.5 if "a" in sources else 0.9}})

    out = leave_one_source_out(runs, fit_fn)
    assert sorted(seen, key=sorted) == [frozenset({"a"}), frozenset({"b"})]
    a_k = with_constants(Constants(), {"eta": {"H100": 0.9}})  # fitted on b only
    b_k = with_constants(Constants(), {"eta": {"H100": 0.5}})  # fitted on a only
    for r, x in zip(runs, out, strict=True):
        k = a_k if r.source == "a" else b_k
        assert x.id == r.id
        assert x.predicted_tokens_per_s_per_gpu == pytest.approx(
            evaluate_runs([r], k, memory=False)[0].predicted_tokens_per_s_per_gpu
        )
