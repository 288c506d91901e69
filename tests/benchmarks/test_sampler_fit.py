"""vLLM V1's sampler price (issue 26, seventh session): the ``vllm-v1`` constants are the
least-squares fit of the measured H100 sweep (committed under benchmarks/results/), and the
engine that serves carries them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from inferencegym.sim.calibration.engines import VLLM_V1_GPU_FIXED_S, VLLM_V1_SAMPLER_S_PER_LOGIT
from inferencegym.sim.execution_params import engine_params


@pytest.fixture(scope="module")
def sf(bench_module):
    return bench_module("sampler_fit")


def test_engine_constants_are_the_top_p_graph_fit_to_three_digits(sf):
    fit = sf.fit_relative(sf.load_rows())
    assert len(sf.load_rows()) == 24  # 6 batches x 4 vocabularies
    assert VLLM_V1_GPU_FIXED_S == pytest.approx(fit["fixed_s"], rel=5e-3)
    assert VLLM_V1_SAMPLER_S_PER_LOGIT == pytest.approx(fit["s_per_logit"], rel=5e-3)
    e = engine_params("vllm-v1")
    assert (e.gpu_fixed_s, e.sampler_s_per_logit) == (VLLM_V1_GPU_FIXED_S, VLLM_V1_SAMPLER_S_PER_LOGIT)


def test_the_fit_prices_large_batches_within_seven_percent_on_every_vocabulary(sf):
    fit = {"fixed_s": VLLM_V1_GPU_FIXED_S, "s_per_logit": VLLM_V1_SAMPLER_S_PER_LOGIT}
    errs = sf.errors(fit, sf.load_rows())
    big = [e["error"] for e in errs if e["batch"] >= 256]
    assert len(big) == 12 and max(abs(x) for x in big) < 0.07
    summary = sf.per_vocab_summary(errs)
    assert set(summary) == {32000, 128256, 151936, 201088}
    assert all(s["median"] < 0.06 for s in summary.values())
    # the two-point fit it replaces was ~19 % short at 1,024 x 201,088 (23.0 vs 28.4 ms measured)
    old = sf.errors({"fixed_s": 1.77e-4, "s_per_logit": 1.11e-10}, sf.load_rows())
    assert [e["error"] for e in old if (e["batch"], e["vocab"]) == (1024, 201088)][0] < -0.15


def test_least_squares_recovers_a_known_line_and_the_third_term(sf):
    rows = [{"batch": b, "vocab": v, "graph_s": 2e-4 + 3e-10 * v + 1.5e-10 * b * v}
            for b in (1, 16, 256) for v in (32000, 201088)]
    three = sf.fit_relative(rows, per_vocab_term=True)
    assert three["fixed_s"] == pytest.approx(2e-4, rel=1e-6)
    assert three["s_per_vocab_entry"] == pytest.approx(3e-10, rel=1e-6)
    assert three["s_per_logit"] == pytest.approx(1.5e-10, rel=1e-6)
    two = sf.fit_relative(rows)
    assert max(abs(e["error"]) for e in sf.errors(two, rows)) > 0.05  # the two-term form cannot


def test_a_sweep_without_the_path_is_a_clear_error(sf, tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"rows": [{"kind": "greedy", "vocab": 10, "batch": 1, "graph_s": 1e-5}]}))
    with pytest.raises(ValueError, match="no 'top_p' rows"):
        sf.load_rows(p)
    fits = np.array([sf.predict_s({"fixed_s": 1.0, "s_per_logit": 2.0}, 3, 4)])
    assert fits[0] == pytest.approx(25.0)


def test_the_greedy_counterfactual_prices_the_measured_greedy_slope(sf, bench_module):
    # benchmarks/gpt_oss_bursts.py prices GPUStack's greedy requests with the greedy rows' slope
    greedy = sf.fit_relative(sf.load_rows(kind="greedy"))
    assert bench_module("gpt_oss_bursts").GREEDY_SAMPLER_S_PER_LOGIT == pytest.approx(greedy["s_per_logit"], rel=5e-3)
    assert greedy["s_per_logit"] < VLLM_V1_SAMPLER_S_PER_LOGIT / 20  # an argmax, no sort


def test_the_h200_slope_is_the_h200_sweeps_fit(sf):
    from inferencegym.sim.calibration.engines import VLLM_V1_SAMPLER_S_PER_LOGIT_GPU

    h200 = sf.fit_relative(sf.load_rows(sf.SWEEP_H200))
    assert dict(VLLM_V1_SAMPLER_S_PER_LOGIT_GPU)["h200-141gb"] == pytest.approx(h200["s_per_logit"], rel=5e-3)
    assert h200["fixed_s"] == pytest.approx(VLLM_V1_GPU_FIXED_S, rel=0.02)  # one fixed part for both
    fit = {"fixed_s": VLLM_V1_GPU_FIXED_S, "s_per_logit": dict(VLLM_V1_SAMPLER_S_PER_LOGIT_GPU)["h200-141gb"]}
    big = [e["error"] for e in sf.errors(fit, sf.load_rows(sf.SWEEP_H200)) if e["batch"] >= 256]
    assert max(abs(x) for x in big) < 0.08
