"""One cluster episode routed by a registry policy through ``ClusterEnv`` (the adapter tests compare
it with the simulator's own routing of the same requests)."""

from __future__ import annotations

from inferencegym.envs.cluster_env import ClusterEnv
from inferencegym.policies.routers import get_cluster_policy


def route_through_env(task_id: str, router: str, *, windows: int, seed: int) -> ClusterEnv:
    """The env after a whole episode of ``router`` (bound, reset with seed 0) from ``reset(seed)``."""
    env = ClusterEnv({"task_id": task_id, "episode_windows": windows})
    pol = get_cluster_policy(router).bind(env)
    pol.reset(0)
    obs, infos = env.reset(seed=seed)
    while True:
        obs, _, _, trunc, infos = env.step(pol.act_all(obs, infos))
        if trunc["__all__"]:
            return env
