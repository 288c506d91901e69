"""The residual autoscaler: ``scheduled``'s target plus a bounded, gated learned correction.

The base is the production controller that is best on every ServeGen load file we have
(``scheduled``: the training days' p90 rate per window, one start-up delay ahead, 10 % headroom).
The learned part reads the ``residual`` features (``envs/control_features.py``: arrivals and the
training profile only, in replicas) and outputs a correction ``delta`` in replicas:

    target = clamp(sched + clip(round(delta), -max_down, +max_up), 1, max_replicas)

* **Bounded**: the correction never moves the target more than ``max_down`` / ``max_up`` replicas
  from the rule's.
* **Gated**: ``delta = 0`` (the rule's target exactly) whenever a feature lies outside the range the
  training data covered (per-feature ``[low, high]`` stored with the weights, widened by ``margin``
  of each range): on load unlike anything it was trained on the module *is* the rule; and while
  the observed load of the last four windows is within ``deadband`` of the rule's profile (the
  rule's forecast is confirmed: the correction would only chase Poisson noise and bursts).
* **Trained without covariate shift**: the features do not depend on the fleet (no queue, no KV),
  and the teacher (``hindsight``: a dynamic programme over the realized arrivals) does not either, so
  the states a policy visits are the same for every policy and imitation needs no DAgger rounds:
  one supervised fit on many (day, seed) episodes generated without simulating the fleet
  (:func:`episode_samples`, ~0.3 s per day instead of ~25 s).
* **Cost-aware target**: the correction is fitted as the ``quantile`` of the teacher's target minus
  the rule's (pinball loss): a quantile above the median buys margin against a target one replica
  too low, which costs many times more SLO points than one replica's GPU-hours.
* **Optional up-head** (``up_head``): a second net of the same shape fitted to a lower quantile
  caps the *upward* corrections (``min(main, up)``; downward ones are the main net's): the knob
  that trades the replicas added on days busier than the profile (GPU-hours) against SLO points
  without touching the cuts on quiet days.

The module is an ``RLModule`` (``ResidualAutoscalerModule``, export type ``residual_autoscaler``):
its greedy action is the final target, so ``evaluate --policy pretrained:cluster_autoscaling`` and
the Serve endpoint run it like any exported module.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override
from torch import nn

from inferencegym.envs.control_features import RESIDUAL_NAMES, residual_features

BASE_INDEX = RESIDUAL_NAMES.index("sched_target")
LEVEL_INDEX = RESIDUAL_NAMES.index("level_vs_profile")


class ResidualAutoscalerModule(TorchRLModule):
    """model_config: ``hidden`` (list), ``max_down`` / ``max_up`` (replicas), ``margin`` (fraction
    of each feature's training range the gate tolerates beyond it), ``deadband`` (the correction
    applies only while the last four windows' load departs from the profile by more than this
    fraction: where the observed load confirms the rule's forecast, the rule acts). Buffers (saved with the
    weights): input ``mean`` / ``std``, gate ``low`` / ``high``. ``up_head`` (bool): a second net
    (``net_up``) caps upward corrections (zero-initialised: no upward correction until fitted)."""

    @override(TorchRLModule)
    def setup(self) -> None:
        c = self.model_config or {}
        n_in = int(self.observation_space.shape[0])
        hidden = [int(h) for h in c.get("hidden", [32, 32])]
        self.n_actions = int(self.action_space.n)
        self.max_down, self.max_up = int(c.get("max_down", 2)), int(c.get("max_up", 2))
        self.margin = float(c.get("margin", 0.05))
        self.deadband = float(c.get("deadband", 0.0))
        self.net = self._mlp(n_in, hidden)  # untrained: delta 0, the rule itself
        self.net_up = self._mlp(n_in, hidden) if bool(c.get("up_head", False)) else None
        for name, v in (("mean", 0.0), ("std", 1.0), ("low", -np.inf), ("high", np.inf)):
            self.register_buffer(name, torch.full((n_in,), float(v)))

    @staticmethod
    def _mlp(n_in: int, hidden: list[int]) -> nn.Sequential:
        layers: list[nn.Module] = []
        for a, b in zip([n_in, *hidden[:-1]], hidden):
            layers += [nn.Linear(a, b), nn.Tanh()]
        net = nn.Sequential(*layers, nn.Linear(hidden[-1], 1))
        nn.init.zeros_(net[-1].weight)
        nn.init.zeros_(net[-1].bias)
        return net

    def delta(self, x: torch.Tensor, head: str = "main") -> torch.Tensor:
        """The raw learned correction of ``head`` (``main`` or ``up``; replicas, before rounding,
        bounds and gate)."""
        net = self.net if head == "main" else self.net_up
        if net is None:
            raise ValueError(f"this module has no {head!r} head (model_config up_head is false)")
        return net((x - self.mean) / self.std).squeeze(-1)

    def in_range(self, x: torch.Tensor) -> torch.Tensor:
        """True where every feature lies within the gate's widened training range."""
        w = (self.high - self.low).clamp(min=0.0) * self.margin
        w = torch.nan_to_num(w, nan=0.0, posinf=0.0)
        return ((x >= self.low - w) & (x <= self.high + w)).all(dim=-1)

    def target(self, x: torch.Tensor) -> torch.Tensor:
        base = x[..., BASE_INDEX].round()
        d = torch.round(self.delta(x)).clamp(-self.max_down, self.max_up)
        if self.net_up is not None:
            cap = torch.round(self.delta(x, "up")).clamp(0, self.max_up)
            d = torch.where(d > 0, torch.minimum(d, cap), d)
        act = self.in_range(x) & ((x[..., LEVEL_INDEX] - 1.0).abs() > self.deadband)
        d = torch.where(act, d, torch.zeros_like(d))
        return (base + d).clamp(1, self.n_actions - 1)

    @override(TorchRLModule)
    def _forward(self, batch: dict, **kwargs) -> dict:
        x = batch[Columns.OBS].float()
        t = self.target(x)
        a = torch.arange(self.n_actions, dtype=x.dtype, device=x.device)
        return {Columns.ACTION_DIST_INPUTS: -10.0 * (a[None, :] - t[:, None]).abs()}

    @override(TorchRLModule)
    def _forward_train(self, batch: dict, **kwargs) -> dict:
        return self._forward(batch)


