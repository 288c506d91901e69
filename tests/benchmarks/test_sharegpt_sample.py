"""benchmarks/sharegpt_sample.py: the ShareGPT lengths of a `vllm bench serve --dataset-name sharegpt`
burst (vLLM's seed-0 sample, LambdaLabs' per-request logs), as the gpt-oss burst rows use them."""

import numpy as np
import pytest


@pytest.fixture(scope="module")
def ss(bench_module):
    return bench_module("sharegpt_sample")


def test_the_first_320_are_vllms_seed0_order_and_the_longest_logged_generation(ss):
    prompts, outputs = ss.seed0_pairs()
    assert len(prompts) == len(outputs) == 320
    assert list(prompts[:5]) == [13, 25, 27, 10, 329]  # Lambda's logged order
    assert outputs[1] >= 613 and (outputs == 0).sum() == 17  # max over runs; 17 never answered


def test_a_burst_keeps_the_order_replaces_the_unanswered_and_matches_the_totals(ss):
    pairs = ss.sharegpt_burst(1000, 215_312, 196_205)
    p = np.array([a for a, _ in pairs])
    o = np.array([b for _, b in pairs])
    assert len(pairs) == 1000 and (p >= 1).all() and (o >= 1).all()
    assert abs(p.sum() - 215_312) < 1000 and abs(o.sum() - 196_205) < 1000  # rounding of 1,000 scaled lengths
    prompts, outputs = ss.seed0_pairs()
    kept = outputs > 0  # order kept: the answered first 320 are the sample's, scaled alike
    ratio = p[:320][kept] / prompts[kept]
    assert np.ptp(ratio[prompts[kept] >= 100]) < 0.02
    assert (o < 20).mean() > 0.15  # ShareGPT's short answers, which set the per-request mean TPOT
    assert ss.sharegpt_burst(1000, 215_312, 196_205) == pairs  # deterministic
    assert ss.sharegpt_burst(1000, 215_312, 196_205, seed=1) != pairs


def test_bad_sizes_are_refused_with_one_line(ss):
    with pytest.raises(ValueError, match="need n >= 1 and totals >= n"):
        ss.sharegpt_burst(0, 100, 100)
