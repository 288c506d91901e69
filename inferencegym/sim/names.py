"""Names in configs checked against the registries, where the cluster is built.

Configs (``config.py``) hold plain names and import no registry (Vidur's configs name an enum,
never an implementation); ``Cluster`` calls :func:`check_cluster_names` when it is built and
:func:`check_replica_names` on every knob change, so a bad name fails before any state changes,
with the registries' one-line message ``unknown scheduler 'x'; valid: sarathi, static, vllm``.
"""

from __future__ import annotations

from .batching import SCHEDULERS
from .config import ClusterConfig, ReplicaConfig
from .execution_params import ENGINE_PROFILES, engine_params
from .router import ROUTERS


def _check(name: str, kind: str, valid) -> None:
    if name not in valid:
        raise ValueError(f"unknown {kind} {name!r}; valid: {', '.join(sorted(valid))}")


def check_replica_names(cfg: ReplicaConfig) -> None:
    """The scheduler and engine profile of ``cfg`` are registered and the engine can run the
    scheduler as configured (ValueError otherwise)."""
    _check(cfg.engine_profile, "engine_profile", ENGINE_PROFILES)
    _check(cfg.scheduler, "scheduler", SCHEDULERS)
    if (cfg.speculation_depth > 0 and cfg.scheduler == "sarathi"
            and not engine_params(cfg.engine_profile).spec_chunked_prefill):
        raise ValueError(f"engine_profile {cfg.engine_profile!r} cannot chunk prefills while it speculates "
                         f"(vLLM V0 before v0.6.4), got scheduler='sarathi' with speculation_depth="
                         f"{cfg.speculation_depth}; use scheduler='vllm', speculation_depth=0 or "
                         f"engine_profile='vllm-v1'")


def check_cluster_names(cfg: ClusterConfig) -> None:
    """The router and every replica config's names are registered (ValueError otherwise)."""
    _check(cfg.router, "router", ROUTERS)
    _check(cfg.decode_router, "decode_router", set(ROUTERS) - {"external"})
    for rc in (cfg.replica, *cfg.replica_configs):
        check_replica_names(rc)
