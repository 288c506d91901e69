"""RLlib ``TorchRLModule``s for InferenceGym (new API stack, PPO-compatible).

Six modules, all with ``ValueFunctionAPI`` (the value head reuses the shared encoder, so PPO runs
the encoder once per train batch); RLlib hooks carry ``@override``:

- :class:`ReplicaAttentionRouter` - the cluster router. Each replica's feature row is embedded by a
  per-replica MLP, replicas attend to each other (``nn.MultiheadAttention``), and a policy head scores
  every replica token, so there is one logit per replica and **no parameter depends on the number of
  replicas** (a module trained on 4 replicas runs on 16). The action mask sets the logits of excluded
  replicas to a large negative number.
- :class:`MLPRouter` - the ablation: the same observation flattened into a plain MLP (fixed N).
- :class:`MLPModule` - a generic MLP for Box / Dict observations and Discrete / MultiDiscrete actions:
  the single-agent ``LLMServe-v0`` env (flat MultiDiscrete wrapper) and the replica agents.
- :class:`ReplicaAgentModule` - ``MLPModule`` with smaller defaults for the replica agents.
- :class:`HoldKnobsModule` - a fixed (non-learning) replica policy that keeps each replica's knobs.
- :class:`LSTMModule` - RLlib's own default PPO module with ``use_lstm=True`` (config type ``lstm``):
  the single-agent policy carries a recurrent state across windows instead of seeing a stacked
  history (``history_windows`` of ``mlp``). RLlib's connectors add the state and the time axis.

Router observation: either a ``Dict`` with the keys named in ``model_config`` (defaults
``"replicas"``: Box (N, F), ``"request"``: Box (R,), ``"action_mask"``: Box/MultiBinary (N,)), or a bare
Box (N, F). Keys that are absent are simply not used.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchMultiCategorical
from ray.rllib.core.rl_module.apis import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override
from torch import nn

import inferencegym.rl.rllib_compat  # noqa: F401  (RLlib's own RLModuleConfig notice, see there)
from inferencegym.rl.control_residual import ResidualAutoscalerModule
from inferencegym.rl.affinity_router import AffinityRouterModule
from inferencegym.rl.fixed_modules import EstTTFTRouterModule
from inferencegym.rl.replica_modules import StickyReplicaModule

#: Logit given to masked-out actions. Large but finite: if every action were masked the
#: distribution stays uniform instead of NaN, and entropy/KL stay finite.
MASKED_LOGIT = -1.0e9

ROUTER_DEFAULTS: dict[str, Any] = {
    "replicas_key": "replicas",
    "request_key": "request",
    "mask_key": "action_mask",
    "present_key": "present",
    "embed_dim": 32,
    "num_heads": 4,
    "num_attention_layers": 1,
    "hidden": 64,
}
MLP_DEFAULTS: dict[str, Any] = {"hidden": [64, 64], "mask_key": "action_mask",
                                 # single-agent env: the observation carries the last K windows and
                                 # their moving average (envs/history.py); recorded here so training
                                 # (env wrapper) and inference (policy loader) stack the same way
                                 "history_windows": 0, "history_ema_weight": 0.3,
                                 # with history: the observable phase forecast's features follow
                                 # the stack (envs/phase_detector.py, issue 21)
                                 "phase_features": False,
                                 # asymmetric actor-critic (issue 21): the last K observation
                                 # features are privileged (rl/env_creators.PrivilegedCriticFeatures,
                                 # training envs only); the actor never reads them, a separate
                                 # critic trunk reads the whole observation
                                 "critic_privileged_dims": 0}


def _cfg(model_config: Any, defaults: dict[str, Any]) -> dict[str, Any]:
    """Merge the module's ``model_config`` (dict or DefaultModelConfig) over ``defaults``."""
    given = dict(model_config) if isinstance(model_config, dict) else {}
    # RLlib may merge its DefaultModelConfig fields (fcnet_hiddens, ...) into model_config: ignore them.
    from dataclasses import fields

    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    rllib_keys = {f.name for f in fields(DefaultModelConfig)} | {"_disable_action_flattening"}
    given = {k: v for k, v in given.items() if k not in rllib_keys}
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise ValueError(f"unknown model_config keys {unknown}; valid: {sorted(defaults)}")
    return {**defaults, **given}


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.Tanh()]
    return nn.Sequential(*layers)


