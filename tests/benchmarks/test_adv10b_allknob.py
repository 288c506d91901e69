"""The tenth session (b)'s all-knob advantage tools (issue 21, ``benchmarks/issue21_adv10b_allknob.py``): the labels
reuse the episode's own rewards as the actor's rollout (exact only if env copies and the actor are deterministic),
and the wrappers that act on them change only what they say."""

from __future__ import annotations

import numpy as np
import pytest

from inferencegym.envs.serve_env import LLMServeEnv
from inferencegym.policies.phase_rule import PhaseRulePolicy
from inferencegym.rl.rollout_labels import rollout_return

TASK = "adversarial_multitenant"


class ZeroModel:
    """A regressor that predicts ``value`` for every candidate."""

    def __init__(self, n: int, value: float):
        self.n, self.value = n, value

    def predict(self, x):
        return np.full((np.atleast_2d(x).shape[0], self.n), self.value, np.float32)


def test_labels_of_the_actors_own_action_equal_a_real_rollout(bench_module):
    ak = bench_module("issue21_adv10b_allknob")
    d = ak.label_episode(PhaseRulePolicy(TASK), seed=101, horizon=5, every=50)
    assert len(d["w"]) == 4 and d["q"].shape == (4, len(ak.CANDS))
    assert not np.isnan(d["q"]).any()
    # the rule's own candidate, filled from the episode's rewards, against a real rollout at window 50
    env, rule = LLMServeEnv(TASK, reward_config=ak.GRADE_REWARD), PhaseRulePolicy(TASK)
    rule.reset(101)
    obs, info = env.reset(seed=101)
    for _ in range(50):
        obs, _, _, _, info = env.step(rule.act(obs, info))
    import copy

    before = copy.deepcopy(rule)
    a = rule.act(obs, info)
    before.act(obs, info)
    q = rollout_return(copy.deepcopy(env), a, before, 5)
    assert d["q"][1, ak.INDEX[a]] == pytest.approx(q, abs=1e-9)
    assert d["act"][1] == ak.INDEX[a]


def test_allknob_policy_switches_only_above_the_margin(bench_module, play_with_rule):
    ak = bench_module("issue21_adv10b_allknob")
    same = play_with_rule(ak.AllKnobPolicy(PhaseRulePolicy(TASK), ZeroModel(len(ak.CANDS), 0.05), margin=0.1), 502, 60)
    assert all(a == ra for _, a, ra in same)
    moved = play_with_rule(ak.AllKnobPolicy(PhaseRulePolicy(TASK), ZeroModel(len(ak.CANDS), 0.2), margin=0.1), 502, 60)
    assert all(a != ra and a in ak.CANDS for _, a, ra in moved)


def test_knob_override_sets_knobs_only_in_the_named_phases(bench_module, play_with_rule):
    ak = bench_module("issue21_adv10b_allknob")
    steps = play_with_rule(ak.KnobOverride(PhaseRulePolicy(TASK), "knob:high/high+mega:speculation_depth=4,batch_cap=128"),
                     seed=503, windows=120)
    high = [(a, ra) for name, a, ra in steps if name.startswith("high")]
    rest = [(a, ra) for name, a, ra in steps if not name.startswith("high")]
    assert high and rest
    assert all(a.speculation_depth == 4 and a.batch_cap == 128 for a, _ in high)
    assert all(a == ra for a, ra in rest)
