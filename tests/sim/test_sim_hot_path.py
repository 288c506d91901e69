"""The hot path's shortcuts give what the plain computation gives (issue 24 speed work).

- window TBT percentiles of one-value records (a speculative step's records) skip the expansion;
  the result is the inverted-CDF percentile of the records, the input value selected exactly;
- a replica's recent-value window (``RecentValues``) answers its p90 from a cache checked at the
  read; after any sequence of appends it equals the p90 of the values held.
"""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from inferencegym.sim.metrics import weighted_arith_percentiles
from inferencegym.sim.recent import RecentValues, p90


def _inverted_cdf(values: list[float], weights: list[int], q: float) -> float:
    """The smallest value whose cumulative weight (values in ascending order) reaches q % of the total."""
    pairs = sorted(zip(values, weights), key=lambda p: p[0])
    total = float(sum(weights))
    target = total * q / 100.0
    acc = 0.0
    for v, w in pairs:
        acc += w
        if acc >= target:
            return v
    return pairs[-1][0]


@pytest.mark.parametrize("seed", range(40))
def test_one_value_records_give_the_inverted_cdf_percentiles(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 400))
    d0 = np.round(rng.random(m) * 0.05, int(rng.integers(2, 6)))  # ties on purpose
    w = rng.integers(1, 6, m).astype(float)
    qs = (50.0, 90.0, 99.0)
    got = weighted_arith_percentiles(d0, np.zeros(m), np.ones(m), w, qs)
    want = [_inverted_cdf(d0.tolist(), w.astype(int).tolist(), q) for q in qs]
    assert got == want  # a selected input value: exact


def test_one_value_records_agree_with_the_expanded_form():
    # the same multiset written as one-value records and as arithmetic runs (n > 1, step 0)
    rng = np.random.default_rng(7)
    vals = np.round(rng.random(50), 3)
    ones = weighted_arith_percentiles(np.repeat(vals, 3), np.zeros(150), np.ones(150), np.full(150, 2.0),
                                      (50, 90, 99))
    runs = weighted_arith_percentiles(vals, np.zeros(50), np.full(50, 3.0), np.full(50, 2.0), (50, 90, 99))
    assert ones == runs


@pytest.mark.parametrize("maxlen", [1, 2, 5, 32])
def test_recent_values_p90_follows_every_append(maxlen):
    rnd = random.Random(maxlen)
    rv = RecentValues(maxlen=maxlen)
    assert rv.p90() == 0.0
    for _ in range(400):
        rv.append(rnd.choice([0.25, 0.5, 1.0]) * rnd.choice([1.0, 2.0]) + rnd.random() * rnd.choice([0.0, 1e-3]))
        if rnd.random() < 0.4:
            assert rv.p90() == p90(list(rv))
            assert rv.p90() == p90(list(rv))  # the cached answer


def test_window_mean_of_one_replica_is_numpys():
    from inferencegym.sim.window_metrics import _mean

    rng = np.random.default_rng(3)
    for _ in range(1000):
        xs = rng.random(int(rng.integers(1, 5))).tolist()
        assert _mean(xs) == float(np.mean(xs))


def test_window_mean_of_a_few_replicas_is_numpys_bit_for_bit():
    """Below numpy's 8-wide pairwise blocks the in-order sum is numpy's: any length 1..12, values
    of every magnitude (the short path is taken for 2..7 values, numpy for the rest)."""
    from inferencegym.sim.window_metrics import _mean

    rng = np.random.default_rng(11)
    for _ in range(20_000):
        n = int(rng.integers(1, 13))
        xs = (rng.random(n) * rng.choice([1e-6, 1.0, 1e3, 1e12])).tolist()
        assert _mean(xs) == float(np.mean(xs)), xs


