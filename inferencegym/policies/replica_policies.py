"""Replica policies of the cluster env's replica agents (``act(obs, info=None) -> MultiDiscrete action``,
the four knob bucket indices of ``cluster_spaces.KNOB_BUCKETS``); ``inferencegym.policies.routers`` pairs them
with a router (``ClusterPolicy``) and re-exports them. ``replica_load_knobs`` lives in
:mod:`inferencegym.policies.knob_rules`.
"""

from __future__ import annotations

import numpy as np

from inferencegym.envs.cluster_spaces import REPLICA_ACTION_NVEC
from inferencegym.policies.knob_rules import LoadKnobsReplica, base_knobs, shipped_affinity_rule

REPLICA_POLICIES: tuple[str, ...] = ("replica_static", "replica_random", "replica_best_static",
                                     "replica_load_knobs", "replica_affinity_knobs", "replica_affinity_p90")


class StaticReplica:
    """Keeps the task's initial knobs: returns the replica's current knob indices."""

    name = "replica_static"

    def reset(self, seed: int | None = None) -> None:
        pass

    def act(self, obs: np.ndarray, info: dict | None = None) -> np.ndarray:
        if not info or "knobs" not in info:
            raise ValueError("replica_static needs info['knobs'] from ClusterEnv")
        return np.asarray(info["knobs"], dtype=np.int64)


class RandomReplica:
    name = "replica_random"

    def __init__(self, seed: int | None = None) -> None:
        self._rng = np.random.default_rng(seed)

    def reset(self, seed: int | None = None) -> None:
        self._rng = np.random.default_rng(seed)

    def act(self, obs: np.ndarray, info: dict | None = None) -> np.ndarray:
        return self._rng.integers(0, np.asarray(REPLICA_ACTION_NVEC))


class FixedKnobsReplica:
    """``replica_best_static``: every replica gets the same fixed knob buckets, searched per task on
    training seeds (``inferencegym/data/best_static_knobs.json``); bound to the env to know its task.
    ``knobs`` (batch_cap, kv_budget_fraction, speculation_depth, chunk_size values) overrides."""

    name = "replica_best_static"

    def __init__(self, knobs: dict | None = None) -> None:
        self._given = knobs
        self._idx: np.ndarray | None = None

    def bind(self, env) -> "FixedKnobsReplica":
        from inferencegym.envs.cluster_spaces import KNOB_BUCKETS, nearest_bucket

        knobs = self._given if self._given is not None else base_knobs(env.task)
        self.knobs = dict(knobs)
        vals = (knobs["batch_cap"], knobs["kv_budget_fraction"], knobs["speculation_depth"], knobs["chunk_size"])
        self._idx = np.array([nearest_bucket(b, v) for b, v in zip(KNOB_BUCKETS, vals)], dtype=np.int64)
        return self

    def reset(self, seed: int | None = None) -> None:
        pass

    def act(self, obs: np.ndarray, info: dict | None = None) -> np.ndarray:
        if self._idx is None:
            raise ValueError("replica_best_static is not bound to a ClusterEnv; call policy.bind(env)")
        return self._idx.copy()


class AffinityKnobsReplica(FixedKnobsReplica):
    """``replica_affinity_knobs`` / ``replica_affinity_p90``: the fixed knobs of the task's
    ``best_affinity_knobs`` / ``best_affinity_p90`` rule."""

    def __init__(self, objective: str = "grade") -> None:
        super().__init__()
        self.objective = objective
        self.name = "replica_affinity_knobs" if objective == "grade" else f"replica_affinity_{objective}"

    def bind(self, env) -> "AffinityKnobsReplica":
        self._given = shipped_affinity_rule(env.task.task_id, self.objective)["knobs"]
        return super().bind(env)


_REPLICAS: dict = {c.name: c for c in (StaticReplica, RandomReplica, FixedKnobsReplica, LoadKnobsReplica)}
_REPLICAS.update({"replica_affinity_knobs": AffinityKnobsReplica,
                  "replica_affinity_p90": lambda: AffinityKnobsReplica("p90")})


def get_replica_policy(name: str):
    try:
        return _REPLICAS[name]()
    except KeyError:
        raise ValueError(f"unknown replica policy {name!r}; valid: {', '.join(_REPLICAS)}") from None
