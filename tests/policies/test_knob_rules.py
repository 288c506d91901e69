"""``replica_load_knobs`` (per-replica knobs by the replica's own load) and the hindsight grid of the
cluster ceiling table (issue 21, item 4 and the cluster half of item 2)."""

from __future__ import annotations

import numpy as np
import pytest

from inferencegym.envs.cluster_env import ClusterEnv
from inferencegym.envs.cluster_spaces import COL, KNOB_BUCKETS
from inferencegym.evaluation.cluster import run_cluster_episode
from inferencegym.policies.knob_rules import LoadKnobsReplica, base_knobs
from inferencegym.policies.routers import ClusterPolicy, EstimatedTTFTRouter, get_cluster_policy


def _log(policy, seed=3, windows=4):
    log, _ = run_cluster_episode("cluster_prefix_sharing", policy, seed, episode_windows=windows)
    return log.metrics


def test_one_level_rule_is_best_static_knobs_exactly():
    one = ClusterPolicy(EstimatedTTFTRouter(), LoadKnobsReplica({"thresholds": [], "levels": [{}]}))
    assert _log(one) == _log(get_cluster_policy("best_static_knobs"))


def test_levels_follow_the_replicas_own_load():
    env = ClusterEnv({"task_id": "cluster_prefix_sharing", "episode_windows": 2})
    rule = LoadKnobsReplica({"thresholds": [4.0], "levels": [{"speculation_depth": 4}, {"speculation_depth": 0}]})
    rule.bind(env)
    base = base_knobs(env.task)
    cap_idx = KNOB_BUCKETS[0].index(base["batch_cap"])
    info = {"knobs": np.array([cap_idx, 0, 0, 0])}
    obs = np.zeros(40, dtype=np.float32)
    obs[COL["running"]] = 2.0 / base["batch_cap"]           # 2 running: below the threshold
    assert KNOB_BUCKETS[2][rule.act(obs, info)[2]] == 4
    obs[COL["running"]] = 6.0 / base["batch_cap"]           # 6 running: above it
    assert KNOB_BUCKETS[2][rule.act(obs, info)[2]] == 0
    assert rule.load(obs, info) == pytest.approx(6.0)


def test_a_two_level_rule_changes_what_the_episode_does():
    two = ClusterPolicy(EstimatedTTFTRouter(), LoadKnobsReplica(
        {"thresholds": [1.0], "levels": [{}, {"speculation_depth": 0}]}))
    assert _log(two)["cluster/ttft_p90_s"] != _log(get_cluster_policy("best_static_knobs"))["cluster/ttft_p90_s"]


@pytest.mark.parametrize("rule,match", [
    ({"thresholds": [4.0], "levels": [{}]}, "one more level"),
    ({"thresholds": [8.0, 4.0], "levels": [{}, {}, {}]}, "ascending"),
    ({"thresholds": [], "levels": [{"cap": 32}]}, "unknown knob"),
])
def test_bad_rules_are_refused_with_a_reason(rule, match):
    env = ClusterEnv({"task_id": "cluster_routing", "episode_windows": 1})
    with pytest.raises(ValueError, match=match):
        LoadKnobsReplica(rule).bind(env)
    with pytest.raises(ValueError, match="bind"):
        LoadKnobsReplica().act(np.zeros(3), {"knobs": [0, 0, 0, 0]})


def test_load_knobs_rule_is_a_named_cluster_policy():
    pol = get_cluster_policy("load_knobs_rule")
    assert pol.router.name == "estimated_ttft" and pol.replica.name == "replica_load_knobs"
