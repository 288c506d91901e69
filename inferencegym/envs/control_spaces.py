"""Spaces and observations of the control-plane ``MultiAgentEnv`` (``envs/control_cluster_env.py``).

No RLlib import here: policies and tools use the names without paying for Ray.

Agents (ids): ``AUTOSCALER``, ``ADMISSION``, ``ROUTER`` and ``replica_{i}`` for every fleet slot
``i < max_replicas``. A slot's replica agent exists only while its replica is serving (lifecycle
state ``up``); provisioning, loading, warming, draining and released slots have no agent, and the
router's ``present`` and ``action_mask`` entries for them are 0.
"""

from __future__ import annotations

import math

import numpy as np
from gymnasium import spaces

from inferencegym.envs.cluster_spaces import FEATURE_CLIP, KNOB_BUCKETS, REPLICA_ACTION_NVEC
from inferencegym.envs.control_features import ADMISSION_NAMES, feature_names
from inferencegym.sim.gateway import ADMISSION_LEVELS
from inferencegym.sim.lifecycle import DRAINING, LOADING, PROVISIONING, UP, WARMING

AUTOSCALER = "autoscaler"
ADMISSION = "admission"
ROUTER = "router"

SLOT_FEATURES: tuple[str, ...] = ("up", "starting", "draining", "queue_5", "running_per_concurrency",
                                  "kv_occupancy", "outstanding_per_concurrency")
"""Columns of the router's ``"replicas"`` rows, one row per fleet slot: lifecycle flags (serving;
provisioning / loading / warming; draining), waiting requests / 5 (HPA's and WVA's queue target),
running and running + waiting requests / the measured concurrency at capacity, KV occupancy. The
load columns are 0 on a slot that is not serving."""
REQUEST_FEATURES: tuple[str, ...] = ("prompt_norm", "prompt_log", "tier_critical", "tier_standard", "tier_sheddable")
"""The router's ``"request"`` vector: prompt tokens / 4096, log1p(prompt) / log1p(32768), tier one-hot."""
REPLICA_AGENT_FEATURES: tuple[str, ...] = (tuple(f"own_{c}" for c in SLOT_FEATURES)
                                           + tuple(f"mean_{c}" for c in SLOT_FEATURES)
                                           + ("knob_batch_cap", "knob_kv_budget", "knob_speculation", "knob_chunk"))
"""A replica agent's observation: its own slot row, the mean row over serving slots, its knobs
as bucket index / (buckets - 1)."""


def agent_spaces(max_replicas: int, autoscaler_features: str) -> tuple[dict, dict]:
    """(observation spaces, action spaces) of every possible agent."""
    n, F = max_replicas, len(SLOT_FEATURES)
    obs = {AUTOSCALER: spaces.Box(-1.0, np.inf, (len(feature_names(autoscaler_features)),), np.float32),
           ADMISSION: spaces.Box(-1.0, np.inf, (len(ADMISSION_NAMES),), np.float32),
           ROUTER: spaces.Dict({
               "replicas": spaces.Box(-FEATURE_CLIP, FEATURE_CLIP, (n, F), np.float32),
               "request": spaces.Box(-FEATURE_CLIP, FEATURE_CLIP, (len(REQUEST_FEATURES),), np.float32),
               "action_mask": spaces.Box(0.0, 1.0, (n,), np.float32),
               "present": spaces.Box(0.0, 1.0, (n,), np.float32)})}
    act = {AUTOSCALER: spaces.Discrete(n + 1), ADMISSION: spaces.Discrete(len(ADMISSION_LEVELS)),
           ROUTER: spaces.Discrete(n)}
    rep_obs = spaces.Box(-FEATURE_CLIP, FEATURE_CLIP, (len(REPLICA_AGENT_FEATURES),), np.float32)
    rep_act = spaces.MultiDiscrete(list(REPLICA_ACTION_NVEC))
    for i in range(n):
        obs[f"replica_{i}"], act[f"replica_{i}"] = rep_obs, rep_act
    return obs, act


def slot_rows(fleet, concurrency_at_capacity: float) -> np.ndarray:
    """(max_replicas, len(SLOT_FEATURES)) float32 rows of every fleet slot."""
    lc, reps = fleet.lifecycle, fleet.cluster.replicas
    out = np.zeros((len(lc.state), len(SLOT_FEATURES)), np.float32)
    for i, s in enumerate(lc.state):
        out[i, 1] = s in (PROVISIONING, LOADING, WARMING)
        out[i, 2] = s == DRAINING
        if s == UP:
            r = reps[i]
            q, run = r.queued(), len(r.running)
            out[i, 0] = 1.0
            out[i, 3:] = (q / 5.0, run / concurrency_at_capacity, r.kv_occupancy(),
                          (q + run) / concurrency_at_capacity)
    return np.clip(out, -FEATURE_CLIP, FEATURE_CLIP)


def request_row(req, tier: int) -> np.ndarray:
    p = float(req.prompt_tokens)
    onehot = [float(tier == k) for k in range(3)]
    return np.asarray([p / 4096.0, math.log1p(p) / math.log1p(32768.0), *onehot], np.float32)


def knob_indices(cfg) -> np.ndarray:
    """A replica config's knobs as the nearest bucket indices of ``KNOB_BUCKETS``."""
    vals = (cfg.batch_cap, cfg.kv_budget_fraction, cfg.speculation_depth, cfg.chunk_size)
    return np.asarray([int(np.argmin([abs(b - v) for b in bs])) for bs, v in zip(KNOB_BUCKETS, vals)], np.int64)
