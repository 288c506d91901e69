"""Replica agents only: the cluster env with its router played inside by an observable rule.

``ReplicaOnlyClusterEnv(env_config)`` (``env_config["internal_router"]``, e.g. ``"estimated_ttft"``)
wraps :class:`~inferencegym.envs.cluster_env.ClusterEnv`: every router decision is taken by the named
router policy of :mod:`inferencegym.policies.routers` (observable rules only; a privileged router is
refused), so the agents that RLlib sees are the replica agents alone and one env step is one control
window (60 per episode instead of ~1,700 router decisions). Training the replica agents with the best
observable router held fixed (issue 21, item 4) then costs RLlib's per-step overhead 60 times per
episode, not 1,700. Observations, rewards and infos of the replica agents are the inner env's
unchanged; everything else (``task``, ``episode_log``, ``set_curriculum``, ...) is the inner env's.
"""

from __future__ import annotations

from typing import Any

from ray.rllib.env.multi_agent_env import MultiAgentEnv

from inferencegym.envs.cluster_env import ClusterEnv
from inferencegym.envs.cluster_spaces import ROUTER
from inferencegym.policies.routers import PRIVILEGED_ROUTERS, get_router_policy


class ReplicaOnlyClusterEnv(MultiAgentEnv):
    """The replica agents of a ``ClusterEnv`` whose router is an internal rule (module docstring)."""

    def __init__(self, config: dict | None = None, router: str = "estimated_ttft") -> None:
        super().__init__()
        if router in PRIVILEGED_ROUTERS:
            raise ValueError(f"internal_router {router!r} is privileged; use an observable router rule")
        self.inner = ClusterEnv(config)
        self.router = get_router_policy(router)
        self.router.bind(self.inner)
        # the router stays a possible agent (it never acts here) so that its module keeps the
        # router's spaces and the trained policy still routes when evaluated on the full env
        self.possible_agents = [ROUTER, *self.inner.replica_ids]
        self.agents = list(self.inner.replica_ids)
        self.observation_spaces = dict(self.inner.observation_spaces)
        self.action_spaces = dict(self.inner.action_spaces)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _route(self, out: tuple) -> tuple:
        obs, rew, term, trunc, info = out
        while ROUTER in obs and not (term["__all__"] or trunc["__all__"]):
            a = self.router.act(obs[ROUTER], info.get(ROUTER))
            obs, rew, term, trunc, info = self.inner.step({ROUTER: a})
        keep = lambda d: {k: v for k, v in d.items() if k != ROUTER}  # noqa: E731
        return keep(obs), keep(rew), keep(term), keep(trunc), keep(info)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.inner.reset(seed=seed, options=options)
        if hasattr(self.router, "reset"):
            self.router.reset(seed)
        if ROUTER not in obs:
            return obs, info
        o, _, _, _, i = self._route((obs, {}, {"__all__": False}, {"__all__": False}, info))
        return o, i

    def step(self, action_dict: dict):
        return self._route(self.inner.step(action_dict))
