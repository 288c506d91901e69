"""Spaces of the cluster env: named observation columns, the agents' spaces, action parsing.

No RLlib import here (``ClusterEnv`` itself subclasses RLlib's ``MultiAgentEnv``): policies and
tools use these names without paying for Ray.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from inferencegym.tasks.cluster import (
    BATCH_CAP_BUCKETS,
    CHUNK_BUCKETS,
    KV_FRACTION_BUCKETS,
    SPECULATION_BUCKETS,
)

ROUTER = "router"
"""Agent id of the global router (replica agents are ``replica_0`` .. ``replica_{N-1}``)."""
ROUTER_FEATURES: tuple[str, ...] = (
    "queue_len", "oldest_wait", "mean_wait", "running", "kv_occupancy", "p90_ttft", "p90_tbt",
    "load_trend", "load_by_capacity", "relative_speed", "prompt_fits", "est_ttft")
"""Columns of the router's ``"replicas"`` matrix (see ``cluster_env``'s docstring for the normalisation)."""
PREFIX_FEATURES: tuple[str, ...] = ("cached_share", "cache_occupancy", "recent_hit_rate")
"""Columns appended on prefix-sharing tasks (:func:`router_features`): share of the arriving prompt
cached on the replica as last published, the replica's published cached blocks / KV capacity, and
its recent token-weighted prefix hit rate (what vLLM's metrics report)."""
COL: dict[str, int] = {name: i for i, name in enumerate(ROUTER_FEATURES + PREFIX_FEATURES)}
"""Column index of each router feature: ``feats[:, COL["est_ttft"]]`` (the prefix columns exist
only on prefix-sharing tasks; the first 12 are the same on every task)."""
REQUEST_FEATURES: tuple[str, ...] = ("prompt_norm", "prompt_log", "tenant_0", "tenant_1", "priority")
"""Entries of the router's ``"request"`` vector."""
REQ: dict[str, int] = {name: i for i, name in enumerate(REQUEST_FEATURES)}
"""Index of each request feature."""
REPLICA_EXTRA_FEATURES: tuple[str, ...] = ("knob_batch_cap", "knob_kv_budget", "knob_speculation",
                                           "knob_chunk", "last_throughput", "last_slo_attainment")
"""What a replica agent sees after its own feature row and the cluster-mean row."""
MAX_TENANTS = 2
"""Tenant one-hot slots of the request vector (tasks have at most 2 tenants)."""
FEATURE_CLIP = 100.0
"""Every observation value is clipped to [-FEATURE_CLIP, FEATURE_CLIP] (stated clip)."""
PROMPT_NORM_TOKENS = 4096.0
"""``prompt_norm`` = prompt tokens / this."""
PROMPT_LOG_MAX_TOKENS = 32768.0
"""``prompt_log`` = log1p(prompt) / log1p(this)."""
KNOB_BUCKETS: tuple[tuple, ...] = (BATCH_CAP_BUCKETS, KV_FRACTION_BUCKETS, SPECULATION_BUCKETS,
                                   CHUNK_BUCKETS)
"""A replica action indexes these (batch cap, KV budget fraction, speculation depth, chunk size)."""
REPLICA_ACTION_NVEC: tuple[int, ...] = tuple(len(b) for b in KNOB_BUCKETS)
"""``MultiDiscrete`` sizes of a replica action."""


def router_features(task: Any) -> tuple[str, ...]:
    """The router's columns on ``task``: :data:`ROUTER_FEATURES`, plus :data:`PREFIX_FEATURES` when
    its workload shares prefixes (``process="prefix"``). Gated on the task so the other tasks keep
    their 12 columns: their observations and the shipped modules trained on them are unchanged,
    and the cross-replica attention module takes any column count on the new tasks."""
    return ROUTER_FEATURES + PREFIX_FEATURES if task.workload.process == "prefix" else ROUTER_FEATURES


def router_observation_space(n: int, num_features: int = len(ROUTER_FEATURES)) -> spaces.Dict:
    F = num_features
    return spaces.Dict({
        "replicas": spaces.Box(-FEATURE_CLIP, FEATURE_CLIP, (n, F), np.float32),
        "request": spaces.Box(-FEATURE_CLIP, FEATURE_CLIP, (len(REQUEST_FEATURES),), np.float32),
        "action_mask": spaces.Box(0.0, 1.0, (n,), np.float32),
    })


def replica_observation_space(num_features: int = len(ROUTER_FEATURES)) -> spaces.Box:
    dim = 2 * num_features + len(REPLICA_EXTRA_FEATURES)
    return spaces.Box(-FEATURE_CLIP, FEATURE_CLIP, (dim,), np.float32)


def replica_action_space() -> spaces.MultiDiscrete:
    return spaces.MultiDiscrete(list(REPLICA_ACTION_NVEC))


def nearest_bucket(buckets: tuple, value: float) -> int:
    """Index of the bucket closest to ``value``."""
    return int(np.argmin([abs(b - value) for b in buckets]))


def parse_router_action(x: Any) -> int:
    """The router's action as an int (ValueError for anything that is not one integer)."""
    if type(x) is int:  # the common cases first, without numpy's checks
        return x
    if isinstance(x, np.integer):
        return int(x)
    try:
        if isinstance(x, (bool, np.bool_)):
            raise TypeError
        arr = np.asarray(x)
        if arr.shape != () or not np.issubdtype(arr.dtype, np.integer):
            raise TypeError
        return int(arr)
    except (TypeError, ValueError):
        raise ValueError(f"router action must be an integer, got {x!r}") from None


_INT64 = np.dtype(np.int64)
"""The native int64 dtype (a singleton: compared by identity)."""


def parse_replica_action(act: Any, rid: str) -> np.ndarray:
    """A replica's action as 4 bucket indices (ValueError naming the agent and the valid ranges)."""
    if type(act) is np.ndarray and act.dtype is _INT64 and act.shape == (4,):
        # the common case (the env's own knobs, RLlib's int64 samples) without numpy's reductions
        v = act.tolist()
        if (0 <= v[0] < REPLICA_ACTION_NVEC[0] and 0 <= v[1] < REPLICA_ACTION_NVEC[1]
                and 0 <= v[2] < REPLICA_ACTION_NVEC[2] and 0 <= v[3] < REPLICA_ACTION_NVEC[3]):
            return act.copy()  # (what ``astype(np.int64)`` gives: a copy)
    try:
        a = np.asarray(act)
        if a.shape != (4,) or not np.issubdtype(a.dtype, np.integer):
            raise TypeError
    except (TypeError, ValueError):
        raise ValueError(f"{rid} action must be 4 integer bucket indices (batch_cap, kv_budget, "
                         f"speculation, chunk) < {list(REPLICA_ACTION_NVEC)}; got {act!r}") from None
    if np.any(a < 0) or np.any(a >= np.asarray(REPLICA_ACTION_NVEC)):
        raise ValueError(f"{rid} action {a.tolist()} out of range; each index must be < "
                         f"{list(REPLICA_ACTION_NVEC)} (batch_cap, kv_budget, speculation, chunk)")
    return a.astype(np.int64)
