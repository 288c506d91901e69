"""RLlib's floor for ``train_throughput.py``: envs with the spaces (and, for the cluster env, the
per-step agent pattern and episode length) of InferenceGym's envs, whose ``step`` costs nothing.

The observations and the agents acting at each step are recorded once from one episode of the real
env with random valid actions and replayed, so RLlib does exactly the work it does on the real env
(same spaces, same batch shapes, same number of agent steps per env step) minus the simulator.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from inferencegym.rl.env_creators import make_cluster_env, make_single_env

#: info keys the training callbacks read (safety monitors, grade), with harmless values
_INFO = {"sim/queue_depth": 0.0, "sim/ttft_p99_s": 0.0}


def record_single(env_config: dict, seed: int = 0) -> dict:
    env = make_single_env(env_config)
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    frames = [obs]
    while True:
        obs, _, term, trunc, _ = env.step(env.action_space.sample())
        frames.append(obs)
        if term or trunc:
            break
    return {"obs": frames, "observation_space": env.observation_space, "action_space": env.action_space}


def record_cluster(env_config: dict, seed: int = 0) -> dict:
    env = make_cluster_env(env_config)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    frames = [obs]
    while True:
        act = {}
        for aid, o in obs.items():
            if aid == "router":
                act[aid] = int(rng.choice(np.flatnonzero(np.asarray(o["action_mask"]) > 0.5)))
            else:
                act[aid] = env.action_spaces[aid].sample()
        obs, _, term, trunc, _ = env.step(act)
        # keep the final observation too: at truncation every agent that acted must observe
        # (RLlib raises MultiAgentEnvError otherwise; replaying the frame before it did)
        frames.append(obs)
        if term.get("__all__") or trunc.get("__all__"):
            break
    return {"obs": frames, "observation_spaces": dict(env.observation_spaces),
            "action_spaces": dict(env.action_spaces), "agents": list(env.possible_agents)}


class TrivialSingleEnv(gym.Env):
    """Replays a recorded episode's observations; reward 0; same length as the real episode."""

    def __init__(self, config: dict | None = None) -> None:
        rec = dict(config or {})["recording"]
        self.frames = rec["obs"]
        self.observation_space, self.action_space = rec["observation_space"], rec["action_space"]
        self.t = 0

    def set_curriculum(self, *, load_scale: float, burst_scale: float) -> None:
        """The curriculum hook of the real envs (nothing to scale here)."""

    def reset(self, *, seed: Any = None, options: Any = None):
        super().reset(seed=seed)
        self.t = 0
        return self.frames[0], {}

    def step(self, action: Any):
        self.t += 1
        done = self.t >= len(self.frames) - 1
        info = dict(_INFO, **({"grade/score": 0.0} if done else {}))
        return self.frames[self.t], 0.0, False, done, info


class TrivialClusterEnv(MultiAgentEnv):
    """Replays a recorded cluster episode: the same agents observe at each step, rewards 0."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__()
        rec = dict(config or {})["recording"]
        self.frames = rec["obs"]
        self.possible_agents = list(rec["agents"])
        self.agents = list(self.possible_agents)
        self.observation_spaces = rec["observation_spaces"]
        self.action_spaces = rec["action_spaces"]
        self.t = 0

    def set_curriculum(self, *, load_scale: float, burst_scale: float) -> None:
        """The curriculum hook of the real envs (nothing to scale here)."""

    def reset(self, *, seed: Any = None, options: Any = None):
        self.t = 0
        return self.frames[0], {}

    def step(self, action_dict: dict):
        self.t += 1
        done = self.t >= len(self.frames) - 1
        obs = self.frames[min(self.t, len(self.frames) - 1)]
        rew = {aid: 0.0 for aid in obs}
        info = {"router": {"grade/score": 0.0}} if done else {}
        truncs = {"__all__": done, **({aid: True for aid in obs} if done else {})}
        return obs, rew, {"__all__": False}, truncs, info


def trivial_env_for(cfg: Any) -> tuple[type, dict]:
    """(env class, env_config) of the floor env for a training config."""
    env_config = {"task_id": cfg.task_id, **cfg.env_config}
    if cfg.env == "single":
        return TrivialSingleEnv, {"recording": record_single(env_config)}
    return TrivialClusterEnv, {"recording": record_cluster(env_config)}
