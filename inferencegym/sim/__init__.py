"""InferenceGym's discrete-event LLM-serving cluster simulator (see docs/simulator.md).

Entities (``Request``, ``Replica``, ``KVCache``), policies (batching schedulers, routers) and the
cost model (``ExecutionModel``) are separate modules; ``Cluster`` ties them to an event heap.
"""

from __future__ import annotations

from .config import ClusterConfig, ReplicaConfig, TenantSpec
from .cluster import Cluster
from .execution import ExecutionModel
from .kv_cache import KVCache
from .metrics import TBTRecorder, TenantWindowStats, WindowStats
from .replica import Replica
from .request import Request
from .batching import SCHEDULERS
from .router import ROUTERS

__all__ = [
    "Cluster",
    "ClusterConfig",
    "ExecutionModel",
    "KVCache",
    "ROUTERS",
    "Replica",
    "ReplicaConfig",
    "Request",
    "SCHEDULERS",
    "TBTRecorder",
    "TenantSpec",
    "TenantWindowStats",
    "WindowStats",
]
