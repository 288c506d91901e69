"""The shipped ``pretrained:bursty_workload`` plays the improved ``phase_rule`` (issue 21, eighth session):
it is re-exported from a clone of the rule *with* its backlog hold, so on the rule's own episodes it
keeps the burst's configuration wherever the rule holds it while a burst's queue drains (the module
shipped before, a clone of the rule without the hold, switched off there)."""

from __future__ import annotations

import pytest

import inferencegym.rl  # noqa: F401  (registers the pretrained: scheme)
from inferencegym.envs.actions import ServeAction
from inferencegym.envs.serve_env import LLMServeEnv
from inferencegym.policies import get_policy
from inferencegym.policies.phase_rule import PhaseRulePolicy

TASK = "bursty_workload"


@pytest.mark.parametrize("seed", [500, 508])   # validation seeds whose bursts leave a backlog (2 and 8 held windows)
def test_shipped_bursty_module_plays_the_rule_with_its_backlog_hold(seed):
    env = LLMServeEnv(TASK)
    rule = PhaseRulePolicy(TASK)
    module = get_policy(f"pretrained:{TASK}", TASK)
    rule.reset(seed)
    module.reset(seed)
    obs, info = env.reset(seed=seed)
    windows = held = held_same = differ = 0
    while True:
        a = rule.act(obs, info)
        b = ServeAction.from_any(module.act(obs, info))
        windows += 1
        differ += a != b
        if rule.detector.forecast() == "off" and a == rule.by_phase["on"]:   # the backlog hold at work
            held += 1
            held_same += a == b
        obs, _, term, trunc, info = env.step(a)
        if term or trunc:
            break
    assert held >= 2, f"seed {seed} no longer exercises the backlog hold ({held} held windows)"
    assert held_same == held, f"the module left the burst's configuration in {held - held_same} of {held} held windows"
    assert differ <= 0.01 * windows, f"the module differs from phase_rule on {differ} of {windows} windows"
