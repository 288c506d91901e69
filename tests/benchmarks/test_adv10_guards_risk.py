"""The tenth session's adversarial tools (issue 21): the deviation-class guard that the shipped module was
distilled from (``benchmarks/issue21_adv10_guards.py``) and the observable mega-prompt risk features
(``benchmarks/issue21_adv10_risk.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from inferencegym.envs.serve_env import LLMServeEnv
from inferencegym.policies.phase_rule import PhaseRulePolicy

TASK = "adversarial_multitenant"


class SplitOffModule:
    """A stand-in module: the rule's action with the split turned off and KV 0.15 everywhere."""

    def __init__(self):
        self.rule = PhaseRulePolicy(TASK)

    def reset(self, seed=None):
        self.rule.reset(seed)

    def act(self, obs, info=None):
        return self.rule.act(obs, info).model_copy(update={"prefill_decode_split": False, "kv_budget_fraction": 0.15})


def test_the_ls_guard_restores_the_rules_split_in_quiet_windows_and_nothing_else(bench_module, play_with_rule):
    guards = bench_module("issue21_adv10_guards")
    steps = play_with_rule(guards.KnobGuard(SplitOffModule(), ["ls"]), seed=501, windows=80)
    low = [(a, ra) for name, a, ra in steps if name == "low"]
    other = [(a, ra) for name, a, ra in steps if name != "low"]
    assert low and other
    assert all(a.prefill_decode_split == ra.prefill_decode_split for a, ra in low)
    assert all(a.kv_budget_fraction == 0.15 for a, _ in low + other)   # the module's KV kept
    assert all(not a.prefill_decode_split for a, _ in other)           # the module's split outside `low`
    with pytest.raises(ValueError, match="guard classes"):
        guards.KnobGuard(SplitOffModule(), ["nope"])


def test_risk_features_replayed_from_the_observations_match_the_online_tracker(bench_module):
    risk = bench_module("issue21_adv10_risk")
    env, rule = LLMServeEnv(TASK), PhaseRulePolicy(TASK)
    tracker = risk.RiskTracker(rule.detector)
    rule.reset(7)
    obs, info = env.reset(seed=7)
    traj, online = [np.asarray(obs, np.float32)], []
    for _ in range(120):
        a = rule.act(obs, info)
        tracker.update(obs)
        online.append(tracker.features())
        obs, _, term, trunc, info = env.step(a)
        traj.append(np.asarray(obs, np.float32))
    f2, fr = risk.replay_features(np.stack(traj), np.arange(120))
    np.testing.assert_allclose(fr, np.stack(online), atol=1e-6)
    p_low = fr[:, :risk.N_AHEAD]
    assert np.all((p_low >= 0) & (p_low <= 1))
    assert fr[-1, risk.N_AHEAD + 1] < 0.05          # after 120 windows the phase posterior is sharp
    assert tracker.megas, "seed 7 should show mega-prompts in 120 windows"
    # every window that held a mega-prompt is, by the posterior, in the low half of the sinusoid
    d = rule.detector
    lp = d._loglik + tracker.pen
    phi = risk.PHI_GRID[int(np.argmax(lp))]
    s = np.sin(d._omega * (np.asarray(tracker.megas) + 0.5) * d.window_s + phi)
    assert np.all(s <= 0.2)
