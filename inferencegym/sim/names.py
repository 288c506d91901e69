"""Names in configs checked against the registries, where the cluster is built.

Configs (``config.py``) hold plain names and import no registry (Vidur's configs name an enum,
never an implementation); ``Cluster`` calls :func:`check_cluster_names` when it is built and
:func:`check_replica_names` on every knob change, so a bad name fails before any state changes,
with the registries' one-line message ``unknown scheduler 'x'; valid: sarathi, static, vllm``.
"""

from __future__ import annotations

from .batching import SCHEDULERS
from .config import ClusterConfig, ReplicaConfig
from .execution_params import ENGINE_PROFILES
from .router import ROUTERS


def _check(name: str, kind: str, valid) -> None:
    if name not in valid:
        raise ValueError(f"unknown {kind} {name!r}; valid: {', '.join(sorted(valid))}")


def check_replica_names(cfg: ReplicaConfig) -> None:
    """The scheduler and engine profile of ``cfg`` are registered (ValueError otherwise)."""
    _check(cfg.engine_profile, "engine_profile", ENGINE_PROFILES)
    _check(cfg.scheduler, "scheduler", SCHEDULERS)


def check_cluster_names(cfg: ClusterConfig) -> None:
    """The router and every replica config's names are registered (ValueError otherwise)."""
    _check(cfg.router, "router", ROUTERS)
    _check(cfg.decode_router, "decode_router", set(ROUTERS) - {"external"})
    for rc in (cfg.replica, *cfg.replica_configs):
        check_replica_names(rc)