# ------------------------------------------------------------------------------ training data


@dataclasses.dataclass(frozen=True, kw_only=True)
class EpisodeSource:
    """One training episode: a day of a windows file, and which profile the controllers get."""

    windows_path: str
    """ServeGen windows file."""
    day: int
    """Day index in that file."""
    seed: int
    """Arrival seed (the same ``default_rng([seed, day])`` stream as ``evaluate``)."""
    own_profile: bool = False
    """True: the day played as a one-day file (its own curve is the profile, its own peak the scale),
    the regime of a held-out one-day file."""
    scale: float = 1.0
    """Multiplier of the day's rates (the profile is unchanged): a day busier or quieter than the
    file's training days (augmentation)."""


def episode_samples(task: Any, src: EpisodeSource) -> tuple[np.ndarray, np.ndarray]:
    """(features ``RESIDUAL_NAMES`` per control step, the ``hindsight`` target per step) of one
    episode, from its arrivals alone (no fleet is simulated)."""
    from inferencegym.policies.autoscalers import make_autoscaler
    from inferencegym.tasks.control import arrivals, control_context, day_rates, load_windows

    windows = load_windows(src.windows_path)
    day = src.day
    if src.own_profile:
        windows, day = windows[src.day:src.day + 1], 0
    rates = day_rates(task, windows, day)
    ctx = control_context(task, windows, rates, startup_s=startup_s(task))
    rates = rates * src.scale
    a_rng, _ = np.random.default_rng([src.seed, src.day]).spawn(2)
    arr = arrivals(task, rates, a_rng)
    teacher = make_autoscaler("hindsight")
    teacher.reset(dataclasses.replace(ctx, future_arrivals_s=arr["arrival_s"]))
    n_win = 144 if task.episode_s is None else max(1, int(round(task.episode_s / task.window_s)))
    ticks = int(round(n_win * task.window_s))  # 1 s ticks, as the fleet's history
    edges = np.arange(1, ticks + 1, dtype=float)
    counts = np.diff(np.concatenate([[0], np.searchsorted(arr["arrival_s"], edges, side="left")])).tolist()
    xs, ys = [], []
    for k in range(int(round(n_win * task.window_s / task.interval_s))):
        now = k * task.interval_s
        xs.append(residual_features(counts[:int(round(now))], now, 1.0, ctx))
        ys.append(teacher.act(SimpleNamespace(now_s=now)))  # Hindsight reads only the time
    return np.stack(xs), np.asarray(ys, dtype=np.float32)


