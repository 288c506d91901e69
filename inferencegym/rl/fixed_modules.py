"""Fixed (non-learning) router module: the ``estimated_ttft`` rule as an RLModule.

:class:`EstTTFTRouterModule` (``type: est_ttft_router``) scores each replica by minus its
``est_ttft`` observation column (the router observation's estimated time to the arriving request's
first token, which credits the published cached prefix exactly as the ``estimated_ttft`` rule does:
its argmin is the rule's choice, ``tests/sim/test_estimated_ttft.py``) times ``scale``, masked; among
replicas tied on it, the one with the least load by capacity (the rule's tie-break on identical
replicas) gets :data:`TIE_BONUS` more. It
lets PPO train the replica agents with the best observable router held fixed (issue 21, item 4):
map the router to it and leave it out of ``trainable``. One dummy parameter keeps optimisers happy.

model_config ``affinity`` (default 0; prefix tasks) scores ``est_ttft - affinity x cached_share`` instead:
the ``estimated_ttft_affinity`` family's rule with weight ``affinity x`` the task's smallest TTFT SLO in
seconds (the ``est_ttft`` column is in units of that SLO), e.g. ``best_affinity_p90``'s router.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override
from torch import nn

from inferencegym.envs.cluster_spaces import COL

MASKED_LOGIT = -1.0e9
TIE_BONUS = 5.0
"""Logit added to the rule's own choice among replicas tied on ``est_ttft`` (its tie-break)."""


class EstTTFTRouterModule(TorchRLModule, ValueFunctionAPI):
    """Logits = -``scale`` x est_ttft column (model_config ``scale``, default 1e4 per TTFT SLO)."""

    @override(TorchRLModule)
    def setup(self) -> None:
        mc = dict(self.model_config or {})
        self._scale = float(mc.get("scale", 1.0e4))
        self._affinity = float(mc.get("affinity", 0.0))
        obs = self.observation_space
        if not isinstance(obs, gym.spaces.Dict) or "replicas" not in obs.spaces:
            raise ValueError(f"est_ttft_router needs the cluster router's Dict observation; got {obs}")
        if obs["replicas"].shape[1] <= COL["est_ttft"]:
            raise ValueError(f"router observation has {obs['replicas'].shape[1]} columns; est_ttft is "
                             f"column {COL['est_ttft']}")
        if self._affinity and obs["replicas"].shape[1] <= COL["cached_share"]:
            raise ValueError(f"est_ttft_router affinity {self._affinity} needs the prefix tasks' cached_share "
                             f"column ({COL['cached_share']}); this observation has {obs['replicas'].shape[1]} "
                             f"columns: set affinity 0 on tasks without prefix caching")
        self.dummy = nn.Parameter(torch.zeros(1))

    def _score(self, obs: dict) -> torch.Tensor:
        """Per replica, the score whose argmin is the rule's choice (SLO units)."""
        est = obs["replicas"][..., COL["est_ttft"]].double()
        if self._affinity:
            est = est - self._affinity * obs["replicas"][..., COL["cached_share"]].double()
        return est

    def _logits(self, obs: dict) -> torch.Tensor:
        est = self._score(obs)
        load = obs["replicas"][..., COL["load_by_capacity"]].double()
        mask = obs.get("action_mask")
        ok = torch.ones_like(est, dtype=torch.bool) if mask is None else mask > 0.5
        big = torch.full_like(est, float("inf"))
        # the rule's tie-break: among the earliest estimates, the fewest outstanding requests
        # (load by capacity), then the lowest index (argmin returns the first)
        est_ok = torch.where(ok, est, big)
        tied = ok & (est_ok <= est_ok.min(dim=-1, keepdim=True).values)
        winner = torch.argmin(torch.where(tied, load, big), dim=-1, keepdim=True)
        logits = -self._scale * est
        logits = logits.scatter_add(-1, winner, torch.full_like(winner, TIE_BONUS, dtype=logits.dtype))
        logits = torch.where(ok, logits, torch.full_like(logits, MASKED_LOGIT))
        return logits.float() + 0.0 * self.dummy

    @override(TorchRLModule)
    def _forward(self, batch: dict, **kwargs) -> dict:
        return {Columns.ACTION_DIST_INPUTS: self._logits(batch[Columns.OBS])}

    @override(TorchRLModule)
    def _forward_train(self, batch: dict, **kwargs) -> dict:
        return {Columns.ACTION_DIST_INPUTS: self._logits(batch[Columns.OBS]), Columns.EMBEDDINGS: None}

    @override(ValueFunctionAPI)
    def compute_values(self, batch: dict, embeddings: Any = None) -> torch.Tensor:
        b = batch[Columns.OBS]["replicas"].shape[0]
        return torch.zeros(b) + 0.0 * self.dummy