def apply_mask(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Logits of actions whose mask entry is < 0.5 become :data:`MASKED_LOGIT`."""
    if mask is None:
        return logits
    return torch.where(mask.to(logits.dtype) > 0.5, logits, torch.full_like(logits, MASKED_LOGIT))


def _flat_size(space: gym.Space) -> int:
    return int(gym.spaces.flatdim(space))


def _flatten_obs(obs: Any, skip: str | None) -> torch.Tensor:
    """Flatten a (batched) Box or Dict observation into (B, D), Dict keys in sorted order.

    The mask key is skipped (it is applied to the logits, not fed to the network)."""
    if isinstance(obs, dict):
        parts = [obs[k].float().flatten(1) for k in sorted(obs) if k != skip]
        return torch.cat(parts, dim=-1)
    return obs.float().flatten(1)


class ReplicaAttentionRouter(TorchRLModule, ValueFunctionAPI):
    """Cross-replica attention router: one logit per replica, for any number of replicas.

    model_config: ``embed_dim`` (32), ``num_heads`` (4), ``num_attention_layers`` (1), ``hidden`` (64),
    ``replicas_key``/``request_key``/``mask_key``/``present_key`` (Dict observation keys).

    Absent replicas: when the observation has a ``present`` entry (1 for replicas that exist now:
    the control-plane env's serving slots), the others are left out of the attention (key padding)
    and of the pooled context, so a provisioning, draining or released slot cannot change the
    scores of the serving ones. Without the key every row is present (the cluster env).
    """

    @override(TorchRLModule)
    def setup(self) -> None:
        c = _cfg(self.model_config, ROUTER_DEFAULTS)
        self._keys = (c["replicas_key"], c["request_key"], c["mask_key"])
        self._present_key = c["present_key"]
        obs_space = self.observation_space
        if isinstance(obs_space, gym.spaces.Dict):
            if c["replicas_key"] not in obs_space.spaces:
                raise ValueError(f"router observation Dict has no {c['replicas_key']!r} key; "
                                 f"has {sorted(obs_space.spaces)} (set model_config replicas_key)")
            rep_space = obs_space[c["replicas_key"]]
            req_space = obs_space.spaces.get(c["request_key"])
        else:
            rep_space, req_space = obs_space, None
        if not isinstance(rep_space, gym.spaces.Box) or len(rep_space.shape) != 2:
            raise ValueError(f"router replica features must be a Box of shape (N, F); got {rep_space}")
        if not isinstance(self.action_space, gym.spaces.Discrete):
            raise ValueError(f"router action space must be Discrete(N); got {self.action_space}")
        n, f = rep_space.shape
        if self.action_space.n != n:
            raise ValueError(f"router action space Discrete({self.action_space.n}) does not match "
                             f"{n} replica rows")
        d, hid = int(c["embed_dim"]), int(c["hidden"])
        if d % int(c["num_heads"]):
            raise ValueError(f"embed_dim {d} must be divisible by num_heads {c['num_heads']}")
        req_dim = _flat_size(req_space) if req_space is not None else 0
        self.replica_embed = nn.Sequential(nn.Linear(f, d), nn.ReLU(), nn.Linear(d, d))
        self.request_embed = nn.Linear(req_dim, d) if req_dim else None
        self.attn_layers = nn.ModuleList(
            nn.MultiheadAttention(d, int(c["num_heads"]), batch_first=True)
            for _ in range(int(c["num_attention_layers"])))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(int(c["num_attention_layers"])))
        # Shared encoder: mean- and max-pooled replica tokens (+ request) -> hidden.
        self.encoder = nn.Sequential(nn.Linear(2 * d + (d if req_dim else 0), hid), nn.ReLU())
        # Policy head scores each replica token together with the shared context.
        self.score = nn.Sequential(nn.Linear(d + hid, hid), nn.ReLU(), nn.Linear(hid, 1))
        self.vf = nn.Linear(hid, 1)  # light value head on the shared encoder

    def _split(self, obs: Any) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        rk, qk, mk = self._keys
        if isinstance(obs, dict):
            req = obs.get(qk)
            return obs[rk].float(), (req.float().flatten(1) if req is not None else None), obs.get(mk)
        return obs.float(), None, None

    def _present(self, obs: Any) -> torch.Tensor | None:
        """(B, N) bool of present replicas, or None (all present). A row with none present counts
        all (attention over an empty key set is undefined)."""
        p = obs.get(self._present_key) if isinstance(obs, dict) else None
        if p is None:
            return None
        p = p > 0.5
        return p | ~p.any(dim=1, keepdim=True)

    def _encode(self, obs: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        reps, req, mask = self._split(obs)
        present = self._present(obs)
        x = self.replica_embed(reps)  # (B, N, d)
        if self.request_embed is not None and req is not None:
            q = self.request_embed(req)
            x = x + q.unsqueeze(1)  # condition every replica token on the arriving request
        pad = None if present is None else ~present
        for attn, norm in zip(self.attn_layers, self.norms):
            a, _ = attn(x, x, x, key_padding_mask=pad, need_weights=False)
            x = norm(x + a)
        if present is None:
            pooled = [x.mean(dim=1), x.max(dim=1).values]
        else:
            w = present.unsqueeze(-1).to(x.dtype)
            pooled = [(x * w).sum(dim=1) / w.sum(dim=1),
                      x.masked_fill(~present.unsqueeze(-1), torch.finfo(x.dtype).min).max(dim=1).values]
        if self.request_embed is not None and req is not None:
            pooled.append(q)
        shared = self.encoder(torch.cat(pooled, dim=-1))  # (B, hid)
        return x, shared, mask

    def _logits(self, tokens: torch.Tensor, shared: torch.Tensor, mask: Any) -> torch.Tensor:
        ctx = shared.unsqueeze(1).expand(-1, tokens.shape[1], -1)
        logits = self.score(torch.cat([tokens, ctx], dim=-1)).squeeze(-1)  # (B, N)
        return apply_mask(logits, mask)

    @override(TorchRLModule)
    def _forward(self, batch: dict, **kwargs) -> dict:
        tokens, shared, mask = self._encode(batch[Columns.OBS])
        return {Columns.ACTION_DIST_INPUTS: self._logits(tokens, shared, mask)}

    @override(TorchRLModule)
    def _forward_train(self, batch: dict, **kwargs) -> dict:
        tokens, shared, mask = self._encode(batch[Columns.OBS])
        return {Columns.ACTION_DIST_INPUTS: self._logits(tokens, shared, mask),
                Columns.EMBEDDINGS: shared}

    @override(ValueFunctionAPI)
    def compute_values(self, batch: dict, embeddings: Any = None) -> torch.Tensor:
        if embeddings is None:
            _, embeddings, _ = self._encode(batch[Columns.OBS])
        return self.vf(embeddings).squeeze(-1)


class _FlatMLPBase(TorchRLModule, ValueFunctionAPI):
    """Shared-trunk MLP over the flattened observation; policy and value heads on the trunk."""

    _defaults = MLP_DEFAULTS

    @override(TorchRLModule)
    def setup(self) -> None:
        c = _cfg(self.model_config, self._defaults)
        hidden = [int(h) for h in (c["hidden"] if isinstance(c["hidden"], (list, tuple))
                                   else [c["hidden"]])]
        self._mask_key = c["mask_key"]
        obs_space = self.observation_space
        if isinstance(obs_space, gym.spaces.Dict):
            in_dim = sum(_flat_size(s) for k, s in obs_space.spaces.items() if k != self._mask_key)
        elif isinstance(obs_space, gym.spaces.Box):
            in_dim = _flat_size(obs_space)
        else:
            raise ValueError(f"observation space must be a Box or Dict of Boxes; got {obs_space}")
        act = self.action_space
        if isinstance(act, gym.spaces.MultiDiscrete):
            nvec = [int(x) for x in np.asarray(act.nvec).ravel()]
            out = sum(nvec)
            self.action_dist_cls = TorchMultiCategorical.get_partial_dist_cls(input_lens=nvec)
        elif isinstance(act, gym.spaces.Discrete):
            out = int(act.n)
        else:
            raise ValueError(f"action space must be Discrete or MultiDiscrete; got {act} "
                             "(wrap Dict action spaces with the env's flat MultiDiscrete wrapper)")
        self._priv = int(c.get("critic_privileged_dims", 0) or 0)
        if self._priv and (self._priv >= in_dim or isinstance(obs_space, gym.spaces.Dict)):
            raise ValueError(f"critic_privileged_dims {self._priv} needs a Box observation with more "
                             f"features than that; got {obs_space}")
        self.trunk = _mlp([in_dim - self._priv, *hidden])
        self.pi = nn.Linear(hidden[-1], out)
        self.vf = nn.Linear(hidden[-1], 1)
        # asymmetric critic: its own trunk on the whole observation (privileged features included)
        self.critic_trunk = _mlp([in_dim, *hidden]) if self._priv else None

    def _encode(self, obs: Any) -> tuple[torch.Tensor, Any]:
        mask = obs.get(self._mask_key) if isinstance(obs, dict) else None
        x = _flatten_obs(obs, self._mask_key)
        if self._priv:
            x = x[:, :-self._priv]  # the actor's input: never the privileged features
        return self.trunk(x), mask

    @override(TorchRLModule)
    def _forward(self, batch: dict, **kwargs) -> dict:
        emb, mask = self._encode(batch[Columns.OBS])
        return {Columns.ACTION_DIST_INPUTS: self._masked(self.pi(emb), mask)}

    @override(TorchRLModule)
    def _forward_train(self, batch: dict, **kwargs) -> dict:
        emb, mask = self._encode(batch[Columns.OBS])
        return {Columns.ACTION_DIST_INPUTS: self._masked(self.pi(emb), mask),
                Columns.EMBEDDINGS: emb}

    def _masked(self, logits: torch.Tensor, mask: Any) -> torch.Tensor:
        if mask is None or not isinstance(self.action_space, gym.spaces.Discrete):
            return logits
        return apply_mask(logits, mask)

    @override(ValueFunctionAPI)
    def compute_values(self, batch: dict, embeddings: Any = None) -> torch.Tensor:
        if self.critic_trunk is not None:  # asymmetric: the critic's own trunk, whole observation
            return self.vf(self.critic_trunk(_flatten_obs(batch[Columns.OBS], self._mask_key))).squeeze(-1)
        if embeddings is None:
            embeddings, _ = self._encode(batch[Columns.OBS])
        return self.vf(embeddings).squeeze(-1)


class MLPModule(_FlatMLPBase):
    """Plain MLP for the single-agent env (Box obs, MultiDiscrete action). model_config: ``hidden``."""


class ReplicaAgentModule(_FlatMLPBase):
    """MLP for the replica agents (own state + cluster summary -> local knobs). Smaller default."""

    _defaults = {**MLP_DEFAULTS, "hidden": [32, 32]}


class MLPRouter(_FlatMLPBase):
    """Ablation router: flattened (N x F) features + request through an MLP; N logits, masked.

    Unlike :class:`ReplicaAttentionRouter` it is tied to the number of replicas it was built for."""

    _defaults = {**MLP_DEFAULTS, "hidden": [128, 64]}


class HoldKnobsModule(TorchRLModule, ValueFunctionAPI):
    """A fixed (non-learning) replica policy that keeps each replica's current knobs.

    The replica observation carries the current knobs as bucket indices / (buckets - 1) starting at
    ``knob_start`` (negative: counted from the end; the cluster env puts the 4 knobs before the last 2
    features, hence -6). The logits put ``HOLD_LOGIT`` on that index of every MultiDiscrete
    component, so sampling returns the current knobs (almost surely) and the replicas keep the task's
    defaults: used when only the router is trained. One dummy parameter keeps optimizers happy;
    map it to a module that is not in ``policies_to_train``.
    """

    HOLD_LOGIT = 30.0

    @override(TorchRLModule)
    def setup(self) -> None:
        c = _cfg(self.model_config, {"knob_start": -6})
        act = self.action_space
        if not isinstance(act, gym.spaces.MultiDiscrete):
            raise ValueError(f"HoldKnobsModule needs a MultiDiscrete action space; got {act}")
        self._nvec = [int(x) for x in np.asarray(act.nvec).ravel()]
        dim = _flat_size(self.observation_space)
        start = int(c["knob_start"])
        self._start = start if start >= 0 else dim + start
        if not 0 <= self._start <= dim - len(self._nvec):
            raise ValueError(f"knob_start {start} does not fit {len(self._nvec)} knobs in a {dim}-dim observation")
        self.action_dist_cls = TorchMultiCategorical.get_partial_dist_cls(input_lens=self._nvec)
        self.dummy = nn.Parameter(torch.zeros(1))

    @override(TorchRLModule)
    def _forward(self, batch: dict, **kwargs) -> dict:
        x = _flatten_obs(batch[Columns.OBS], None)
        parts = []
        for j, n in enumerate(self._nvec):
            idx = torch.round(x[:, self._start + j] * (n - 1)).long().clamp(0, n - 1)
            parts.append(nn.functional.one_hot(idx, n).float() * self.HOLD_LOGIT)
        return {Columns.ACTION_DIST_INPUTS: torch.cat(parts, dim=-1) + 0.0 * self.dummy}

    @override(TorchRLModule)
    def _forward_train(self, batch: dict, **kwargs) -> dict:
        out = self._forward(batch)
        out[Columns.EMBEDDINGS] = None
        return out

    @override(ValueFunctionAPI)
    def compute_values(self, batch: dict, embeddings: Any = None) -> torch.Tensor:
        obs = batch[Columns.OBS]
        b = next(iter(obs.values())).shape[0] if isinstance(obs, dict) else obs.shape[0]
        return torch.zeros(b) + 0.0 * self.dummy


#: Defaults of :class:`LSTMModule` (keys of RLlib's ``DefaultModelConfig``): an MLP tokenizer of one
#: 64-unit layer, a 64-cell LSTM, linear policy and value heads on the shared LSTM output (like
#: ``mlp``'s shared trunk), trained on sequences of up to 20 windows.
LSTM_DEFAULTS: dict[str, Any] = {"fcnet_hiddens": [64], "fcnet_activation": "tanh", "lstm_cell_size": 64,
                                 "max_seq_len": 20, "head_fcnet_hiddens": [], "vf_share_layers": True}


def lstm_model_config(model_config: Any) -> dict[str, Any]:
    """``model_config`` of a ``type: lstm`` module: :data:`LSTM_DEFAULTS` under the given keys, with
    ``use_lstm=True``. Only ``DefaultModelConfig`` fields are accepted (RLlib builds the module)."""
    from dataclasses import asdict, fields, is_dataclass

    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    given = asdict(model_config) if is_dataclass(model_config) else dict(model_config or {})
    valid = {f.name for f in fields(DefaultModelConfig)}
    unknown = sorted(set(given) - valid)
    if unknown:
        hint = (" (history_windows is for type mlp: the LSTM keeps its own history in its state)"
                if any(k.startswith("history_") for k in unknown) else "")
        raise ValueError(f"unknown model_config keys {unknown} for module type lstm{hint}; valid: the "
                         "fields of RLlib's DefaultModelConfig, e.g. lstm_cell_size, max_seq_len, "
                         "fcnet_hiddens, head_fcnet_hiddens, vf_share_layers")
    if given.get("use_lstm") is False:
        raise ValueError("module type lstm needs use_lstm=True (drop the key); use type mlp for a "
                         "feed-forward policy")
    return {**LSTM_DEFAULTS, **given, "use_lstm": True}


class LSTMModule(DefaultPPOTorchRLModule):
    """RLlib's default PPO torch module built with ``use_lstm=True`` (obs -> MLP tokenizer -> LSTM ->
    policy / value heads). model_config: ``DefaultModelConfig`` fields over :data:`LSTM_DEFAULTS`.

    The constructor only completes ``model_config`` before RLlib's catalog reads it (the catalog
    builds the encoder in ``RLModule.__init__``, before ``setup``); re-building from a checkpoint
    applies the same (idempotent) completion."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["model_config"] = lstm_model_config(kwargs.get("model_config"))
        obs_space = kwargs.get("observation_space")
        if obs_space is not None and not (isinstance(obs_space, gym.spaces.Box) and len(obs_space.shape) == 1):
            raise ValueError(f"module type lstm needs a flat (1-D Box) observation; got {obs_space} "
                             "(RLlib's LSTM encoder supports 1-D inputs only)")
        super().__init__(*args, **kwargs)


#: Names usable as ``type`` in the YAML configs.
MODULE_TYPES: dict[str, type[TorchRLModule]] = {
    "attention_router": ReplicaAttentionRouter,
    "mlp_router": MLPRouter,
    "mlp": MLPModule,
    "replica_mlp": ReplicaAgentModule,
    "hold_knobs": HoldKnobsModule,
    "replica_sticky": StickyReplicaModule,
    "est_ttft_router": EstTTFTRouterModule,
    "affinity_router": AffinityRouterModule,
    "lstm": LSTMModule,
    "residual_autoscaler": ResidualAutoscalerModule,
}
#: Module types whose policy carries a recurrent state (single-agent env only; no behaviour cloning).
RECURRENT_TYPES = frozenset({"lstm"})


def module_class(name: str) -> type[TorchRLModule]:
    """Module class by config name; raises ``ValueError`` listing valid names."""
    try:
        return MODULE_TYPES[name]
    except KeyError:
        raise ValueError(f"unknown module type {name!r}; valid: {', '.join(sorted(MODULE_TYPES))}") from None
