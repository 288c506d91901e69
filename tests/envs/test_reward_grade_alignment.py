"""The ``grade`` reward component: the grader split into windows (inferencegym.envs.reward)."""

from __future__ import annotations

import numpy as np
import pytest

from inferencegym.evaluation.single import evaluate_policy
from inferencegym.envs.reward import REWARD_COMPONENTS, RewardConfig, grade_term
from inferencegym.envs.serve_env import LLMServeEnv, nominal_rates, nominal_weighted_window_tokens
from inferencegym.tasks.spec import get_task

GRADE_ONLY = RewardConfig(**{f"w_{k}": 0.0 for k in REWARD_COMPONENTS} | {"w_grade": 1.0})


def test_grade_term_matches_the_grader_formula_on_one_window():
    g = get_task("adversarial_multitenant").grader
    # 2 tenants, weights 2 and 1; nominal 1000 weighted tokens per window
    r = grade_term(good_tokens=[100.0, 300.0], tenant_weights=[2.0, 1.0], nominal_weighted_tokens=1000.0,
                   window_usd=0.0, quality_delta=0.0, grader=g)
    # (2*100 + 300) / 1000 = 0.5 of the SLO weight, free tokens score full cost, no quality loss
    assert r == pytest.approx(g.w_slo * 0.5 + g.w_cost * 1.0 + g.w_quality * 1.0)
    none = grade_term(good_tokens=[0.0, 0.0], tenant_weights=[2.0, 1.0], nominal_weighted_tokens=1000.0,
                      window_usd=0.01, quality_delta=g.quality_bad_delta, grader=g)
    assert none == 0.0  # nothing good: no SLO share, no cost score; full quality loss


def test_default_reward_does_not_use_the_grade_component():
    assert RewardConfig().w_grade == 0.0
    env = LLMServeEnv("bursty_workload")
    env.reset(seed=3)
    _, _, _, _, info = env.step(env.action_space.sample())
    assert info["reward/grade"] == 0.0  # not computed when its weight is 0


def test_nominal_weighted_tokens_follow_the_spec():
    t = get_task("static_workload")  # one tenant of weight 1, no mega-prompts
    assert nominal_weighted_window_tokens(t) == pytest.approx(nominal_rates(t)[1] * t.window_s)
    t2 = get_task("adversarial_multitenant")
    assert nominal_weighted_window_tokens(t2) > 0


@pytest.mark.parametrize("task", ["bursty_workload", "adversarial_multitenant"])
def test_grade_reward_ranks_policies_as_the_grader_does(task):
    """Per seed, the policy with the higher episode mean of the grade reward has the higher grade
    (random < best_static < clairvoyant on these tasks). On the sinusoidal adversarial task the
    mean also tracks the grade within 0.15; on/off bursts make an episode's realised load differ
    from the nominal one (the reward's denominator), so there only the ranking is asserted."""
    seeds = 2
    rows = {}
    for pol in ("random", "best_static", "clairvoyant"):
        r = evaluate_policy(pol, task, episodes=seeds, seed=1000, reward_config=GRADE_ONLY)
        rows[pol] = ([e.score for e in r.episodes], [e.total_reward / e.steps for e in r.episodes])
    for i in range(seeds):
        by_grade = sorted(rows, key=lambda p: rows[p][0][i])
        by_reward = sorted(rows, key=lambda p: rows[p][1][i])
        assert by_grade == by_reward
    if task == "bursty_workload":
        return
    for grades, means in rows.values():
        assert np.max(np.abs(np.array(grades) - np.array(means))) < 0.15