_STARTUP: dict[str, float] = {}


def startup_s(task: Any) -> float:
    """The task's expected start-up delay (the fleet's ``lifecycle.startup_s()``, what ``evaluate`` passes)."""
    if task.task_id not in _STARTUP:
        from inferencegym.sim.config import ClusterConfig, ReplicaConfig
        from inferencegym.sim.fleet import Fleet, FleetConfig
        from inferencegym.tasks.control import lifecycle_config

        cc = ClusterConfig(replica=ReplicaConfig(model=task.model, gpu=task.gpu, tensor_parallel=task.tensor_parallel),
                           router="least_outstanding_requests", tenants=task.tenants())
        none = {"arrival_s": np.zeros(0), "prompt_tokens": np.zeros(0, int), "output_tokens": np.zeros(0, int),
                "tenant": np.zeros(0, int)}
        fleet = Fleet(cc, FleetConfig(lifecycle=lifecycle_config(task, False), tenant_tiers=task.tenant_tiers()),
                      none, rng=np.random.default_rng(0))
        _STARTUP[task.task_id] = fleet.lifecycle.startup_s()
    return _STARTUP[task.task_id]


# ------------------------------------------------------------------------------ fitting


def fit_residual(module: ResidualAutoscalerModule, x: np.ndarray, y: np.ndarray, *, quantile: float,
                 epochs: int = 20, batch: int = 1024, lr: float = 3e-3, seed: int = 0,
                 gate_pct: float = 0.05, head: str = "main") -> list[float]:
    """Fit ``head``'s correction (``main``, or ``up``: the cap on upward corrections) to the
    ``quantile`` of ``y - sched`` (pinball loss); ``main`` also sets the input normalisation and the
    gate's range (the ``gate_pct`` / ``100 - gate_pct`` percentiles). Returns the loss per epoch."""
    net = module.net if head == "main" else module.net_up
    if net is None:
        raise ValueError(f"this module has no {head!r} head: build it with model_config up_head=True")
    if head == "main":
        with torch.no_grad():
            module.mean.copy_(torch.as_tensor(x.mean(0)))
            module.std.copy_(torch.as_tensor(np.maximum(x.std(0), 1e-3)))
            module.low.copy_(torch.as_tensor(np.percentile(x, gate_pct, axis=0)))
            module.high.copy_(torch.as_tensor(np.percentile(x, 100 - gate_pct, axis=0)))
    xt = torch.as_tensor(x, dtype=torch.float32)
    rt = torch.as_tensor(y - x[:, BASE_INDEX], dtype=torch.float32)
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    losses = []
    for _ in range(epochs):
        perm = torch.randperm(len(xt), generator=g)
        tot = 0.0
        for i in range(0, len(xt), batch):
            idx = perm[i:i + batch]
            err = rt[idx] - module.delta(xt[idx], head)
            loss = torch.maximum(quantile * err, (quantile - 1) * err).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += float(loss.detach()) * len(idx)
        losses.append(tot / len(xt))
    return losses
