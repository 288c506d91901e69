"""Issue 21: rollout advantages over ``phase_rule`` (privileged simulator as an estimator), the
regressor that averages them into what the observation predicts, and the richer phase features."""

from __future__ import annotations

import numpy as np
import pytest

from inferencegym.envs.history import HistoryStacker
from inferencegym.envs.phase_detector import PHASE_FEATURE_DIM, phase_feature_dim
from inferencegym.envs.serve_env import LLMServeEnv
from inferencegym.policies import get_policy
from inferencegym.rl.advantage_fit import AdvantageModel, AdvantagePolicy, load_labels
from inferencegym.rl.rollout_labels import GRADE_REWARD, candidate_actions, collect, label_episode

TASK = "adversarial_multitenant"


def test_candidates_are_the_rules_table_completed_to_a_product():
    cands = candidate_actions(TASK)
    rule = get_policy("phase_rule", TASK)
    assert set(rule.by_phase.values()) <= set(cands)
    assert len(cands) == len(set(cands)) == 4  # prefill/decode split x KV budget
    assert {(a.prefill_decode_split, a.kv_budget_fraction) for a in cands} == {
        (s, kv) for s in (False, True) for kv in (0.15, 0.9)}


def test_the_rules_own_candidate_is_worth_what_the_rule_then_earns():
    """With the rule playing the episode, the rollout value of the rule's action at window w is the
    sum of the rewards the real episode pays in windows w .. w + horizon - 1: env copies are exact."""
    horizon, n = 3, 8
    d = label_episode(TASK, 5, horizon=horizon, every=1, episode_windows=n)
    env = LLMServeEnv(TASK, reward_config=GRADE_REWARD, episode_windows=n)
    rule = get_policy("phase_rule", TASK)
    rule.reset(5)
    obs, info = env.reset(seed=5)
    rewards = []
    for _ in range(n):
        obs, r, term, trunc, info = env.step(rule.act(obs, info))
        rewards.append(r)
    assert d["q"].shape == (n, 4) and (d["rule"] >= 0).all()
    for w in range(n):
        assert d["q"][w, d["rule"][w]] == pytest.approx(sum(rewards[w:w + horizon]), rel=1e-9, abs=1e-9)
    assert float(d["score"]) == pytest.approx(env.grade().score, abs=1e-12)


def test_labels_refuse_held_out_seeds_and_files_round_trip(tmp_path):
    with pytest.raises(ValueError, match="training seeds"):
        label_episode(TASK, 1000, episode_windows=4)
    (p,) = collect(TASK, [3], tmp_path, horizon=2, every=2, episode_windows=6)
    d = load_labels([p], TASK)
    assert d["adv"].shape == (3, 4)  # windows 0, 2, 4
    assert np.allclose(d["adv"][np.arange(3), np.load(p)["rule"][::2]], 0.0)
    assert d["x"].shape[1] == 24 * 5 + phase_feature_dim(2)
    assert not list(tmp_path.glob("*.tmp"))


def test_advantage_policy_with_no_predicted_gain_plays_the_rule():
    """A regressor that predicts no advantage anywhere leaves every window to ``phase_rule``."""
    model = AdvantageModel(24 * 5 + phase_feature_dim(2), 4)
    import torch

    with torch.no_grad():
        for p in model.net.parameters():
            p.zero_()
    pol, rule = AdvantagePolicy(TASK, model, margin=0.0), get_policy("phase_rule", TASK)
    env = LLMServeEnv(TASK, episode_windows=40)
    obs, info = env.reset(seed=2)
    pol.reset(2)
    rule.reset(2)
    for _ in range(40):
        a = pol.act(obs, info)
        assert a == rule.act(obs, info)
        obs, _, term, trunc, info = env.step(a)


def test_phase_features_level_2_extend_level_1():
    """Level 2 keeps level 1's three features first and adds the slope, the sine 2 and 4 windows on,
    and the mega-prompt recency; the wrapper stacks the same way."""
    assert phase_feature_dim(1) == PHASE_FEATURE_DIM == 3 and phase_feature_dim(2) == 8
    with pytest.raises(ValueError, match="phase_features"):
        phase_feature_dim(3)
    env = LLMServeEnv(TASK, episode_windows=30)
    obs, info = env.reset(seed=4)
    s1 = HistoryStacker(obs.shape[0], 2, 0.3, TASK, 1)
    s2 = HistoryStacker(obs.shape[0], 2, 0.3, TASK, 2)
    rule = get_policy("phase_rule", TASK)
    for _ in range(25):
        x1, x2 = s1.push(obs), s2.push(obs)
        obs, *_ = env.step(rule.act(obs, info))
    assert x2.shape[0] == s2.out_dim == x1.shape[0] + 5
    assert np.array_equal(x2[:x1.shape[0]], x1)
    cos, s_2, s_4, since, _ = x2[-5:]
    assert -1.0 <= cos <= 1.0 and -1.0 <= s_2 <= 1.0 and -1.0 <= s_4 <= 1.0 and 0.0 <= since <= 1.0
    assert cos ** 2 + x1[-3] ** 2 == pytest.approx(1.0, abs=1e-5)  # the fitted sinusoid's sine and cosine
