"""A learning replica agent that starts as ``hold_knobs`` (config ``type: replica_sticky``; issue 21).

:class:`StickyReplicaModule` is a residual policy around "keep the current knobs":

    logits = hold_logit x one_hot(current knob buckets) + pi(trunk(obs))

The replica observation carries the current knobs as bucket index / (buckets - 1) at ``knob_start``
(the cluster env puts the 4 knobs before the last 2 features, hence -6, as for
:class:`~inferencegym.rl.modules.HoldKnobsModule`). ``pi`` starts at exactly zero, so the untrained
module's greedy action is the current knobs on every observation: its warm start *is* the
``hold_knobs`` replicas of every shipped cluster baseline (no behaviour cloning needed, nothing
approximate). Sampling it changes a knob with probability (n - 1) / (e^hold_logit + n - 1) per
window (``hold_logit`` 3: 9-17 % per knob), and a changed knob is then held: exploration is
persistent, so a knob setting is tried for many windows and its effect on the reward is large
next to one window's noise, where an independent per-window choice (``replica_mlp``) changes the
knobs for one window and flips back. PPO learns the residual (``pi``), e.g. "at batch cap 16,
move to 32"; the critic has its own trunk on the same observation (the knobs in it say which
setting the replica is in).

**Deterministic readout** (``forward_inference``: evaluation, the demo's selection, serving): per knob
the argmax of the residual ``pi``, ties (below ``READOUT_TIE``, e.g. the untrained module's exact
zeros) going to the current bucket. That is the mode of the knob distribution the sampled policy
settles into: with residuals ``r`` and ``S = sum_i e^r_i``, the sampled chain moves from bucket ``j``
to ``i`` with probability ``e^r_i / Z_j`` (``e^(r_j + h) / Z_j`` to stay), ``Z_j = S + e^r_j (e^h - 1)``;
it is reversible with stationary ``pi_j ~ e^r_j Z_j``, increasing in ``r_j``. The argmax of one
window's logits instead holds until a residual beats the hold logit, which reads the exploration
device, not what was learned: a demo run whose sampled policy graded 0.811 on validation seeds
500-509 graded 0.696 that way (the warm start 0.699) and 0.843 with this readout (BENCHMARKS.md,
"Lead, tenth session"). Training (``forward_exploration`` / ``forward_train``) samples the full
logits.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchMultiCategorical
from ray.rllib.core.rl_module.apis import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override
from torch import nn

STICKY_DEFAULTS: dict[str, Any] = {"hidden": [32, 32], "hold_logit": 3.0, "knob_start": -6}
"""``model_config`` defaults of :class:`StickyReplicaModule`."""
READOUT_TIE = 1e-6
"""Residual differences below this (nats) count as ties in the deterministic readout: the current bucket wins."""


def _trunk(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.Tanh()]
    return nn.Sequential(*layers)


class StickyReplicaModule(TorchRLModule, ValueFunctionAPI):
    """Replica agent: hold the current knobs, plus a learned residual (module docstring)."""

    @override(TorchRLModule)
    def setup(self) -> None:
        from dataclasses import fields

        from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

        # RLlib may merge its DefaultModelConfig fields (vf_share_layers, ...) in: ignored
        rllib_keys = {f.name for f in fields(DefaultModelConfig)} | {"_disable_action_flattening"}
        given = {k: v for k, v in dict(self.model_config or {}).items() if k not in rllib_keys}
        c = {**STICKY_DEFAULTS, **given}
        unknown = sorted(set(c) - set(STICKY_DEFAULTS))
        if unknown:
            raise ValueError(f"unknown model_config keys {unknown} for module type replica_sticky; "
                             f"valid: {', '.join(STICKY_DEFAULTS)}")
        obs, act = self.observation_space, self.action_space
        if not isinstance(act, gym.spaces.MultiDiscrete):
            raise ValueError(f"replica_sticky needs the replica agents' MultiDiscrete action space; got {act}")
        if not (isinstance(obs, gym.spaces.Box) and len(obs.shape) == 1):
            raise ValueError(f"replica_sticky needs the replica agents' flat Box observation; got {obs}")
        self._nvec = [int(x) for x in np.asarray(act.nvec).ravel()]
        dim = int(obs.shape[0])
        start = int(c["knob_start"])
        self._start = start if start >= 0 else dim + start
        if not 0 <= self._start <= dim - len(self._nvec):
            raise ValueError(f"knob_start {start} does not fit {len(self._nvec)} knobs in a {dim}-dim observation")
        self._hold = float(c["hold_logit"])
        if not np.isfinite(self._hold) or self._hold < 0:
            raise ValueError(f"hold_logit must be a finite number >= 0; got {c['hold_logit']}")
        hidden = [int(h) for h in c["hidden"]]
        self.action_dist_cls = TorchMultiCategorical.get_partial_dist_cls(input_lens=self._nvec)
        self.trunk = _trunk([dim, *hidden])
        self.pi = nn.Linear(hidden[-1], sum(self._nvec))
        nn.init.zeros_(self.pi.weight)  # the residual starts at 0: the warm start is exactly "hold"
        nn.init.zeros_(self.pi.bias)
        self.critic_trunk = _trunk([dim, *hidden])
        self.vf = nn.Linear(hidden[-1], 1)

    def current_one_hot(self, x: torch.Tensor) -> torch.Tensor:
        """One-hot of the current bucket of every knob (read from the observation), concatenated."""
        parts = []
        for j, n in enumerate(self._nvec):
            idx = torch.round(x[:, self._start + j] * (n - 1)).long().clamp(0, n - 1)
            parts.append(nn.functional.one_hot(idx, n).to(x.dtype))
        return torch.cat(parts, dim=-1)

    def hold_logits(self, x: torch.Tensor) -> torch.Tensor:
        """``hold_logit`` on the current bucket of every knob."""
        return self.current_one_hot(x) * self._hold

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.hold_logits(x) + self.pi(self.trunk(x))

    @override(TorchRLModule)
    def _forward_inference(self, batch: dict, **kwargs) -> dict:
        """The deterministic readout (module docstring): logits whose argmax per knob is the residual's,
        ties to the current bucket."""
        x = batch[Columns.OBS].float()
        return {Columns.ACTION_DIST_INPUTS: self.pi(self.trunk(x)) + self.current_one_hot(x) * READOUT_TIE}

    @override(TorchRLModule)
    def _forward(self, batch: dict, **kwargs) -> dict:
        return {Columns.ACTION_DIST_INPUTS: self._logits(batch[Columns.OBS].float())}

    @override(TorchRLModule)
    def _forward_train(self, batch: dict, **kwargs) -> dict:
        out = self._forward(batch)
        out[Columns.EMBEDDINGS] = None
        return out

    @override(ValueFunctionAPI)
    def compute_values(self, batch: dict, embeddings: Any = None) -> torch.Tensor:
        return self.vf(self.critic_trunk(batch[Columns.OBS].float())).squeeze(-1)
