"""``best_affinity_knobs``: the ``estimated_ttft_affinity`` weight and fixed replica knobs searched
together on training seeds (issue 21, item 1: "an affinity-weighted estimated_ttft on the prefix tasks
if it beats the plain one")."""

from __future__ import annotations

import pytest

from inferencegym.envs.cluster_env import ClusterEnv
from inferencegym.evaluation.cluster import run_cluster_episode
from inferencegym.evaluation.search_cluster_knobs import _affinity_policy, search_affinity_knobs
from inferencegym.policies import get_policy, list_policies
from inferencegym.policies.knob_rules import affinity_rule, base_knobs
from inferencegym.policies.routers import get_cluster_policy

PREFIX = "cluster_prefix_sharing"


def _metrics(policy, task=PREFIX, seed=3, windows=4):
    log, _ = run_cluster_episode(task, policy, seed, episode_windows=windows)
    return log.metrics


@pytest.mark.parametrize("name,objective", [("best_affinity_knobs", "grade"), ("best_affinity_p90", "p90")])
def test_the_shipped_rules_bind_their_searched_weight_and_knobs(name, objective):
    rule = affinity_rule(PREFIX, objective)
    assert rule is not None and rule["affinity_s"] > 0.0  # the search found a weight above the plain router
    pol = get_cluster_policy(name)
    env = ClusterEnv({"task_id": PREFIX, "episode_windows": 1})
    pol.bind(env)
    assert pol.router.affinity_s == rule["affinity_s"] and pol.router.objective == objective
    assert pol.replica.knobs == rule["knobs"]
    assert name in list_policies("cluster")
    assert get_policy(name, PREFIX).name == name


def test_weight_zero_is_best_static_knobs_exactly():
    task = ClusterEnv({"task_id": PREFIX, "episode_windows": 1}).task
    plain = _affinity_policy({**base_knobs(task), "affinity_s": 0.0})
    assert _metrics(plain) == _metrics(get_cluster_policy("best_static_knobs"))


def test_the_weight_changes_where_requests_go():
    task = ClusterEnv({"task_id": PREFIX, "episode_windows": 1}).task
    heavy = _affinity_policy({**base_knobs(task), "affinity_s": 1.0})
    assert _metrics(heavy)["cluster/ttft_p90_s"] != _metrics(get_cluster_policy("best_static_knobs"))["cluster/ttft_p90_s"]


def test_a_task_without_a_searched_rule_is_refused_with_a_reason():
    env = ClusterEnv({"task_id": "cluster_routing", "episode_windows": 1})
    with pytest.raises(ValueError, match="rule of the prefix-sharing cluster tasks.*use best_static_knobs"):
        get_cluster_policy("best_affinity_knobs").bind(env)
    cpu = ClusterEnv({"task_id": "cluster_cpu_kv", "episode_windows": 1})  # a prefix task, not searched
    with pytest.raises(ValueError, match="search_cluster_knobs --affinity --task cluster_cpu_kv"):
        get_cluster_policy("best_affinity_knobs").bind(cpu)
    with pytest.raises(ValueError, match="not a prefix-sharing cluster task"):
        search_affinity_knobs("cluster_routing", [0])
    with pytest.raises(ValueError, match="objective must be"):
        search_affinity_knobs(PREFIX, [0], objective="p99")
    with pytest.raises(ValueError, match="--objective p90 --task cluster_cpu_kv"):
        get_cluster_policy("best_affinity_p90").bind(cpu)
