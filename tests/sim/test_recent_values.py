"""A replica's recent-value window (``sim/recent.py``, compiled with the simulator core) answers its
p90 from a cache checked at the read, through the method and through ``recent_p90`` (what the
router features call): after any sequence of appends, ``clear``s and deep copies it equals the
plain computation (``p90(list(window))``) bit for bit."""

from __future__ import annotations

import copy
import random

import pytest

from inferencegym.sim.recent import RecentValues, p90, recent_p90


@pytest.mark.parametrize("maxlen", [1, 2, 3, 32])
@pytest.mark.parametrize("seed", range(3))
def test_p90_after_any_appends_equals_the_sorted_window(maxlen, seed):
    rnd = random.Random(1000 * maxlen + seed)
    rv = RecentValues(maxlen=maxlen)
    assert rv.p90() == recent_p90(rv) == 0.0
    for _ in range(2000):
        for _ in range(rnd.choice([1, 1, 2, 3, 40])):
            # ties on purpose (equal values, distinct objects)
            rv.append(rnd.choice([0.25, 0.5, 1.0, -0.5]) * rnd.choice([1.0, 2.0]) + rnd.random() * rnd.choice([0.0, 1e-3]))
        if rnd.random() < 0.02:
            rv.clear()
        if rnd.random() < 0.02:
            rv = copy.deepcopy(rv)
        want = p90(list(rv))
        assert (rv.p90() if rnd.random() < 0.5 else recent_p90(rv)) == want
        assert recent_p90(rv) == rv.p90() == want  # the cached answer


def test_a_window_rebuilt_with_the_same_length_is_read_again():
    rv = RecentValues([0.3 + 0.0, 0.1 + 0.0, 0.2 + 0.0], maxlen=3)
    assert recent_p90(rv) == p90([0.3, 0.1, 0.2])
    rv.clear()
    rv.extend([5.0 + 0.0, 1.0 + 0.0, 3.0 + 0.0])
    assert recent_p90(rv) == p90([5.0, 1.0, 3.0])
