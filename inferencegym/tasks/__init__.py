"""Tasks: what an episode is (workload, cluster, SLOs, window, length), how it maps onto the
simulator (:mod:`~inferencegym.tasks.adapter`) and how it is graded.

Importing this package registers the built-in tasks, single-agent first, then cluster (registration
order is the order of ``list_tasks()`` and of the environment server's task indices)."""

from __future__ import annotations

from inferencegym.tasks.spec import (DEFAULT_KNOBS, ClusterOptions, GraderSpec, PrefixSharingSpec,
                                     ReplicaKnobs, TaskSpec, TenantSLO, WorkloadSpec, get_task, list_tasks,
                                     register_task, task_ids)
from inferencegym.tasks import single as _single  # noqa: I001,F401  registers the single-agent tasks (first)
from inferencegym.tasks import cluster as _cluster  # noqa: I001,F401  registers the cluster tasks (second)
from inferencegym.tasks.cluster import CLUSTER_TASK_IDS, cluster_task, replica_capacity_rps
from inferencegym.tasks.graders import EpisodeLog, GradeResult, WindowRecord, grade

__all__ = ["TaskSpec", "TenantSLO", "WorkloadSpec", "GraderSpec", "ReplicaKnobs", "ClusterOptions",
           "PrefixSharingSpec", "DEFAULT_KNOBS", "get_task", "list_tasks", "register_task", "task_ids", "cluster_task",
           "replica_capacity_rps", "CLUSTER_TASK_IDS", "EpisodeLog", "WindowRecord", "GradeResult",
           "grade"]
