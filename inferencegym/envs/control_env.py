"""``ControlEnv``: the autoscaler of ``cluster_autoscaling`` as a Gymnasium agent.

Every control interval (15 s) the agent sets the target replica count (``Discrete(max_replicas +
1)``, clamped to at least one). Observation (float32, ``OBS_NAMES``): what the production
controllers read (serving / starting / draining replicas, target, queue and KV per serving
replica, running requests, arrival rate over the last interval and minute) plus time of day.
Reward: ``-w * GPU-seconds of the step / GPU-seconds of the full fleet over the episode`` every
step and ``(1 - w) * SLO attainment`` at the end, so the return is the task's grade minus ``w``.
Episodes use the training days by default (``split``), one (day, seed) per ``reset(seed=...)``.
``features="history"`` appends rate history and the training profile's look-ahead
(``envs/control_features.py``): the learned autoscaler's observation.

``reward="shaped"`` (for PPO; the grade is unchanged) pays the SLO term per step instead of at
the end, by potential-based shaping: ``Phi(s) = -(1 - w) * F(s) / N`` where ``F`` counts the
requests whose TTFT deadline has passed without a first token in time (known failures) and ``N``
is the episode's arrivals, with ``Phi = 0`` at the end and a shift of ``-(1 - w)`` there. Every
step then pays ``-w * GPU-s share - (1 - w) * (new known failures) / N`` and the last step the rest
of the true failures (TPOT misses, late requests), so the undiscounted return of *every* episode is
``grade - 1`` (the terminal reward's return is ``grade - w``): same ranking of policies, same optimum,
but a failure is charged ~one control step after the TTFT deadline it missed, not at the day's end.
``critic_obs=True`` appends ``CRITIC_NAMES`` (privileged: the realized arrival rate ahead, from the
episode's arrivals) for an asymmetric critic (``MLPModule``'s ``critic_privileged_dims``); the
actor's part of the observation is unchanged.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from inferencegym.envs.control_features import BASE_NAMES, control_features, feature_names
from inferencegym.sim.config import ClusterConfig, ReplicaConfig
from inferencegym.sim.fleet import Fleet, FleetConfig
from inferencegym.tasks.control import (DEFAULT_WINDOWS, arrivals, control_context, day_rates, day_split,
                                        episode_windows, get_control_task, grade, lifecycle_config,
                                        load_windows)

OBS_NAMES = BASE_NAMES
CRITIC_NAMES = ("future_rate_startup", "future_rate_window", "future_rate_4_windows", "episode_progress")
"""Privileged critic features (``critic_obs=True``): realized arrivals per second over the next start-up
delay, the next source window and the next four, as fractions of the full fleet's capacity; elapsed
fraction of the episode."""
REWARDS = ("terminal", "shaped")


class ControlEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, task_id: str = "cluster_autoscaling", *, split: str = "train",
                 load_windows_path: str | None = None, failures: bool = False,
                 episode_windows_override: int | None = None, features: str = "base",
                 reward: str = "terminal", critic_obs: bool = False) -> None:
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {', '.join(REWARDS)}, got {reward!r}")
        self.task = get_control_task(task_id)
        if self.task.fixed_replicas:
            raise ValueError(f"ControlEnv drives an autoscaler; {task_id!r} has a fixed fleet")
        if episode_windows_override is not None:
            import dataclasses

            self.task = dataclasses.replace(self.task, episode_s=episode_windows_override * self.task.window_s)
        self.windows = load_windows(str(load_windows_path or DEFAULT_WINDOWS))
        self.days = day_split(len(self.windows))[split]
        self.lc = lifecycle_config(self.task, failures)
        t = self.task
        self.features = features
        self.obs_names = feature_names(features) + (CRITIC_NAMES if critic_obs else ())
        self.reward_kind, self.critic_obs = reward, critic_obs
        self.action_space = gym.spaces.Discrete(t.max_replicas + 1)
        self.observation_space = gym.spaces.Box(-1.0, np.inf, shape=(len(self.obs_names),), dtype=np.float32)
        self.fleet: Fleet | None = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        t = self.task
        s = int(self.np_random.integers(2**31)) if seed is None else int(seed)
        day = int((options or {}).get("day", self.days[s % len(self.days)]))
        rates = day_rates(t, self.windows, day)
        a_rng, f_rng = np.random.default_rng([s, day]).spawn(2)
        arr = arrivals(t, rates, a_rng)
        self.w0, nw = episode_windows(t, rates)
        self.episode_s = nw * t.window_s
        cc = ClusterConfig(replica=ReplicaConfig(model=t.model, gpu=t.gpu, tensor_parallel=t.tensor_parallel),
                           router="least_outstanding_requests", tenants=t.tenants())
        self.fleet = Fleet(cc, FleetConfig(lifecycle=self.lc, tenant_tiers=t.tenant_tiers()), arr, rng=f_rng)
        self.max_gpu_s = t.max_replicas * self.fleet.lifecycle.gpus * self.episode_s
        self.day, self.seed_ = day, s
        self.arrivals = arr
        self.ctx = control_context(t, self.windows, rates, startup_s=self.fleet.lifecycle.startup_s())
        self._seen, self._failed = 0, 0
        return self._obs(), {"day": day, "seed": s}

    def step(self, action):
        f = self.fleet
        if f is None:
            raise RuntimeError("call reset() before step()")
        t = self.task
        g0 = f.lifecycle.gpu_seconds(f.now_s)
        f.set_target(min(t.max_replicas, max(1, int(action))))
        f.run_until(min(self.episode_s, f.now_s + t.interval_s))
        w = t.grade_cost_weight
        reward = -w * (f.lifecycle.gpu_seconds(f.now_s) - g0) / self.max_gpu_s
        done = f.now_s >= self.episode_s - 1e-9
        n = max(1, len(self.arrivals["arrival_s"]))
        info: dict[str, Any] = {}
        if self.reward_kind == "shaped" and not done:
            before = self._failed
            self._count_failures(f.now_s)
            reward -= (1 - w) * (self._failed - before) / n
        if done:
            f.finish()
            s = f.summary()
            s["episode_s"] = self.episode_s
            if self.reward_kind == "shaped":  # the rest of the true failures; the return is grade - 1
                reward -= (1 - w) * ((1 - s["slo_attainment"]) - self._failed / n)
            else:
                reward += (1 - w) * s["slo_attainment"]
            info = {"summary": s, "score": grade(t, s)}
        return self._obs(), float(reward), done, False, info

    def _count_failures(self, now_s: float) -> None:
        """Advance over the requests whose TTFT deadline is past (arrival order): count those without
        a first token within the deadline (the shaping potential's ``F``)."""
        reqs, slo = self.fleet.requests, self.task.ttft_slo_s
        k = self._seen
        while k < len(reqs) and reqs[k].arrival_s + slo <= now_s:
            r = reqs[k]
            if not r.first_token_s - r.arrival_s <= slo:  # NaN (no first token yet) is a failure
                self._failed += 1
            k += 1
        self._seen = k

    def observation(self):
        return self.fleet.observe()

    def _obs(self) -> np.ndarray:
        x = control_features(self.fleet.observe(), self.ctx, self.features)
        if not self.critic_obs:
            return x
        t, now = self.arrivals["arrival_s"], self.fleet.now_s
        full = self.task.max_replicas * self.task.capacity_rps

        def ahead(dt: float) -> float:
            return float(np.searchsorted(t, now + dt) - np.searchsorted(t, now)) / dt / full

        ws = self.task.window_s
        extra = [ahead(self.ctx.startup_s), ahead(ws), ahead(4 * ws), min(1.0, now / self.episode_s)]
        return np.concatenate([x, np.asarray(extra, np.float32)])
