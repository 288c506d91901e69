"""The shipped ``pretrained:adversarial_multitenant`` decides the mega-prompt guard per spell (issue 21,
ninth session): distilled from the shipped module with a regressor of the spell-level value of dropping
the guard (``benchmarks/issue21_adv_spells.py``), it keeps ``phase_rule``'s guard (KV budget 0.15 after a
mega-prompt in the quiet phase) in most guard windows, drops it in a minority, and grades above the rule
on validation seeds where the measured margin is clear (+0.005 to +0.014). Tenth session: re-distilled
with the rule's prefill/decode split restored in quiet windows (``benchmarks/issue21_adv10_guards.py``)."""

from __future__ import annotations

import pytest

import inferencegym.rl  # noqa: F401  (registers the pretrained: scheme)
from inferencegym.envs.actions import ServeAction
from inferencegym.envs.serve_env import LLMServeEnv
from inferencegym.policies import get_policy
from inferencegym.policies.phase_rule import PhaseRulePolicy

TASK = "adversarial_multitenant"


def _episode(policy, seed: int, shadow: PhaseRulePolicy | None = None) -> tuple[float, int, int]:
    """(grade, the rule's guard windows, windows of them where ``policy`` plays KV 0.9)."""
    env = LLMServeEnv(TASK)
    policy.reset(seed)
    if shadow is not None:
        shadow.reset(seed)
    obs, info = env.reset(seed=seed)
    guard = dropped = 0
    while True:
        a = ServeAction.from_any(policy.act(obs, info))
        if shadow is not None:
            shadow.act(obs, info)
            if shadow.detector.forecast() == "low+mega":
                guard += 1
                dropped += a.kv_budget_fraction > 0.5
        obs, _, term, trunc, info = env.step(a)
        if term or trunc:
            return float(env.grade().score), guard, dropped


@pytest.mark.parametrize("seed", [501, 502, 503])   # validation seeds (500-539), none held out
def test_shipped_adversarial_module_drops_the_guard_in_a_minority_of_windows_and_beats_the_rule(seed):
    module = get_policy(f"pretrained:{TASK}", TASK)
    grade, guard, dropped = _episode(module, seed, shadow=PhaseRulePolicy(TASK))
    rule_grade, _, _ = _episode(PhaseRulePolicy(TASK), seed)
    assert guard >= 40, f"seed {seed} no longer has guard windows to decide ({guard})"
    assert 0.05 * guard <= dropped <= 0.35 * guard, f"the module dropped the guard in {dropped} of {guard} guard windows"
    assert grade > rule_grade + 0.002, f"seed {seed}: module {grade:.4f} vs phase_rule {rule_grade:.4f}"
