"""The phase tasks' privileged ceiling (issue 21): the clairvoyant table and ``phase_rule`` improved by
full-horizon rollouts on env copies never grade below either base on the same seed."""

from __future__ import annotations

import pytest

from inferencegym.evaluation.lookahead import CEILING, lookahead_episode
from inferencegym.evaluation.single import evaluate_policy


@pytest.mark.parametrize("task_id,seed", [("adversarial_multitenant", 3), ("bursty_workload", 5)])
def test_the_ceiling_never_grades_below_its_base_tables_on_a_short_episode(task_id, seed):
    windows = 24
    bases = {b: evaluate_policy(b, task_id, episodes=1, seed=seed, episode_windows=windows).episodes[0].score
             for b in CEILING["bases"]}
    ep = lookahead_episode(task_id, seed, episode_windows=windows, **CEILING)
    assert ep.steps == windows
    # each base's own episode is recorded, and equals the plain evaluation of that policy (exact copies)
    for b, score in bases.items():
        assert ep.metrics[f"lookahead/base_{b}"] == pytest.approx(score, abs=1e-12)
    assert ep.score >= max(bases.values()) - 1e-12
    assert ep.metrics["lookahead/rollouts"] > len(bases)  # it did try alternatives


def test_the_lookahead_needs_a_base():
    with pytest.raises(ValueError, match="at least one base"):
        lookahead_episode("bursty_workload", 0, bases=(), episode_windows=3)
