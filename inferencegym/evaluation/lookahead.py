"""``lookahead``: the privileged ceiling of the phased single-agent tasks (issue 21).

A rollout algorithm (Bertsekas' policy improvement by rollout, with several base policies) over the
privileged ``clairvoyant`` table and the best observable rule ``phase_rule``. Each base policy is
played from the first window on an exact copy of the env (``copy.deepcopy`` of ``LLMServeEnv`` copies
the simulator and its Generators, so a copy replays the same future; tested) and the better episode
is the *incumbent*. At every window the candidates are pairs (action now, base policy to the end):

- every candidate action with the incumbent's base: the bases' own actions, the ``clairvoyant``
  table's action for the window after next (switch earlier), the previous window's action (switch
  later) and, with ``table_actions``, every configuration of the bases' per-phase tables (with
  ``table_window`` k: only where the hidden phase changes within k windows, or in the last k);
- each other base with its own action (hand the rest of the episode to it). A switch while both
  bases play the same action is deferred to the first window where they differ, which yields the
  same trajectory, so it costs no rollout.

Each candidate is scored by the *full-horizon* objective: the episode's grade after playing it on
a copy of the env with its base policy (its state copied too) to the end. The best is played, and
its value carried to the next window (only the alternatives cost a rollout). Because the dynamics
are deterministic given the seed and the incumbent is always a candidate, the grade never falls
below any base policy's grade on that seed: the ceiling bounds ``phase_rule`` and the clairvoyant
table by construction. :data:`CEILING` is the configuration the tables report; the defaults
(``phase_rule`` alone, no table actions) are the cheaper teacher of :mod:`inferencegym.rl.distill`.

Privileged twice: it reads the hidden phases and simulates the future. A reference, not a policy an
agent could run; it is an evaluation function (it needs the env), not a registry policy.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

from inferencegym.envs.actions import ServeAction
from inferencegym.envs.serve_env import LLMServeEnv
from inferencegym.evaluation.single import EpisodeResult
from inferencegym.policies import get_policy

CEILING: dict[str, Any] = {"bases": ("phase_rule", "clairvoyant"), "table_actions": True, "table_window": 2}
"""The lookahead reported as the phase tasks' privileged ceiling: both tables as bases, every table
configuration as a candidate action near a change of the hidden phase (within 2 windows; the
rollouts' cost stays bounded: a full-table candidate set at every window costs ~3x more)."""


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


def _near_change(env: LLMServeEnv, k: int) -> bool:
    """Whether the hidden phase changes within ``k`` windows of the one about to be served, or the
    episode ends within ``k`` windows (privileged: reads the phase sequence)."""
    wl, w, n = env._wl, env._step, env.task.episode_windows  # noqa: SLF001
    if w + k >= n - 1:
        return True
    seq = wl.phase[max(0, w - k):w + k + 1]
    return bool((seq != seq[0]).any())


def _table(pols: Sequence[Any]) -> list[ServeAction]:
    """Every configuration of the bases' per-phase tables (and their defaults), in a fixed order."""
    acts: list[ServeAction] = []
    for p in pols:
        acts += [*getattr(p, "by_phase", {}).values(), getattr(p, "default", None)]
    return [a for a in dict.fromkeys(acts) if a is not None]


def lookahead_episode(task_id: str, seed: int, *, bases: Sequence[str] = ("phase_rule",),
                      table_actions: bool = False, table_window: int | None = None, max_rollouts: int = 400,
                      episode_windows: int | None = None,
                      on_step: Callable[[Any, ServeAction, ServeAction], None] | None = None) -> EpisodeResult:
    """One episode of the lookahead reference (module docstring) over the registry policies
    ``bases``; ``max_rollouts`` caps the cost (after it, the incumbent base plays on);
    ``episode_windows`` shortens the episode (tests). ``on_step(obs, played, rule_action)`` is
    called at every window before it is played, with the first base's own action (the teacher's
    label for distillation, :mod:`inferencegym.rl.distill`)."""
    if not bases:
        raise ValueError("lookahead needs at least one base policy, e.g. bases=('phase_rule',)")
    env = LLMServeEnv(task_id, privileged=True, episode_windows=episode_windows)
    clair = get_policy("clairvoyant", task_id)
    pols = [get_policy(b, task_id) for b in bases]
    for p in pols:
        if hasattr(p, "reset"):
            p.reset(seed)
    obs, info = env.reset(seed=seed)
    values = []
    for p in pols:
        probe = copy.deepcopy(p)
        values.append(_finish(copy.deepcopy(env), probe.act(obs, info), probe, obs, info))
    inc = max(range(len(pols)), key=lambda i: (values[i], -i))
    value = values[inc]
    table = _table(pols) if table_actions else []
    prev: ServeAction | None = None
    rollouts, steps, total, deviations = len(pols), 0, 0.0, 0
    while True:
        before = [copy.deepcopy(p) for p in pols]  # each base's state before it reads this window
        acts = [p.act(obs, info) for p in pols]
        extra = table if table_window is None or _near_change(env, table_window) else []
        cands = [(a, inc) for a in dict.fromkeys(
            [*acts, clair.act(obs, info), prev, _next_phase_action(env, clair), *extra])
            if a is not None and a != acts[inc]]
        cands += [(acts[b], b) for b in range(len(pols)) if b != inc and acts[b] != acts[inc]]
        best_a, best_b, best_v = acts[inc], inc, value
        for a, b in cands:
            if rollouts >= max_rollouts:
                break
            rule = copy.deepcopy(before[b])
            rule.act(obs, info)                # it reads the same observation, whatever is played
            v = _finish(copy.deepcopy(env), a, rule, obs, info)
            rollouts += 1
            if v > best_v + 1e-12:
                best_a, best_b, best_v = a, b, v
        inc, value = best_b, best_v
        deviations += best_a != acts[0]
        if on_step is not None:
            on_step(obs, best_a, acts[0])
        obs, reward, term, trunc, info = env.step(best_a)
        prev = best_a
        total += reward
        steps += 1
        if term or trunc:
            break
    g = env.grade()
    return EpisodeResult(seed=seed, score=g.score, breakdown=g.breakdown(),
                         metrics={**env.episode_metrics(), "lookahead/rollouts": rollouts,
                                  "lookahead/deviations": deviations,
                                  **{f"lookahead/base_{b}": v for b, v in zip(bases, values)}},
                         total_reward=total, steps=steps)
