"""Generated arrivals never go backwards (regression: fit on a 3-s batched BurstGPT trace, then
``data generate`` failed with 'arrival_s must be non-decreasing; ... 390.0 after 390.0000000000004')."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from inferencegym.workload.fit import fit_workload, generate
from inferencegym.workload.trace import Workload


def _batched_trace(rng: np.random.Generator, *, tick_s: float, ticks: int, mean_per_tick: float) -> Workload:
    """BurstGPT-like: requests logged on a coarse clock, several per tick, bursty counts."""
    counts = rng.negative_binomial(1.0, 1.0 / (1.0 + mean_per_tick), size=ticks)
    arrival = np.repeat(np.arange(ticks) * tick_s, counts).astype(np.float64)
    n = arrival.size
    prompt = rng.lognormal(6.5, 0.9, n).astype(np.int64) + 1
    out = rng.lognormal(5.0, 0.9, n).astype(np.int64) + 1
    return Workload.from_arrays(arrival, prompt, out, 0, 0, source="batched")


def test_fit_then_generate_on_a_3s_batched_trace():
    w = _batched_trace(np.random.default_rng(1), tick_s=3.0, ticks=3000, mean_per_tick=4.0)
    fit = fit_workload(w)
    g = generate(fit, 3600.0, np.random.default_rng(0))   # raised before the fix
    assert g.arrival_s.size > 1000 and np.all(np.diff(g.arrival_s) >= 0)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), tick=st.sampled_from([0.1, 1.0, 3.0, 7.0]),
       mean=st.floats(0.5, 30.0), bin_s=st.sampled_from([1.0, 3.0, 10.0, 0.3]),
       duration=st.floats(1.0, 2000.0))
def test_generated_arrivals_are_non_decreasing_for_any_fit_and_seed(seed, tick, mean, bin_s, duration):
    rng = np.random.default_rng(seed)
    w = _batched_trace(rng, tick_s=tick, ticks=400, mean_per_tick=mean)
    fit = fit_workload(w, bin_s=bin_s)
    g = generate(fit, duration, rng)
    assert np.all(np.diff(g.arrival_s) >= 0) and (g.arrival_s.size == 0 or g.arrival_s[-1] < duration)
