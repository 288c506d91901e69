"""The paired statistics every table uses (95 % t half-width, per-seed difference) and the run records."""

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


def test_a_run_record_holds_the_command_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    import json
    import sys

    from inferencegym.evaluation.records import write_run_record

    monkeypatch.setattr(sys, "argv", ["x.py", "--episodes", "2"])
    out = tmp_path / "sub" / "r.json"
    write_run_record(out, "x.py", "bursty_workload", [1000, 1001], [{"variant": "a", "grade": 0.5}])
    rec = json.loads(out.read_text())
    assert rec == {"command": "OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/x.py --episodes 2",
                   "task": "bursty_workload", "seeds": [1000, 1001], "rows": [{"variant": "a", "grade": 0.5}]}
    assert [p.name for p in out.parent.iterdir()] == ["r.json"]
