"""Small test-local envs with the same spaces as InferenceGym's envs (for the RL tests only)."""

from __future__ import annotations

import numpy as np
import gymnasium as gym
from gymnasium import spaces
from ray.rllib.env.multi_agent_env import MultiAgentEnv


class ToySingleEnv(gym.Env):
    """Box(8) obs, MultiDiscrete([3, 4]) action; reward for matching a hidden target per step."""

    def __init__(self, config=None):
        config = dict(config or {})
        self.horizon = int(config.get("horizon", 20))
        self.observation_space = spaces.Box(0.0, 1.0, (8,), np.float32)
        self.action_space = spaces.MultiDiscrete([3, 4])
        self.t = 0
        self.task = None

    def _obs(self):
        return self.np_random.random(8).astype(np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self._o = self._obs()
        return self._o, {}

    def step(self, action):
        a = np.asarray(action)
        target = np.array([int(self._o[0] * 3) % 3, int(self._o[1] * 4) % 4])
        r = float((a == target).sum())
        self.t += 1
        self._o = self._obs()
        trunc = self.t >= self.horizon
        info = {"sim/queue_depth": float(self.t), "sim/ttft_p99_s": 0.1}
        if trunc:
            info["grade/score"] = r / 2.0
        return self._o, r, False, trunc, info


class ToyClusterEnv(MultiAgentEnv):
    """Router (Dict obs replicas/request/action_mask, Discrete(N)) + replica agents (Box, MultiDiscrete).

    Router reward: minus the queue of the chosen replica; masked choices raise like the real env."""

    def __init__(self, config=None):
        super().__init__()
        config = dict(config or {})
        self.n = int(config.get("num_replicas", 4))
        self.horizon = int(config.get("horizon", 30))
        self.replica_ids = [f"replica_{i}" for i in range(self.n)]
        self.possible_agents = ["router", *self.replica_ids]
        self.agents = list(self.possible_agents)
        self.observation_spaces = {
            "router": spaces.Dict({
                "replicas": spaces.Box(-100, 100, (self.n, 5), np.float32),
                "request": spaces.Box(-100, 100, (3,), np.float32),
                "action_mask": spaces.Box(0.0, 1.0, (self.n,), np.float32)}),
            **{r: spaces.Box(-100, 100, (10,), np.float32) for r in self.replica_ids}}
        self.action_spaces = {"router": spaces.Discrete(self.n),
                              **{r: spaces.MultiDiscrete([5, 4, 3, 4]) for r in self.replica_ids}}
        self.curriculum = (1.0, 1.0)

    def set_curriculum(self, *, load_scale, burst_scale):
        self.curriculum = (load_scale, burst_scale)

    def _router_obs(self):
        feats = np.zeros((self.n, 5), np.float32)
        feats[:, 0] = self.q / 10.0
        mask = np.ones(self.n, np.float32)
        mask[self.t % self.n] = 0.0  # one replica is always down
        return {"replicas": feats, "request": np.array([0.5, 0.1, 1.0], np.float32), "action_mask": mask}

    def _replica_obs(self, i):
        o = np.zeros(10, np.float32)
        o[0] = self.q[i] / 10.0
        o[4:8] = [0.5, 1.0, 0.0, 1 / 3]
        return o

    def reset(self, *, seed=None, options=None):
        self.rng = np.random.default_rng(seed)
        self.q = np.zeros(self.n)
        self.t = 0
        return {"router": self._router_obs()}, {}

    def step(self, action_dict):
        obs, rew, info = {}, {}, {}
        if "router" in action_dict:
            a = int(action_dict["router"])
            if self._router_obs()["action_mask"][a] < 0.5:
                raise ValueError(f"masked replica {a}")
            self.q[a] += 1
            rew["router"] = -float(self.q[a])
        self.q = np.maximum(0, self.q - self.rng.random(self.n))
        self.t += 1
        done = self.t >= self.horizon
        if self.t % 5 == 0 or done:
            for i, r in enumerate(self.replica_ids):
                obs[r] = self._replica_obs(i)
                rew[r] = 0.0
        obs["router"] = self._router_obs()
        if done:
            info["router"] = {"grade/score": float(1.0 / (1.0 + self.q.max()))}
        return obs, rew, {"__all__": False}, {"__all__": done}, info


class FailOnceEnv(ToySingleEnv):
    """``ToySingleEnv`` that raises once, mid-episode, in the whole run (fault-tolerance test).

    ``config["marker"]``: a file path; the first env to reach step ``fail_at_step`` while the file
    does not exist creates it and raises. The marker lives on disk, so a recreated env (another
    instance, possibly in another process) does not fail again."""

    def __init__(self, config=None):
        config = dict(config or {})
        super().__init__(config)
        self.marker = config["marker"]
        self.fail_at_step = int(config.get("fail_at_step", 7))

    def step(self, action):
        import os

        if self.t + 1 == self.fail_at_step and not os.path.exists(self.marker):
            with open(self.marker, "w") as f:
                f.write("failed once\n")
            raise RuntimeError("FailOnceEnv: injected failure mid-episode")
        return super().step(action)
