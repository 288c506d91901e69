"""Environments of InferenceGym: spaces, observation features, reward and episode control.

    import gymnasium, inferencegym
    env = gymnasium.make("InferenceGym/LLMServe-v0", task_id="bursty_workload")
    # or, without importing first: gymnasium.make("inferencegym:InferenceGym/LLMServe-v0", ...)

Exports the single-agent env and its contract (``ServeAction``, reward) and, for convenience, the
task API of :mod:`inferencegym.tasks` (one layer down). The multi-agent ``ClusterEnv`` lives in
``inferencegym.envs.cluster_env``; it is resolved on first use because it imports RLlib
(``import ray.rllib`` costs ~2 s, which ``import inferencegym.envs`` should not pay).
"""

from __future__ import annotations

from inferencegym import ENV_ID
from inferencegym.envs.actions import (
    FLAT_BUCKETS,
    FLAT_NVEC,
    QUANTIZATION_TIERS,
    FlatActionWrapper,
    InvalidActionError,
    ServeAction,
    action_space,
    action_to_flat,
    flat_to_action,
)
from inferencegym.envs.reward import REWARD_COMPONENTS, RewardConfig
from inferencegym.envs.serve_env import OBS_FEATURES, RAW_KEYS, LLMServeEnv
from inferencegym.tasks import (
    EpisodeLog,
    GradeResult,
    GraderSpec,
    TaskSpec,
    TenantSLO,
    WindowRecord,
    WorkloadSpec,
    get_task,
    grade,
    list_tasks,
    register_task,
    task_ids,
)


def __getattr__(name: str):
    if name == "ClusterEnv":  # RLlib import on first use (see the module docstring)
        from inferencegym.envs.cluster_env import (
            ClusterEnv,  # lazy: imports Ray / torch (~5 s); not at start-up
        )
        return ClusterEnv
    raise AttributeError(f"module 'inferencegym.envs' has no attribute {name!r}")


__all__ = [
    "ENV_ID", "ServeAction", "InvalidActionError", "action_space", "FlatActionWrapper", "FLAT_BUCKETS",
    "FLAT_NVEC", "QUANTIZATION_TIERS", "flat_to_action", "action_to_flat", "EpisodeLog", "WindowRecord",
    "GradeResult", "grade", "RewardConfig", "REWARD_COMPONENTS", "TaskSpec", "TenantSLO", "WorkloadSpec",
    "GraderSpec", "get_task", "list_tasks", "register_task", "task_ids", "LLMServeEnv", "OBS_FEATURES",
    "RAW_KEYS", "ClusterEnv",
]
