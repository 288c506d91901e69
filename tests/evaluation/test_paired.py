"""The paired statistics every table uses: the 95 % t half-width and the per-seed difference summary."""

from __future__ import annotations

import math

import pytest

from inferencegym.evaluation import cluster, control
from inferencegym.evaluation.paired import ci95, paired_difference


def test_ci95_is_the_t_half_width_of_the_finite_values():
    # mean 2, sample sd 1, n 3: t(0.975, 2) = 4.302653 -> 4.302653 / sqrt(3)
    assert ci95([1.0, 2.0, 3.0, math.nan]) == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert ci95([5.0]) == 0.0 and ci95([]) == 0.0


def test_cluster_and_control_tables_share_the_one_ci95():
    assert cluster.ci95 is ci95 and control.ci95 is ci95


def test_paired_difference_counts_seeds_beyond_the_tolerance():
    q = paired_difference([0.9, 0.8, 0.85, 0.5], [0.88, 0.81, 0.80, 0.5])
    assert q["mean"] == pytest.approx((0.02 - 0.01 + 0.05 + 0.0) / 4)
    assert (q["better"], q["worse"]) == (2, 1)
    assert q["ci95"] == pytest.approx(ci95([0.02, -0.01, 0.05, 0.0]), abs=1e-12)
    assert paired_difference([1.0 + 1e-15], [1.0], tol=1e-12)["better"] == 0
