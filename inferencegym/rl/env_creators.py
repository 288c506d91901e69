"""Env creators registered with RLlib/Tune (``ray.tune.registry.register_env``).

- ``"inferencegym_single"``: ``gymnasium.make("InferenceGym/LLMServe-v0", task_id=...)`` wrapped in the
  env package's flat MultiDiscrete action wrapper (and :class:`SafetyWrapper` if asked).
- ``"inferencegym_cluster"``: ``inferencegym.envs.cluster_env.ClusterEnv(env_config)``.

Both read ``task_id`` from ``env_config``; every other key of ``env_config`` except the ones below goes
to the env constructor. Keys consumed here: ``safety`` (a dict of :class:`SafetySettings` fields),
``history_windows`` / ``history_ema_weight`` (single-agent: :class:`~inferencegym.envs.history.HistoryObservation`),
``internal_router`` (cluster: the router played inside by that rule, replica agents only).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

import inferencegym.envs as envs
import inferencegym.envs.actions as actions
from inferencegym.envs.cluster_env import ClusterEnv
from inferencegym.envs.history import HistoryObservation
from inferencegym.rl.callbacks import safety_flags, task_ttft_slo_s
from inferencegym.rl.config import PRIVILEGED_CRITIC_DIM, SafetySettings

SINGLE_ENV = "inferencegym_single"
CLUSTER_ENV = "inferencegym_cluster"
ENV_NAMES = {"single": SINGLE_ENV, "cluster": CLUSTER_ENV}

#: Names the flat MultiDiscrete action wrapper may have in ``inferencegym.envs`` (first found is used).
_FLAT_WRAPPER_NAMES = ("FlatActionWrapper", "FlatServeActionWrapper", "MultiDiscreteActionWrapper",
                       "FlattenServeAction", "FlatActions")


def flat_wrapper_class() -> type[gym.Wrapper]:
    """The env package's flat MultiDiscrete action wrapper."""
    for mod in (envs, actions):
        for name in _FLAT_WRAPPER_NAMES:
            cls = getattr(mod, name, None)
            if isinstance(cls, type):
                return cls
    raise ImportError(f"no flat MultiDiscrete action wrapper found in inferencegym.envs(.actions); "
                      f"looked for {', '.join(_FLAT_WRAPPER_NAMES)}")


class SafetyWrapper(gym.Wrapper):
    """Ends an episode (truncation) with ``penalty`` added to the reward when the step's info shows a
    runaway queue or latency beyond ``latency_factor`` x SLO. Sets ``info['safety/terminated']``."""

    def __init__(self, env: gym.Env, settings: SafetySettings) -> None:
        super().__init__(env)
        self.settings = settings

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        runaway, late = safety_flags(info, self.settings, task_ttft_slo_s(self.env))
        if (runaway or late) and not (terminated or truncated):
            reward = float(reward) + self.settings.penalty
            truncated = True
            info = {**info, "safety/terminated": 1.0}
        return obs, reward, terminated, truncated, info




class PrivilegedCriticFeatures(gym.Wrapper):
    """Training env only (asymmetric actor-critic, issue 21): appends :data:`PRIVILEGED_CRITIC_DIM`
    privileged features of the window about to be served to the observation, for the critic: the
    hidden phase (index / (phases - 1)), its arrivals and those of the next 4 windows (/ the nominal
    count), whether a mega-prompt arrives in it, and its mean prompt (/ the prompt clip). The actor
    of a module with ``critic_privileged_dims`` drops them (``modules._FlatMLPBase``); evaluation,
    serving and the policy loader never build this wrapper (the loader pads zeros)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        low = np.concatenate([space.low, np.zeros(PRIVILEGED_CRITIC_DIM, np.float32)])
        high = np.concatenate([space.high, np.full(PRIVILEGED_CRITIC_DIM, 10.0, np.float32)])
        self.observation_space = gym.spaces.Box(low.astype(np.float32), high.astype(np.float32), dtype=np.float32)

    def features(self) -> np.ndarray:
        from inferencegym.envs.serve_env import nominal_rates

        base = self.env.unwrapped
        wl, w, task = base._wl, base._step, base.task  # noqa: SLF001 (privileged: training critic only)
        out = np.zeros(PRIVILEGED_CRITIC_DIM, np.float32)
        n_win = task.episode_windows
        if w >= n_win:
            return out
        per_window = max(nominal_rates(task)[0] * task.window_s, 1e-6)
        idx = wl.window_start_idx
        lo, hi = int(idx[w]), int(idx[w + 1])
        far = int(idx[min(w + 5, n_win)])
        out[0] = float(wl.phase[w]) / max(1, len(wl.phase_names) - 1)
        out[1] = min(10.0, (hi - lo) / per_window)
        out[2] = min(10.0, (far - hi) / (4.0 * per_window))
        out[3] = float(wl.mega[lo:hi].sum() > 0)
        out[4] = min(10.0, float(wl.prompt_tokens[lo:hi].mean()) / task.workload.max_prompt_tokens) if hi > lo else 0.0
        return out

    def _cat(self, obs: Any) -> np.ndarray:
        return np.concatenate([np.asarray(obs, np.float32), self.features()]).astype(np.float32)

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        return self._cat(obs), info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._cat(obs), reward, terminated, truncated, info


def _split_config(env_config: Any) -> tuple[str, dict[str, Any], SafetySettings | None]:
    cfg = dict(env_config or {})
    task_id = cfg.pop("task_id", None)
    if not task_id:
        raise ValueError("env_config must contain 'task_id' (e.g. {'task_id': 'bursty_workload'})")
    safety = cfg.pop("safety", None)
    return task_id, cfg, (SafetySettings(**safety) if safety else None)


def make_single_env(env_config: Any) -> gym.Env:
    """The flat-action single-agent env for ``env_config['task_id']``."""
    task_id, kwargs, safety = _split_config(env_config)
    windows = int(kwargs.pop("history_windows", 0) or 0)
    ema_weight = float(kwargs.pop("history_ema_weight", 0.3))
    phase = int(kwargs.pop("phase_features", 0) or 0)  # false / true (1) / 2: envs.phase_detector levels
    privileged_critic = bool(kwargs.pop("privileged_critic", False))
    env = gym.make("InferenceGym/LLMServe-v0", task_id=task_id, **kwargs)
    env = flat_wrapper_class()(env)
    if windows > 0:
        env = HistoryObservation(env, windows, ema_weight, task_id if phase else None, max(phase, 1))
    if privileged_critic:
        env = PrivilegedCriticFeatures(env)
    if safety is not None and safety.enabled and safety.terminate:
        env = SafetyWrapper(env, safety)
    return env


def make_cluster_env(env_config: Any) -> Any:
    """The multi-agent cluster env for ``env_config['task_id']``; with ``internal_router`` (a router
    rule's name) the replica agents only (:class:`~inferencegym.rl.replica_env.ReplicaOnlyClusterEnv`)."""
    task_id, kwargs, _ = _split_config(env_config)
    router = kwargs.pop("internal_router", None)
    if router:
        from inferencegym.rl.replica_env import ReplicaOnlyClusterEnv

        return ReplicaOnlyClusterEnv({"task_id": task_id, **kwargs}, router=router)
    return ClusterEnv({"task_id": task_id, **kwargs})


def register_envs() -> None:
    """Register both creators with Tune's registry (idempotent)."""
    from ray.tune.registry import register_env

    register_env(SINGLE_ENV, make_single_env)
    register_env(CLUSTER_ENV, make_cluster_env)
