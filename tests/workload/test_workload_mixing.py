"""Jitter, mega-prompts, tenant mixing, statistics and spike detection."""

from __future__ import annotations

import numpy as np
import pytest

from inferencegym.workload import Workload, load_trace
from inferencegym.workload.adversarial import inject_mega_prompts, jitter, mega_prompt_mask
from inferencegym.workload.stats import compare, detect_spikes, trace_stats
from inferencegym.workload.tenants import Tenant, TenantMix


def _w(times, p=100, o=10):
    n = len(times)
    return Workload.from_arrays(times, np.full(n, p), np.full(n, o))


def test_jitter_sorted_count_and_sigma():
    w = _w(np.arange(0, 10000, 10.0))
    j = jitter(w, 2.0, np.random.default_rng(0))
    assert len(j) == len(w) and np.all(np.diff(j.arrival_s) >= 0) and j.arrival_s.min() >= 0
    moved = np.sort(j.arrival_s) - w.arrival_s  # spacing 10 s >> sigma: order is kept
    assert moved[1:].std() == pytest.approx(2.0, rel=0.1)
    assert jitter(w, 0.0, np.random.default_rng(0)) is w
    with pytest.raises(ValueError, match="sigma_s"):
        jitter(w, -1.0, np.random.default_rng(0))


def test_small_jitter_keeps_burst_statistics(reference_dir):
    w = load_trace(reference_dir / "traces/azure_llm_2023/AzureLLMInferenceTrace_code.csv", format="azure")
    s0 = trace_stats(w)
    s1 = trace_stats(jitter(w, 1.0, np.random.default_rng(0)))
    assert s1["peak_to_mean_10s"] == pytest.approx(s0["peak_to_mean_10s"], rel=0.1)
    assert s1["spike_frac_10s_2x"] == pytest.approx(s0["spike_frac_10s_2x"], abs=0.03)
    s2 = trace_stats(jitter(w, 30.0, np.random.default_rng(0)))
    assert s2["peak_to_mean_10s"] < 0.7 * s0["peak_to_mean_10s"]  # large sigma smears bursts


def test_mega_prompts_periodic_and_random():
    w = _w(np.linspace(0, 999, 500))
    m = inject_mega_prompts(w, prompt_tokens=50000, every_s=100.0, rng=np.random.default_rng(0))
    mask = mega_prompt_mask(m, 50000)
    assert mask.sum() == 9 and list(m.arrival_s[mask]) == [100.0 * k for k in range(1, 10)]
    assert len(m) == 509 and np.all(np.diff(m.arrival_s) >= 0)
    r = inject_mega_prompts(w, prompt_tokens=50000, every_s=10.0, rng=np.random.default_rng(1), mode="random",
                            duration_s=10000.0, priority=1)
    k = mega_prompt_mask(r, 50000).sum()
    assert k == pytest.approx(1000, rel=0.1) and set(r.priority[mega_prompt_mask(r, 50000)]) == {1}
    with pytest.raises(ValueError, match="mode"):
        inject_mega_prompts(w, prompt_tokens=10, every_s=1.0, rng=np.random.default_rng(0), mode="sometimes")


def test_tenant_mix_independent_streams_and_labels():
    chat = Tenant(name="chat", fit="azure_conv", priority=1, slo_ttft_s=1.0)
    batch = Tenant(name="batch", arrival={"kind": "poisson", "rate_per_s": 2.0},
                   lengths={"kind": "lognormal", "prompt_mu": 7.0, "prompt_sigma": 0.5,
                            "output_mu": 6.0, "output_sigma": 0.5})
    two = TenantMix(tenants=(chat, batch)).generate(1200.0, np.random.default_rng(0))
    three = TenantMix(tenants=(chat, batch, Tenant(name="code", fit="azure_code", rate_scale=0.5))
                      ).generate(1200.0, np.random.default_rng(0))
    for t in (0, 1):  # adding a tenant does not change the others' traffic
        np.testing.assert_array_equal(two.arrival_s[two.tenant == t], three.arrival_s[three.tenant == t])
    assert set(two.priority[two.tenant == 0]) == {1} and set(two.priority[two.tenant == 1]) == {0}
    assert (three.tenant == 1).sum() / 1200 == pytest.approx(2.0, rel=0.15)
    assert (three.tenant == 2).sum() / 1200 == pytest.approx(2.567 * 0.5, rel=0.35)  # bursty: loose
    slos = TenantMix(tenants=(chat, batch)).slos()
    assert slos[0]["slo_ttft_s"] == 1.0 and slos[1]["name"] == "batch"
    with pytest.raises(ValueError, match="give either fit or both"):
        Tenant(name="x")


def test_spike_detection_finds_injected_bursts():
    rng = np.random.default_rng(0)
    base = np.sort(rng.uniform(0, 1000, 1000))  # ~10 per 10 s
    burst1 = rng.uniform(200, 210, 200)
    burst2 = rng.uniform(600, 620, 300)
    w = _w(np.concatenate([base, burst1, burst2]))
    spikes = detect_spikes(w)
    assert len(spikes) == 2
    assert spikes[0].start_s == pytest.approx(w.arrival_s[0] + 200, abs=10)
    assert spikes[1].end_s - spikes[1].start_s in (20.0, 30.0)
    assert spikes[0].peak_rate_per_s > 15 and spikes[0].requests >= 150  # bins start at the first arrival
    assert detect_spikes(_w(np.arange(0, 1000, 0.5))) == []
    local = detect_spikes(w, local_window_s=600)
    assert len(local) >= 2


def test_compare_identical_and_different():
    rng = np.random.default_rng(0)
    a = Workload.from_arrays(np.sort(rng.uniform(0, 600, 3000)), rng.integers(1, 4000, 3000),
                             rng.integers(1, 500, 3000))
    r = compare(a, a)
    assert r["ks"]["iat_s"]["statistic"] == 0 and r["ks"]["prompt_tokens"]["pvalue"] == 1.0
    assert all(v == 0 for v in r["rel_diff"].values())
    b = Workload.from_arrays(a.arrival_s * 2, a.prompt_tokens * 2, a.output_tokens)
    r = compare(a, b)
    assert r["rel_diff"]["rate_mean_per_s"] == pytest.approx(-0.5, rel=1e-3)
    assert r["ks"]["prompt_tokens"]["pvalue"] < 1e-6
