"""``tbt_small.int_weight_percentiles`` (one-value records with integer weights: the values split by
weight, sorted and merged, instead of numpy's repeat and partition) gives numpy's inverted-CDF percentiles bit
for bit: ties, runs of equal values, zero weights, +0.0 values, several quantile sets; it declines
what numpy's path must decide (a negative value, -0.0, NaN, a float weight, a negative weight,
all-zero weights), and ``one_value_figures`` without the mean takes it."""

from __future__ import annotations

import numpy as np
import pytest

from inferencegym.sim.metrics import weighted_arith_percentiles
from inferencegym.sim.tbt_small import int_weight_percentiles, one_value_figures

QS = (50, 90, 99)


def _numpy(d0, w, qs):
    m = len(d0)
    arrays = (np.asarray(d0, np.float64), np.zeros(m), np.ones(m), np.asarray(w, np.float64))
    return weighted_arith_percentiles(*arrays, qs)


@pytest.mark.parametrize("seed", range(6))
def test_int_weight_percentiles_are_numpys_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    for _ in range(400):
        m = int(rng.integers(1, 300 if rng.random() < 0.7 else 900))
        # a few gaps divided by accepted counts, in runs (as an iteration's records), some exact ties
        gaps = rng.choice([0.0, 0.013, 0.021, 0.05], m) + rng.random(m) * rng.choice([0.0, 1e-3])
        n = rng.integers(1, 5, m)
        d0 = (gaps / n).tolist()
        w = rng.integers(0 if rng.random() < 0.3 else 1, 10, m).tolist()
        if sum(w) == 0:
            w[0] = 1
        qs = QS if rng.random() < 0.7 else tuple(float(x) for x in rng.uniform(0.5, 100.0, 3))
        got = int_weight_percentiles(d0, w, qs)
        want = _numpy(d0, w, qs)
        assert got is not None and [x.hex() for x in got] == [x.hex() for x in want], (got, want)
        ov = one_value_figures(d0, [0.0] * m, [1] * m, w, qs, False)
        assert ov is not None and ov[0] == got and ov[1] != ov[1]


def test_int_weight_percentiles_decline_what_numpy_decides():
    assert int_weight_percentiles([0.1, -0.0], [1, 1], QS) is None
    assert int_weight_percentiles([0.1, -0.2], [1, 1], QS) is None
    assert int_weight_percentiles([0.1, float("nan")], [1, 1], QS) is None
    assert int_weight_percentiles([0.1, 0.2], [1, 1.0], QS) is None
    assert int_weight_percentiles([0.1, 0.2], [1, -1], QS) is None
    assert int_weight_percentiles([0.1, 0.2], [1, 17], QS) is None  # over MAX_SELECT_WEIGHT
    assert int_weight_percentiles([0.1, 0.2], [0, 0], QS) is None
    assert int_weight_percentiles([0.1, 2], [1, 1], QS) is None  # an int value: numpy's conversion
    assert int_weight_percentiles([0.1, 0.2], [1, 1], (0.0,)) is None  # q outside (0, 100]
    # the declined cases still get numpy's answer through one_value_figures
    for d0, w in (([0.1, float("nan"), 0.3], [1, 2, 3]), ([0.3, 0.1], [0, 0]), ([0.2, 0.1], [1.0, 3.0])):
        got = one_value_figures(d0, [0.0] * len(d0), [1] * len(d0), w, QS, False)
        want = _numpy(d0, w, QS)
        assert got is not None and np.array_equal(got[0], want, equal_nan=True)


def test_the_merge_walk_is_taken_exactly_when_compiled():
    """``tbt_small.COMPILED`` (mypyc's functions are built-ins) follows the compiled core's state."""
    from inferencegym import accel
    from inferencegym.sim import tbt_small

    assert tbt_small.COMPILED == accel.active()