def test_knob_diff_skips_configs_already_in_force_and_no_other():
    """``changed_configs`` skips building a config when every knob is already in force with the
    same type; its answer equals the full diff (replace every config, keep those that differ) for
    equal knobs, changed knobs, equal values of another type and bad values (the same error)."""
    import dataclasses

    from inferencegym.sim.config import ReplicaConfig
    from inferencegym.sim.knobs import changed_configs
    from inferencegym.sim.names import check_replica_names

    def full_diff(current, knobs):
        out = []
        for i, cur in current:
            new = dataclasses.replace(cur, **knobs)
            check_replica_names(new)
            out.append((i, cur, new))
        return [(i, c, n) for i, c, n in out if n != c]

    cur = [(0, ReplicaConfig(batch_cap=64)), (1, ReplicaConfig(batch_cap=128, speculation_depth=2))]
    cases = [{}, {"batch_cap": 64}, {"batch_cap": 128, "speculation_depth": 2}, {"batch_cap": 64.0},
             {"kv_budget_fraction": 0.9}, {"kv_budget_fraction": 0.5}, {"scheduler": "sarathi"},
             {"batch_cap": 64, "kv_budget_fraction": 0.9, "speculation_depth": 0, "quantization": "fp16"},
             {"batch_cap": -1}, {"scheduler": "nope"}]
    for knobs in cases:
        try:
            want = full_diff(cur, knobs)
        except ValueError as e:
            with pytest.raises(ValueError, match=re.escape(str(e))):
                changed_configs(cur, knobs)
            continue
        got = changed_configs(cur, knobs)
        assert [(i, c, n) for i, c, n in got] == want, knobs


def _random_records(rng, n_rec):
    d0 = [float(x) for x in rng.choice([0.01, 0.02, 0.025], n_rec) + rng.random(n_rec) * rng.choice([0.0, 1e-3])]
    step = [float(x) for x in rng.choice([0.0, 1e-5, 3e-6], n_rec)]
    n = [int(x) for x in rng.integers(1, 20, n_rec)]
    w = [x if rng.random() < 0.5 else float(x) for x in rng.integers(1, 9, n_rec).tolist()]
    return d0, step, n, w


def test_small_window_tbt_figures_are_numpys_bit_for_bit():
    """The plain-Python TBT percentiles and mean of small windows (``sim/tbt_small.py``) equal
    numpy's expansion path and ``_arith_mean`` exactly, ties and int weights included; outside
    their range they decline (None) and numpy decides."""
    from inferencegym.sim.metrics import TBTRecorder
    from inferencegym.sim.tbt_small import MAX_VALUES, small_mean, small_percentiles
    from inferencegym.sim.window_metrics import _arith_mean

    rng = np.random.default_rng(5)
    qs = (50, 90, 99)
    used_p = used_m = 0
    for _ in range(4000):
        d0, step, n, w = _random_records(rng, int(rng.integers(1, 10)))
        rec = TBTRecorder()
        for x in zip(d0, step, n, w):
            rec.add(*x)
        arrays = rec.arrays()
        p = small_percentiles(rec.d0, rec.step, rec.n, rec.w, qs)
        if sum(n) > MAX_VALUES:
            assert p is None
        else:
            used_p += 1
            assert p == weighted_arith_percentiles(*arrays, qs), (d0, step, n, w)
        m = small_mean(rec.d0, rec.step, rec.n, rec.w)
        used_m += 1
        assert m == _arith_mean(*arrays), (d0, step, n, w)
    assert used_p > 1000 and used_m == 4000
    for n_rec in [8, 15, 16, 63, 64, 65] + rng.integers(8, 65, 300).tolist():  # (numpy's 8-wide blocks)
        d0, step, n, w = _random_records(rng, n_rec)
        rec = TBTRecorder()
        for x in zip(d0, step, n, w):
            rec.add(*x)
        m = small_mean(rec.d0, rec.step, rec.n, rec.w)
        assert m is None if n_rec > 64 else m == _arith_mean(*rec.arrays())
    assert small_percentiles([0.1, float("nan")], [0.0, 0.0], [1, 1], [1, 1], qs) is None
    assert small_percentiles([], [], [], [], qs) is None and small_mean([], [], [], []) is None



