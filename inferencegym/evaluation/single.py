"""Run N episodes of a policy on a task (seeds S, S+1, ...) and aggregate the grades.

    from inferencegym.evaluation.single import evaluate_policy
    res = evaluate_policy("heuristic", "bursty_workload", episodes=20, seed=1000)
    res.score_mean, res.score_ci95, res.to_json_dict()

Scores are aggregated as the mean with a Student-t 95 % confidence half-width
(``scipy.stats.t``); latency figures are the mean over episodes of each episode's p99 over its
completed requests; throughput and cost are means over episodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from inferencegym.envs.actions import FLAT_NVEC, ServeAction, flat_to_action
from inferencegym.envs.reward import RewardConfig
from inferencegym.envs.serve_env import LLMServeEnv
from inferencegym.policies import get_policy

DEFAULT_EVAL_SEED = 1000
"""First evaluation seed. Training / search seeds live below it (0..999), so they are disjoint."""


@dataclass
class EpisodeResult:
    seed: int
    score: float
    breakdown: dict[str, Any]
    metrics: dict[str, Any]
    total_reward: float
    steps: int


@dataclass
class EvaluationResult:
    policy: str
    task: str
    seeds: list[int]
    episodes: list[EpisodeResult] = field(default_factory=list)

    @property
    def scores(self) -> np.ndarray:
        return np.array([e.score for e in self.episodes], dtype=float)

    @property
    def score_mean(self) -> float:
        return float(self.scores.mean()) if self.episodes else math.nan

    @property
    def score_ci95(self) -> float:
        """Half-width of the Student-t 95 % confidence interval of the mean (0 for one episode)."""
        n = len(self.episodes)
        if n < 2:
            return 0.0
        from scipy import stats

        return float(stats.t.ppf(0.975, n - 1) * self.scores.std(ddof=1) / math.sqrt(n))

    def metric_mean(self, key: str) -> float | None:
        vals = [e.metrics.get(key) for e in self.episodes]
        vals = [v for v in vals if v is not None and math.isfinite(v)]
        return float(np.mean(vals)) if vals else None

    def to_json_dict(self) -> dict[str, Any]:
        """The ``inferencegym evaluate --json`` object."""
        return {
            "policy": self.policy,
            "task": self.task,
            "episodes": len(self.episodes),
            "seeds": list(self.seeds),
            "score_mean": self.score_mean,
            "score_ci95": self.score_ci95,
            "ttft_p99_s": self.metric_mean("ttft_p99_s"),
            "tbt_p99_s": self.metric_mean("tbt_p99_s"),
            "e2e_p99_s": self.metric_mean("e2e_p99_s"),
            "throughput_tok_s": self.metric_mean("throughput_tok_s"),
            "cost_per_1k_tokens": self.metric_mean("cost_per_1k_tokens"),
            "slo_share_mean": float(np.mean([e.breakdown["grade/slo_share"] for e in self.episodes]))
            if self.episodes else None,
            "scores": [e.score for e in self.episodes],
            "reward_mean": float(np.mean([e.total_reward for e in self.episodes])) if self.episodes else None,
        }


def to_env_action(action: Any) -> Any:
    """Accept ServeAction, dicts, and flat MultiDiscrete vectors (from policies trained on the
    flat wrapper)."""
    if isinstance(action, (ServeAction, dict)):
        return action
    arr = np.asarray(action)
    if arr.ndim == 1 and arr.shape[0] == len(FLAT_NVEC) and np.issubdtype(arr.dtype, np.integer):
        return flat_to_action(arr)
    return action


def _reset_policy(policy: Any, seed: int) -> None:
    reset = getattr(policy, "reset", None)
    if reset is None:
        return
    try:
        reset(seed=seed)
    except TypeError:
        reset()


def run_episode(env, policy: Any, seed: int) -> EpisodeResult:
    """One episode of ``policy`` on an ``LLMServeEnv`` (unwrapped or not) from ``seed``."""
    if getattr(policy, "privileged", False) and not getattr(env.unwrapped, "privileged", False):
        raise ValueError(f"policy {type(policy).__name__} is privileged (reads info['oracle/*']): "
                         f"build the env with LLMServeEnv(..., privileged=True)")
    _reset_policy(policy, seed)
    obs, info = env.reset(seed=seed)
    total = 0.0
    steps = 0
    while True:
        action = to_env_action(policy.act(obs, info))
        obs, reward, terminated, truncated, info = env.step(action)
        total += reward
        steps += 1
        if terminated or truncated:
            break
    base = env.unwrapped
    g = base.grade()
    return EpisodeResult(seed=seed, score=g.score, breakdown=g.breakdown(),
                         metrics=base.episode_metrics(), total_reward=total, steps=steps)


def evaluate_policy(policy: str | Any, task_id: str, *, episodes: int = 20,
                    seed: int = DEFAULT_EVAL_SEED, reward_config: RewardConfig | None = None,
                    episode_windows: int | None = None, policy_name: str | None = None,
                    on_episode: Callable[[EpisodeResult], None] | None = None) -> EvaluationResult:
    """Run ``episodes`` episodes with seeds ``seed, seed+1, ...`` and collect the grades."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    if isinstance(policy, str):
        name = policy_name or policy
        policy = get_policy(policy, task_id)
    else:
        name = policy_name or type(policy).__name__
    # The oracle (info["oracle/*"]) only for a policy that declares it needs it (clairvoyant).
    env = LLMServeEnv(task_id, reward_config=reward_config, episode_windows=episode_windows,
                      privileged=bool(getattr(policy, "privileged", False)))
    seeds = [seed + i for i in range(episodes)]
    result = EvaluationResult(policy=name, task=env.task.task_id, seeds=seeds)
    for s in seeds:
        ep = run_episode(env, policy, s)
        result.episodes.append(ep)
        if on_episode is not None:
            on_episode(ep)
    return result
