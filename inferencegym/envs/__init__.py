"""Gymnasium environments of InferenceGym.

    import gymnasium, inferencegym.envs
    env = gymnasium.make("InferenceGym/LLMServe-v0", task_id="bursty_workload")

Exports the single-agent env and its contract (``ServeAction``, tasks, reward, graders); the
multi-agent ``ClusterEnv`` lives in ``inferencegym.envs.cluster_env`` and is imported lazily.
"""

from __future__ import annotations

import gymnasium

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
from inferencegym.envs.graders import EpisodeLog, GradeResult, WindowRecord, grade
from inferencegym.envs.reward import REWARD_COMPONENTS, RewardConfig
from inferencegym.envs.tasks import (
    GraderSpec,
    TaskSpec,
    TenantSLO,
    WorkloadSpec,
    get_task,
    list_tasks,
    register_task,
    task_ids,
)

ENV_ID = "InferenceGym/LLMServe-v0"

# the cluster env's tasks (kind="cluster") join the same registry (light: no RLlib import)
from inferencegym.envs import cluster_tasks as _cluster_tasks  # noqa: E402,F401

if ENV_ID not in gymnasium.registry:
    gymnasium.register(id=ENV_ID, entry_point="inferencegym.envs.serve_env:LLMServeEnv",
                       disable_env_checker=False)


def __getattr__(name: str):
    # heavy or optional modules load on first use
    if name in ("LLMServeEnv", "OBS_FEATURES", "RAW_KEYS"):
        from inferencegym.envs import serve_env
        return getattr(serve_env, name)
    if name in ("evaluate_policy", "EvaluationResult"):
        from inferencegym.envs import evaluation
        return getattr(evaluation, name)
    if name == "ClusterEnv":
        from inferencegym.envs.cluster_env import ClusterEnv
        return ClusterEnv
    raise AttributeError(f"module 'inferencegym.envs' has no attribute {name!r}")


__all__ = [
    "ENV_ID", "ServeAction", "InvalidActionError", "action_space", "FlatActionWrapper", "FLAT_BUCKETS",
    "FLAT_NVEC", "QUANTIZATION_TIERS", "flat_to_action", "action_to_flat", "EpisodeLog", "WindowRecord",
    "GradeResult", "grade", "RewardConfig", "REWARD_COMPONENTS", "TaskSpec", "TenantSLO", "WorkloadSpec",
    "GraderSpec", "get_task", "list_tasks", "register_task", "task_ids", "LLMServeEnv", "OBS_FEATURES",
    "RAW_KEYS", "evaluate_policy", "EvaluationResult", "ClusterEnv",
]
