"""``lookahead``: the privileged ceiling of the phased single-agent tasks (issue 21).

A rollout algorithm (Bertsekas' policy improvement by rollout) whose base policy is the best
observable rule, ``phase_rule``, improved with the hidden phase sequence: at every window the
candidates are the rule's action (the base), the ``clairvoyant`` table's action for the true phase of
this window, the action of the previous window (switch later) and the clairvoyant's action for the
window after next (switch earlier). Each distinct candidate is scored by the *full-horizon*
objective: the env and the rule are copied (``copy.deepcopy`` of ``LLMServeEnv`` is exact: the
simulator and its Generators are copied, so a copy replays the same future; tested), the candidate is
applied for this window and the rule to the end of the episode, and the episode's grade is the
value. The best candidate is played. Because the dynamics are deterministic given the seed and the
base continuation is always a candidate, the grade never falls below ``phase_rule``'s on any seed,
so it bounds the best observable rule by construction (the base value is carried from window to
window, so only the alternatives cost a rollout).

Privileged twice: it reads the hidden phases and simulates the future. A reference, not a policy an
agent could run; it is an evaluation function (it needs the env), not a registry policy.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from inferencegym.envs.actions import ServeAction
from inferencegym.envs.serve_env import LLMServeEnv
from inferencegym.evaluation.single import EpisodeResult
from inferencegym.policies import get_policy


def _finish(env: LLMServeEnv, first: ServeAction, base: Any, obs: Any, info: dict) -> float:
    """Grade of playing ``first`` now and ``base`` to the end on ``env`` (both consumed: pass copies)."""
    a = first
    while True:
        obs, _, term, trunc, info = env.step(a)
        if term or trunc:
            return float(env.grade().score)
        a = base.act(obs, info)


def _next_phase_action(env: LLMServeEnv, base: Any) -> ServeAction | None:
    """The base table's action for the window after the next one (hidden phase sequence)."""
    wl, w = env._wl, env._step  # noqa: SLF001 (privileged reference: reads the hidden phases)
    if w + 1 >= env.task.episode_windows:
        return None
    name = wl.phase_names[int(wl.phase[w + 1])]
    return base.by_phase.get(name, base.default)


def lookahead_episode(task_id: str, seed: int, *, max_rollouts: int = 400,
                      on_step: Callable[[Any, ServeAction, ServeAction], None] | None = None) -> EpisodeResult:
    """One episode of the lookahead reference (module docstring); ``max_rollouts`` caps the cost
    (after it, the base policy plays on). ``on_step(obs, played, base_action)`` is called at every
    window before it is played (the teacher's label for distillation, :mod:`inferencegym.rl.distill`)."""
    env = LLMServeEnv(task_id, privileged=True)
    clair = get_policy("clairvoyant", task_id)
    base = get_policy("phase_rule", task_id)
    base.reset(seed)
    obs, info = env.reset(seed=seed)
    probe = copy.deepcopy(base)
    base_value = _finish(copy.deepcopy(env), probe.act(obs, info), probe, obs, info)
    prev: ServeAction | None = None
    rollouts, steps, total = 1, 0, 0.0
    while True:
        before = copy.deepcopy(base)       # the rule's state before it reads this observation
        a_base = base.act(obs, info)
        cands = [clair.act(obs, info), prev, _next_phase_action(env, clair)]
        best_a, best_v = a_base, base_value
        for c in dict.fromkeys(c for c in cands if c is not None and c != a_base):
            if rollouts >= max_rollouts:
                break
            rule = copy.deepcopy(before)
            rule.act(obs, info)            # it reads the same observation, whatever is played
            v = _finish(copy.deepcopy(env), c, rule, obs, info)
            rollouts += 1
            if v > best_v + 1e-12:
                best_a, best_v = c, v
        base_value = best_v
        if on_step is not None:
            on_step(obs, best_a, a_base)
        obs, reward, term, trunc, info = env.step(best_a)
        prev = best_a
        total += reward
        steps += 1
        if term or trunc:
            break
    g = env.grade()
    return EpisodeResult(seed=seed, score=g.score, breakdown=g.breakdown(),
                         metrics={**env.episode_metrics(), "lookahead/rollouts": rollouts},
                         total_reward=total, steps=steps)
