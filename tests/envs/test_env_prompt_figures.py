"""The env's per-window prompt figures (mean and median prompt tokens of the window's arrivals) are
numpy's mean and median, computed without numpy's reduction set-up for short integer arrays."""

from __future__ import annotations

import numpy as np
import pytest

from inferencegym.envs.serve_env import _int_mean, _int_median


@pytest.mark.parametrize("seed", range(20))
def test_prompt_mean_and_median_equal_numpys(seed):
    rng = np.random.default_rng(seed)
    for size in (1, 2, 3, 8, 9, 64):
        a = rng.integers(1, 131_072, size)
        assert _int_mean(a) == float(a.mean())  # exact integer sum, one division: the same float
        assert _int_median(a) == float(np.median(a))


def test_float_prompts_fall_back_to_numpy():
    a = np.array([1.5, 2.25, 10.0])
    assert _int_mean(a) == float(a.mean())
    assert _int_median(a) == float(np.median(a))
