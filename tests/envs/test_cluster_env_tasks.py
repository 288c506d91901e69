"""Cluster tasks: registry, sizing, capacity constants, and that the tasks separate the routers."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import inferencegym.envs  # noqa: F401
from inferencegym.tasks.adapter import replica_hardware
from inferencegym.tasks.capacity import measure_capacity_rps
from inferencegym.tasks.cluster import CLUSTER_TASK_IDS, cluster_task, replica_capacity_rps
from inferencegym.tasks.spec import get_task, list_tasks


def test_cluster_tasks_are_in_the_shared_registry():
    ids = [t.task_id for t in list_tasks(kind="cluster")]
    assert set(CLUSTER_TASK_IDS) <= set(ids)
    for tid in CLUSTER_TASK_IDS:
        spec = get_task(tid)
        assert spec.kind == "cluster" and spec.replicas == 4
        assert spec.to_dict()["cluster"]["load_fraction"] > 0
    hw = replica_hardware(get_task("cluster_heterogeneous"))
    assert {g for g, _ in hw} == {"h100-80gb", "a100-80gb"}
    assert len(get_task("cluster_bursty_multitenant").tenants) == 2


def test_rates_follow_capacity_and_load():
    for tid in CLUSTER_TASK_IDS:
        for n in (2, 4, 13, 64):
            spec = cluster_task(tid, n)
            assert spec.replicas == n
            cap = sum(replica_capacity_rps(spec))
            w = spec.workload
            if w.process == "onoff":
                duty = w.on_mean_s / (w.on_mean_s + w.off_mean_s)
                mean = duty * w.burst_rate_rps + (1 - duty) * w.rate_rps
            else:
                mean = w.rate_rps
            assert mean == pytest.approx(spec.cluster.load_fraction * cap)


@pytest.mark.parametrize("tid,entry", [("cluster_routing", 0), ("cluster_heterogeneous", 0),
                                       ("cluster_prefix_sharing", 0), ("cluster_multiturn", 0)])
def test_capacity_constants_match_the_simulator(tid, entry):
    """The shipped capacity_rps is what the simulator sustains (within 15 %, one short run)."""
    spec = get_task(tid)
    gpu, tp = spec.cluster.replica_hardware[entry]
    measured = measure_capacity_rps(spec, gpu, tp, seed=0, duration_s=40.0)
    shipped = spec.cluster.capacity_rps[entry]
    assert measured == pytest.approx(shipped, rel=0.15)


def test_heterogeneous_round_robin_is_clearly_wrong():
    """A few seeds (the 20-seed table is benchmarks/router_table.py): on the mixed cluster,
    least-outstanding routing cuts p99 TTFT by a wide margin and clairvoyant beats it."""
    from inferencegym.evaluation.cluster import run_cluster_episode

    task = dataclasses.replace(cluster_task("cluster_heterogeneous"), episode_windows=30)
    p99 = {p: [] for p in ("round_robin", "least_outstanding_requests", "clairvoyant")}
    for seed in (0, 1):
        for p in p99:
            log, _ = run_cluster_episode(task, p, seed)
            p99[p].append(log.metrics["cluster/ttft_p99_s"])
    rr, lor, cv = (np.mean(p99[p]) for p in p99)
    assert rr > 5 * lor, p99
    assert cv < lor, p99


def test_evaluate_cli_json_shape_on_a_cluster_task():
    """`inferencegym evaluate --policy ... --task cluster_heterogeneous --json`: the single-agent
    row shape plus the cluster keys."""
    import json

    from typer.testing import CliRunner

    from inferencegym.cli import app

    res = CliRunner().invoke(app, ["evaluate", "--policy", "least_outstanding_requests,round_robin",
                                   "--task", "cluster_heterogeneous", "--episodes", "2",
                                   "--episode-windows", "3", "--seed", "7", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout.strip().splitlines()[-1])
    assert [r["policy"] for r in rows] == ["least_outstanding_requests", "round_robin"]
    for r in rows:
        assert {"policy", "task", "episodes", "seeds", "score_mean", "score_ci95", "ttft_p99_s",
                "tbt_p99_s", "e2e_p99_s", "throughput_tok_s", "cost_per_1k_tokens"} <= set(r)
        assert r["task"] == "cluster_heterogeneous" and r["seeds"] == [7, 8]
        assert 0.0 <= r["score_mean"] <= 1.0 and r["throughput_tok_s"] > 0
    bad = CliRunner().invoke(app, ["evaluate", "--policy", "nope", "--task", "cluster_routing"])
    assert bad.exit_code != 0 and "unknown router policy" in bad.output


def test_policy_registry_serves_cluster_policies():
    from inferencegym.policies import get_policy, list_policies
    from inferencegym.policies.routers import ROUTER_POLICIES, ClusterPolicy

    assert set(ROUTER_POLICIES) <= set(list_policies("cluster"))
    p = get_policy("power_of_two_choices+replica_random", "cluster_routing")
    assert isinstance(p, ClusterPolicy) and p.name == "power_of_two_choices+replica_random"
    with pytest.raises(ValueError, match="unknown replica policy"):
        get_policy("round_robin+nope", "cluster_routing")
