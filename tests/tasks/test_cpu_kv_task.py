"""cluster_cpu_kv (issue 26, item 5): a registered cluster task whose replicas spill evicted prefix
blocks to a CPU KV tier, deterministic per seed, with the tier really used."""

from __future__ import annotations

import dataclasses
import statistics

import pytest

from inferencegym.evaluation.cluster import run_cluster_episode
from inferencegym.sim.execution import ExecutionModel
from inferencegym.tasks.adapter import replica_configs
from inferencegym.tasks.capacity import measure_capacity_rps
from inferencegym.tasks.cluster import CLUSTER_TASK_IDS, PREFIX_TASK_IDS, cluster_task
from inferencegym.tasks.spec import ClusterOptions, get_task, list_tasks

TASK = "cluster_cpu_kv"
WINDOWS = 15  # 30 simulated seconds: long enough for GPU evictions to reach the host tier


def _short(cpu_kv_gb: float | None = None):
    t = dataclasses.replace(cluster_task(TASK), episode_windows=WINDOWS)
    if cpu_kv_gb is not None:
        t = dataclasses.replace(t, cluster=dataclasses.replace(t.cluster, cpu_kv_gb=cpu_kv_gb))
    return t


def _episode(task, policy: str, seed: int):
    log, stats = run_cluster_episode(task, policy, seed)
    return log.metrics, stats["prefix_hit_rate_by_tier"]


def test_task_is_registered_with_a_cpu_tier_and_a_small_gpu_cache():
    assert TASK in [t.task_id for t in list_tasks(kind="cluster")]
    assert TASK in CLUSTER_TASK_IDS and TASK in PREFIX_TASK_IDS
    spec = get_task(TASK)
    assert spec.cluster.cpu_kv_gb > 0 and spec.workload.process == "prefix"
    reps = replica_configs(spec)
    assert len(reps) == spec.replicas == 4 and all(r.cpu_kv_gb == spec.cluster.cpu_kv_gb for r in reps)
    # the GPU cache holds only a handful of the task's ~15k-token prompts; the host tier many more
    gpu_tokens = ExecutionModel.from_preset(model=spec.model, gpu=spec.gpu).kv_capacity_tokens(
        spec.knobs.kv_budget_fraction)
    assert gpu_tokens < 10 * 15_000
    host_tokens = spec.cluster.cpu_kv_gb * 1e9 / ExecutionModel.from_preset(
        model=spec.model, gpu=spec.gpu).kv_bytes_per_token
    assert host_tokens > 5 * gpu_tokens
    # the other tasks keep GPU-only caches
    assert all(r.cpu_kv_gb == 0 for t in CLUSTER_TASK_IDS if t != TASK for r in replica_configs(get_task(t)))


def test_cpu_kv_gb_is_validated():
    with pytest.raises(ValueError, match="cpu_kv_gb must be a finite number of GB >= 0"):
        ClusterOptions(cpu_kv_gb=-1.0)


def test_episodes_are_deterministic_per_seed():
    a = _episode(_short(), "llmd_precise", 3)
    b = _episode(_short(), "llmd_precise", 3)
    c = _episode(_short(), "llmd_precise", 4)
    assert a == b
    assert a[0]["cluster/ttft_p99_s"] != c[0]["cluster/ttft_p99_s"]


def test_the_cpu_tier_is_used_and_helps():
    """With the tier, part of the prompts is served from host memory (hit rate on the CPU tier > 0)
    and the hit rate rises over the same episode without it."""
    on_m, on = _episode(_short(), "llmd_precise", 5)
    off_m, off = _episode(_short(0.0), "llmd_precise", 5)
    assert on["cpu"] > 0.02 and off["cpu"] == 0.0
    assert on["gpu"] + on["cpu"] > off["gpu"] + 0.02


def test_evaluation_runs_it():
    log, stats = run_cluster_episode(_short(), "dynamo_kv", 1, episode_windows=3)
    assert stats["router_decisions"] > 0 and log.metrics["cluster/throughput_tok_s"] > 0


def test_capacity_constant_matches_the_simulator():
    """The shipped capacity_rps (with the tier on) is the median sustainable rate within 15 %
    (long-tailed prompts: median of three 60-s overload runs)."""
    spec = get_task(TASK)
    vals = [measure_capacity_rps(spec, "h100-80gb", 1, seed=s, duration_s=60.0) for s in range(3)]
    assert statistics.median(vals) == pytest.approx(spec.cluster.capacity_rps[0], rel=0.15)


def test_tier_oracle_is_a_privileged_reference_that_runs_and_is_deterministic():
    from inferencegym.policies.routers import PRIVILEGED_ROUTERS, TierOracleRouter, get_router_policy

    assert "tier_oracle" in PRIVILEGED_ROUTERS
    assert isinstance(get_router_policy("tier_oracle"), TierOracleRouter)
    a = run_cluster_episode(_short(), "tier_oracle", 3)[1]
    b = run_cluster_episode(_short(), "tier_oracle", 3)[1]
    assert a["prefix_hit_rate_by_tier"] == b["prefix_hit_rate_by_tier"]
    assert a["prefix_hit_rate_by_tier"]["cpu"] > 0.0  # it places requests where the host tier holds them


def test_hindsight_best_bounds_every_router_per_seed():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "cpu_kv_task_table.py"
    spec = importlib.util.spec_from_file_location("cpu_kv_task_table", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    by = {"a": {"grade": [0.1, 0.5, 0.3]}, "b": {"grade": [0.2, 0.4, 0.3]}}
    assert mod.hindsight_best(by) == pytest.approx([0.2, 0.5, 0.3])
