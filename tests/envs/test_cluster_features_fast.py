"""The router's feature matrix without numpy's small calls (``envs/cluster_features.py``): the
rewritten steps give the floats the vectorised form gave. The whole matrix is also covered, bit for
bit, by the behaviour digest's ``cluster/*`` entries (every observation of every cluster task)."""

from __future__ import annotations

import numpy as np


def test_router_feature_clip_before_float32_rounding_is_the_clip_after():
    """``envs/cluster_features.RouterFeatures.replicas`` clips the float64 values to +-100 and then
    rounds to float32; the vectorised form rounded first and clipped after: equal for values
    around the bounds, far outside, infinite and NaN (kept)."""
    from array import array

    c = 100.0
    rng = np.random.default_rng(2)
    vals = (rng.standard_normal(20_000) * rng.choice([1.0, 50.0, 100.0, 1e6], 20_000)).tolist()
    vals += [c, -c, np.nextafter(c, 200.0), np.nextafter(-c, -200.0), c + 3e-6, -c - 3e-6,
             np.inf, -np.inf, np.nan, -0.0]
    want = np.clip(np.asarray(vals, np.float64).astype(np.float32), -c, c)
    got = np.frombuffer(array("f", [(c if v > c else (-c if v < -c else v)) for v in vals]), dtype=np.float32)
    assert np.array_equal(got, want, equal_nan=True)
