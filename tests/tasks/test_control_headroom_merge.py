"""``benchmarks/control_headroom.py --merge``: runs of one policy over more seeds join into one row
(means and intervals from every episode), and paired differences use only the episodes both
policies ran."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "control_headroom.py"


def _module():
    spec = importlib.util.spec_from_file_location("control_headroom", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def ep(day, seed, score, gh=100.0, slo=0.9):
    return {"day": day, "seed": seed, "score": score, "gpu_hours": gh, "slo_attainment": slo,
            "tier_slo_attainment": {"standard": slo}, "tier_ttft_p90_s": {"standard": 1.0}}


def row(policy, eps):
    return {"policy": policy, "score_mean": float(np.mean([e["score"] for e in eps])), "episodes_detail": eps,
            "tier_slo_attainment": {}, "tier_ttft_p90_s": {}}


def test_runs_of_one_policy_join_and_pairs_use_common_episodes():
    m = _module()
    a1 = row("learned", [ep(12, 1000, 0.90), ep(13, 1001, 0.80)])
    a2 = row("learned", [ep(12, 1002, 0.70), ep(12, 1000, 0.10)])  # a repeated episode is kept once
    b = row("rule", [ep(12, 1000, 0.85), ep(12, 1002, 0.60)])
    rows = m.combine([a1, b, a2])
    learned = next(r for r in rows if r["policy"] == "learned")
    assert [(e["day"], e["seed"]) for e in learned["episodes_detail"]] == [(12, 1000), (13, 1001), (12, 1002)]
    assert learned["episodes"] == 3 and learned["score_mean"] == pytest.approx(0.8)
    assert learned["score_ci95"] > 0
    c = m.paired(learned, next(r for r in rows if r["policy"] == "rule"))
    assert c["episodes"] == 2 and c["score"] == pytest.approx((0.05 + 0.10) / 2)
    assert c["score_wins"] == 2
    with pytest.raises(ValueError, match="share no episode"):
        m.paired(row("x", [ep(12, 1, 0.5)]), row("y", [ep(12, 2, 0.5)]))