def test_one_value_window_figures_are_numpys_bit_for_bit():
    """Windows of one-value records (speculative steps): ``one_value_figures`` gives the numpy
    paths' percentiles and mean exactly (ties, int and float weights, zero gaps); it declines mixed
    records and a -0.0 value."""
    from inferencegym.sim.metrics import TBTRecorder
    from inferencegym.sim.tbt_small import one_value_figures
    from inferencegym.sim.window_metrics import _arith_mean

    rng = np.random.default_rng(9)
    qs = (50, 90, 99)
    for _ in range(1500):
        m = int(rng.integers(1, 400))
        rec = TBTRecorder()
        vals = rng.choice([0.0, 0.01, 0.02], m) + rng.random(m) * rng.choice([0.0, 1e-3])
        for v, k in zip(vals.tolist(), rng.integers(1, 5, m).tolist()):
            rec.d0.append(v)
            rec.step.append(0.0)
            rec.n.append(1)
            rec.w.append(k if rng.random() < 0.5 else float(k))
        got = one_value_figures(rec.d0, rec.step, rec.n, rec.w, qs)
        arrays = rec.arrays()
        assert got == (weighted_arith_percentiles(*arrays, qs), _arith_mean(*arrays))
    for _ in range(1500):  # integer weights only (speculative windows): the repeat-and-sort path
        m = int(rng.integers(1, 600))
        rec = TBTRecorder()
        vals = rng.choice([0.0, 0.01, 0.02], m) + rng.random(m) * rng.choice([0.0, 1e-3])
        if rng.random() < 0.05:
            vals[int(rng.integers(0, m))] = np.nan
        for v, k in zip(vals.tolist(), rng.integers(0 if rng.random() < 0.3 else 1, 10, m).tolist()):
            rec.d0.append(v)
            rec.step.append(0.0)
            rec.n.append(1)
            rec.w.append(k)
        got = one_value_figures(rec.d0, rec.step, rec.n, rec.w, qs)
        arrays = rec.arrays()
        want = (weighted_arith_percentiles(*arrays, qs), _arith_mean(*arrays))
        assert np.array_equal(got[0], want[0], equal_nan=True), (got, want)
        assert got[1] == want[1] or (got[1] != got[1] and want[1] != want[1])
        pct_only = one_value_figures(rec.d0, rec.step, rec.n, rec.w, qs, False)
        assert np.array_equal(pct_only[0], want[0], equal_nan=True) and pct_only[1] != pct_only[1]
    assert one_value_figures([0.1, 0.2], [0.0, 1e-3], [1, 1], [1, 1], qs) is None
    assert one_value_figures([0.1, 0.2], [0.0, float("nan")], [1, 1], [1, 1], qs) is None
    assert one_value_figures([0.1, 0.2], [0.0, 0.0], [1, 2], [1, 1], qs) is None
    assert one_value_figures([-0.0, 0.2], [0.0, 0.0], [1, 1], [1, 1], qs) is None
    for w in ([1, 3], [1.0, 3.0]):  # a -0.0 step counts as 0.0 (as numpy's ``step == 0``)
        rec_args = ([0.2, 0.1], [-0.0, 0.0], [1, 1], w)
        arrays = tuple(np.asarray(a, dtype=np.float64) for a in rec_args)
        assert one_value_figures(*rec_args, qs) == (weighted_arith_percentiles(*arrays, qs),
                                                    _arith_mean(*arrays))


def test_np_sum_is_numpys_float64_sum_bit_for_bit():
    """``tbt_small.np_sum`` (numpy's pairwise summation, written out) equals ``ndarray.sum()`` for
    lengths 0..700 (in-order below 8, eight partial sums to 128, halves above), magnitudes from
    1e-3 to 1e15, signed zeros (a sum of -0.0s is 0.0), infinities and NaN."""
    from inferencegym.sim.tbt_small import np_sum

    rng = np.random.default_rng(1)
    for t in range(6000):
        n = int(rng.integers(0, 700))
        a = (rng.standard_normal(n) * rng.choice([1e-3, 1.0, 1e6, 1e15], n)).tolist()
        if t % 7 == 0 and n:
            a[int(rng.integers(0, n))] = -0.0
        if t % 11 == 0:
            a = [-0.0] * n
        if t % 13 == 0 and n > 2:
            a[1], a[2] = float("inf"), (float("-inf") if t % 2 else 5.0)
        with np.errstate(invalid="ignore"):
            want = float(np.asarray(a, np.float64).sum())
        got = np_sum(a)
        assert (got == want and np.signbit(got) == np.signbit(want)) or (got != got and want != want), (n, t)


def test_window_percentiles_of_short_lists_are_numpys():
    """``tbt_small.pct`` (plain Python up to 64 values, memoised ranks per length) equals
    ``np.percentile``'s linear method for lengths 0..80, ties, and other quantile sets."""
    from inferencegym.sim.tbt_small import pct

    rng = np.random.default_rng(4)
    for qs in ((50, 90, 99), (10, 50), (0, 100, 37.5)):
        for _ in range(1500):
            n = int(rng.integers(0, 81))
            xs = (rng.choice([0.1, 0.2, 0.3], n) + rng.random(n) * rng.choice([0.0, 1.0])).tolist()
            want = [float(v) for v in np.percentile(np.asarray(xs, float), qs)] if n else [float("nan")] * len(qs)
            got = pct(xs, qs)
            assert np.array_equal(np.array(got), np.array(want), equal_nan=True), (xs, qs)
