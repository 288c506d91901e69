"""A router module that learns the affinity weight of the ``estimated_ttft`` rule (issue 21, eleventh session).

``affinity_router`` scores each replica as :class:`~inferencegym.rl.fixed_modules.EstTTFTRouterModule` with an
affinity term, ``est_ttft - a x cached_share`` (both observation columns; SLO units), but ``a`` is a learned
parameter: it starts at model_config ``affinity`` (default 0: exactly the ``estimated_ttft`` rule's choices) and
PPO moves it. ``scale`` sets how sharply the policy samples while training (logits = -scale x score; at 1e4 it
is the rule's argmin, at a few hundred near-ties are explored); the greedy action is the score's argmin at any
scale. A small critic (the replica rows mean-pooled, with the request vector) gives PPO a baseline. The question
it answers: does PPO find the weight that the rule search found (``best_affinity_p90``: 0.02 s) from the plain
rule's warm start?

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/train_ppo.py --task cluster_prefix_sharing --minutes 10 \\
        --set modules.router_pol.type=affinity_router --set 'modules.router_pol.model_config={scale: 300.0}' \\
        --set 'trainable=[router_pol]' ...   # (the full command: docs/bench/issue21.md, "Eleventh session")
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override
from torch import nn

from inferencegym.envs.cluster_spaces import COL
from inferencegym.rl.fixed_modules import EstTTFTRouterModule


class AffinityRouterModule(EstTTFTRouterModule):
    """``est_ttft - a x cached_share`` with ``a`` learned (module docstring)."""

    @override(TorchRLModule)
    def setup(self) -> None:
        mc = dict(self.model_config or {})
        super().setup()
        rows = self.observation_space["replicas"].shape[1]
        if rows <= COL["cached_share"]:
            raise ValueError(f"affinity_router needs the prefix tasks' cached_share column ({COL['cached_share']}); "
                             f"this observation has {rows} columns")
        self.a = nn.Parameter(torch.tensor(float(self._affinity), dtype=torch.float64))
        self._affinity = 0.0  # the base class's fixed term is replaced by the learned one
        width = rows + self.observation_space["request"].shape[0]
        hidden = int(mc.get("value_hidden", 32))
        self.vf = nn.Sequential(nn.Linear(width, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def _score(self, obs: dict) -> torch.Tensor:
        rows = obs["replicas"]
        return rows[..., COL["est_ttft"]].double() - self.a * rows[..., COL["cached_share"]].double()

    @property
    def affinity(self) -> float:
        """The learned weight in the est_ttft column's unit (the task's smallest TTFT SLO)."""
        return float(self.a.detach())

    @override(ValueFunctionAPI)
    def compute_values(self, batch: dict, embeddings: Any = None) -> torch.Tensor:
        obs = batch[Columns.OBS]
        rows = obs["replicas"].float()
        mask = obs.get("action_mask")
        if mask is not None:
            w = (mask > 0.5).float().unsqueeze(-1)
            pooled = (rows * w).sum(-2) / w.sum(-2).clamp(min=1.0)
        else:
            pooled = rows.mean(-2)
        return self.vf(torch.cat([pooled, obs["request"].float()], dim=-1)).squeeze(-1)
