"""DAgger (Ross, Gordon & Bagnell 2011): the teacher relabels the states the student visits.

Behaviour cloning trains on the teacher's state distribution; the student, once it errs, reaches
states the teacher never showed it and compounds its errors there. DAgger rolls out the student
(optionally mixed with the teacher), asks the teacher what it would have done in every visited
state, adds those (state, teacher action) pairs to the data and trains again. The round loop lives
in :func:`inferencegym.rl.bc.warm_start` (``bc.dagger_rounds``); this module collects one round.

The teacher sees the same state as the student: the rollout env is the one BC collects on (built
with ``privileged=True`` for a privileged teacher such as ``clairvoyant``, which reads
``info["oracle/*"]``; the privileged env adds info keys only, its observations are the student's).
The student acts on its own observation, the history-stacked one when the module uses history
(``envs.history.HistoryObservation`` wraps the same env), exactly what the teacher is given too,
as in BC collection (the current window comes first in the stack, so observation-reading teachers
such as ``heuristic`` read the same features).

Randomness (the beta mixture, a sampling student) comes only from the numpy Generator passed in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np


@dataclass(frozen=True)
class RelabelledRollout:
    """One DAgger round's data, one entry per visited state."""

    obs: list[Any] = field(default_factory=list)
    """the student's observation of each visited state (what the student is trained on)"""
    labels: list[np.ndarray] = field(default_factory=list)
    """the teacher's flat action in that state (the training target)"""
    executed: list[np.ndarray] = field(default_factory=list)
    """the flat action actually taken (the student's, or the teacher's on a beta-mixture step)"""
    teacher_acted: list[bool] = field(default_factory=list)
    """whether the executed action was the teacher's (beta mixture)"""
    rewards: list[float] = field(default_factory=list)
    """the env's reward for the executed action"""
    episode_ends: list[bool] = field(default_factory=list)
    """True on each episode's last step"""

    def student_agreement(self) -> float:
        """Fraction of the student's own steps on which its action equals the teacher's (every
        component); NaN when the teacher took every step."""
        own = [bool(np.array_equal(e, lab)) for e, lab, t in zip(self.executed, self.labels, self.teacher_acted)
               if not t]
        return float(np.mean(own)) if own else float("nan")

    def episode_returns(self) -> list[float]:
        """Undiscounted return of each episode."""
        out, acc = [], 0.0
        for r, end in zip(self.rewards, self.episode_ends):
            acc += r
            if end:
                out.append(acc)
                acc = 0.0
        return out


def _nvec(space: gym.Space) -> list[int]:
    if isinstance(space, gym.spaces.Discrete):
        return [int(space.n)]
    if isinstance(space, gym.spaces.MultiDiscrete):
        return [int(x) for x in np.asarray(space.nvec).ravel()]
    raise ValueError(f"DAgger's student acts on a Discrete or MultiDiscrete action space; got {space}")


def student_actor(module: Any, *, mode: str, rng: np.random.Generator) -> Callable[[Any], np.ndarray]:
    """The module as a rollout policy on one observation: ``mode`` 'greedy' (the mode of each
    categorical component, as the policy loader acts) or 'sample' (Gumbel-max with ``rng``)."""
    import torch
    from ray.rllib.core.columns import Columns

    if mode not in ("greedy", "sample"):
        raise ValueError(f"student mode must be 'greedy' or 'sample', got {mode!r}")
    nvec = _nvec(module.action_space)
    splits = np.cumsum(nvec)[:-1]
    discrete = isinstance(module.action_space, gym.spaces.Discrete)

    def act(obs: Any) -> Any:
        x = torch.as_tensor(np.asarray(obs, dtype=np.float32))[None]
        with torch.no_grad():
            logits = module.forward_inference({Columns.OBS: x})[Columns.ACTION_DIST_INPUTS][0].numpy()
        parts = np.split(logits.astype(np.float64), splits)
        if mode == "sample":
            parts = [p + rng.gumbel(size=p.shape) for p in parts]
        idx = np.asarray([int(np.argmax(p)) for p in parts], dtype=np.int64)
        return int(idx[0]) if discrete else idx

    return act


def beta_for_round(beta: float, round_index: int) -> float:
    """Probability that the teacher acts in DAgger round ``round_index`` (1, 2, ...): ``beta ** r``."""
    if round_index < 1:
        raise ValueError(f"DAgger rounds count from 1, got {round_index}")
    return float(beta) ** round_index if beta > 0 else 0.0


def round_seed(first_seed: int, bc_episodes: int, episodes_per_round: int, round_index: int) -> int:
    """First env seed of DAgger round ``round_index`` (1, 2, ...): after the demonstrations'
    ``first_seed .. first_seed + bc_episodes - 1`` and the earlier rounds' seeds (all fresh)."""
    if round_index < 1:
        raise ValueError(f"DAgger rounds count from 1, got {round_index}")
    return int(first_seed) + int(bc_episodes) + (round_index - 1) * int(episodes_per_round)


def collect_relabelled(env: gym.Env, student: Callable[[Any], Any], teacher: Any, *, episodes: int,
                       seed: int, encode: Callable[[Any], Any], beta: float = 0.0,
                       rng: np.random.Generator | None = None) -> RelabelledRollout:
    """Roll out ``student`` (observation -> flat action) on ``env`` for ``episodes`` episodes
    (seeds ``seed, seed + 1, ...``); at every step the teacher (``act(obs, info)``, raw-env action,
    ``reset(seed)`` at each episode if it has one) labels the state with ``encode(action)``, and with
    probability ``beta`` (drawn from ``rng``) its action is executed instead of the student's."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    if not 0.0 <= beta < 1.0:
        raise ValueError(f"beta must be in [0, 1), got {beta}")
    if beta > 0 and rng is None:
        raise ValueError("a beta mixture needs a numpy Generator (rng)")
    obs_l: list = []
    labels: list = []
    executed: list = []
    by_teacher_l: list = []
    rewards: list = []
    ends: list = []
    for ep in range(episodes):
        if hasattr(teacher, "reset"):
            teacher.reset(seed + ep)
        obs, info = env.reset(seed=seed + ep)
        done = False
        while not done:
            label = encode(teacher.act(obs, info))
            by_teacher = bool(beta > 0 and rng.random() < beta)
            action = label if by_teacher else student(obs)
            obs_l.append(obs)
            labels.append(np.asarray(label))
            executed.append(np.asarray(action))
            by_teacher_l.append(by_teacher)
            obs, reward, term, trunc, info = env.step(action)
            done = bool(term or trunc)
            rewards.append(float(reward))
            ends.append(done)
    return RelabelledRollout(obs=obs_l, labels=labels, executed=executed, teacher_acted=by_teacher_l,
                             rewards=rewards, episode_ends=ends)
