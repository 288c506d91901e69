"""ClusterEnv: RLlib's multi-agent checks, rollouts, spaces, errors, rewards and router adapters."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from fakes.routing import route_through_env
from inferencegym.envs.cluster_env import REPLICA_ACTION_NVEC, ROUTER_FEATURES, ClusterEnv
from inferencegym.tasks.adapter import build_requests, make_cluster
from inferencegym.tasks.cluster import CLUSTER_TASK_IDS, cluster_task
from inferencegym.policies.routers import get_cluster_policy

SHORT = 3  # windows per episode in the quick tests


def _random_actions(env: ClusterEnv, obs: dict, rng: np.random.Generator) -> dict:
    act = {}
    for aid, o in obs.items():
        if aid == "router":
            allowed = np.flatnonzero(o["action_mask"] > 0.5)
            act[aid] = int(allowed[rng.integers(allowed.size)])
        else:
            act[aid] = rng.integers(0, np.asarray(REPLICA_ACTION_NVEC))
    return act


@pytest.mark.parametrize("task_id", CLUSTER_TASK_IDS)
def test_check_multiagent_environments(task_id):
    from ray.rllib.utils.pre_checks.env import check_multiagent_environments

    env = ClusterEnv({"task_id": task_id, "episode_windows": SHORT})
    check_multiagent_environments(env)


@pytest.mark.parametrize("task_id", CLUSTER_TASK_IDS)
def test_random_rollout_completes(task_id):
    """A full episode of random (mask-respecting) router and replica actions."""
    env = ClusterEnv({"task_id": task_id})
    rng = np.random.default_rng(0)
    obs, infos = env.reset(seed=3)
    windows = decisions = 0
    while True:
        for aid, o in obs.items():
            assert env.observation_spaces[aid].contains(o), (aid, o)
        # only acting agents get observations: the router alone, or every replica at a window end
        assert set(obs) == {"router"} or set(env.replica_ids) <= set(obs)
        act = _random_actions(env, obs, rng)
        decisions += "router" in act and env.pending_request is not None
        obs, rew, term, trunc, infos = env.step(act)
        assert set(rew) <= set(env.possible_agents)
        for r in rew.values():
            assert math.isfinite(r)
        if "replica_0" in obs:
            windows += 1
            assert {"reward/throughput", "reward/slo", "reward/preemption", "reward/shared"} <= set(
                infos["replica_0"])
        if "router" in infos:
            assert {"reward/queue", "reward/slo", "reward/reject"} <= set(infos["router"])
        if trunc["__all__"]:
            break
        assert not term["__all__"]
    assert windows == env.task.episode_windows
    assert decisions == env.decisions > 100
    assert set(obs) == set(env.possible_agents)  # final observation for every agent
    log = env.episode_log(policy="random", seed=3)
    assert log.metrics["cluster/completed"] + log.metrics["cluster/rejected"] == len(env.requests)
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step({})


@pytest.mark.parametrize("n", [2, 7, 64])
def test_number_of_replicas_is_a_parameter(n):
    env = ClusterEnv({"task_id": "cluster_heterogeneous", "num_replicas": n, "episode_windows": 1})
    assert env.possible_agents == ["router"] + [f"replica_{i}" for i in range(n)]
    assert env.observation_spaces["router"]["replicas"].shape == (n, len(ROUTER_FEATURES))
    assert env.action_spaces["router"].n == n
    obs, _ = env.reset(seed=0)
    for aid, o in obs.items():
        assert env.observation_spaces[aid].contains(o)
    act = {a: (int(np.argmax(o["action_mask"])) if a == "router" else np.zeros(4, np.int64))
           for a, o in obs.items()}
    obs, rew, _, _, _ = env.step(act)
    for aid, o in obs.items():
        assert env.observation_spaces[aid].contains(o)
    # rates follow the replica count: offered load per replica is the same
    base = cluster_task("cluster_heterogeneous")
    spec = cluster_task("cluster_heterogeneous", n)
    caps = [base.cluster.capacity_rps[i % 2] for i in range(n)]
    assert spec.workload.rate_rps == pytest.approx(base.cluster.load_fraction * sum(caps))
    gpus = [rep.cfg.gpu for rep in env.cluster.replicas]
    assert gpus == [("h100-80gb", "a100-80gb")[i % 2] for i in range(n)]


@pytest.mark.parametrize("bad", [1, 65, 0])
def test_bad_replica_count(bad):
    with pytest.raises(ValueError, match="num_replicas must be in 2..64"):
        ClusterEnv({"task_id": "cluster_routing", "num_replicas": bad})


def test_bad_config_and_task():
    with pytest.raises(ValueError, match="unknown ClusterEnv config keys"):
        ClusterEnv({"task": "cluster_routing"})
    with pytest.raises(ValueError, match="not a cluster task"):
        ClusterEnv({"task_id": "static_workload"})
    with pytest.raises(ValueError, match="unknown task"):
        ClusterEnv({"task_id": "nope"})
    with pytest.raises(ValueError, match="unknown reward keys"):
        ClusterEnv({"reward": {"w_nope": 1.0}})


def _first_router_obs(env):
    obs, info = env.reset(seed=1)
    while "router" not in obs or env.pending_request is None:
        act = {a: info[a]["knobs"] for a in obs if a != "router"}
        obs, _, _, _, info = env.step(act)
    return obs


def test_invalid_actions_raise_and_leave_state_unchanged():
    env = ClusterEnv({"task_id": "cluster_routing", "episode_windows": SHORT})
    _first_router_obs(env)
    req, now, decisions = env.pending_request, env.cluster.now_s, env.decisions
    for bad, msg in [({"router": 9}, "replica index in 0..3"), ({"router": -1}, "replica index"),
                     ({"router": 1.5}, "must be an integer"), ({"router": "0"}, "must be an integer"),
                     ({}, "the router must act"), ({"replica_9": 0}, "unknown agent ids"),
                     ("x", "must be a dict")]:
        with pytest.raises(ValueError, match=msg):
            env.step(bad)
        assert env.pending_request is req and env.cluster.now_s == now and env.decisions == decisions
    env._mask[2] = 0.0  # a replica that cannot admit (down / prompt does not fit)
    with pytest.raises(ValueError, match="masked out"):
        env.step({"router": 2})
    assert env.pending_request is req
    env.step({"router": 1})
    assert req.replica_id == 1 and env.decisions == decisions + 1


def test_invalid_replica_action_applies_nothing():
    env = ClusterEnv({"task_id": "cluster_routing", "episode_windows": SHORT})
    obs, info = env.reset(seed=1)
    while "replica_0" not in obs:
        obs, _, _, _, info = env.step({"router": int(np.argmax(obs["router"]["action_mask"]))})
    before = env._knobs.copy()
    acts = {a: info[a]["knobs"] for a in env.replica_ids}
    acts["replica_0"] = np.array([0, 0, 0, 0])
    acts["replica_1"] = np.array([0, 9, 0, 0])  # out of range: nothing may change, not even replica_0
    with pytest.raises(ValueError, match="out of range"):
        env.step(acts)
    assert np.array_equal(env._knobs, before)
    acts["replica_1"] = np.array([0, 0])
    with pytest.raises(ValueError, match="4 integer bucket indices"):
        env.step(acts)
    assert np.array_equal(env._knobs, before)


def test_replica_knobs_reach_the_simulator():
    env = ClusterEnv({"task_id": "cluster_routing", "episode_windows": SHORT})
    obs, info = env.reset(seed=1)
    while "replica_0" not in obs:
        obs, _, _, _, info = env.step({"router": int(np.argmax(obs["router"]["action_mask"]))})
    acts = {a: info[a]["knobs"] for a in env.replica_ids}
    acts["replica_2"] = np.array([4, 3, 1, 3])  # batch 256, KV 1.0, speculation 2, chunk 2048
    env.step(acts)
    rep = env.cluster.replicas[2]
    cfg = rep.pending[0] if rep.pending is not None else rep.cfg
    assert (cfg.batch_cap, cfg.kv_budget_fraction, cfg.speculation_depth, cfg.chunk_size) == (256, 1.0, 2, 2048)
    other = env.cluster.replicas[0]
    assert (other.pending[0] if other.pending is not None else other.cfg).batch_cap == 16


def test_router_reward_is_the_decima_integral():
    """Sum of the router's queue terms = -(tenant-weighted time in system up to the end) / ref."""
    env = ClusterEnv({"task_id": "cluster_bursty_multitenant", "episode_windows": 10})
    pol = get_cluster_policy("round_robin").bind(env)
    pol.reset(0)
    obs, infos = env.reset(seed=5)
    total_queue = infos["router"]["reward/queue"] if "router" in infos else 0.0
    while True:
        obs, rew, term, trunc, infos = env.step(pol.act_all(obs, infos))
        if "router" in infos:
            total_queue += infos["router"]["reward/queue"]
        if trunc["__all__"]:
            break
    T = env.task.episode_s
    w = [t.grade_weight for t in env.task.tenants]
    expected = 0.0
    for r in env.requests:
        if r.arrival_s > T or r.replica_id < 0:
            continue
        end = r.completion_s if not math.isnan(r.completion_s) else T
        expected += w[r.tenant] * (min(end, T) - r.arrival_s)
    expected /= env.reward_config.sojourn_ref_s
    assert total_queue == pytest.approx(-expected, rel=1e-9, abs=1e-9)
    assert expected > 0


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding_requests", "random",
                                    "power_of_two_choices", "least_kv_load"])
def test_router_adapter_reproduces_the_simulators_routing(router):
    """Routing through the env with the adapter = the simulator's built-in router, request by request."""
    env = route_through_env("cluster_routing", router, windows=5, seed=11)
    via_env = [r.replica_id for r in env.requests]
    # the same requests and simulator seed, routed inside the simulator
    ss = np.random.SeedSequence(11)
    wl_ss, sim_ss, _ = ss.spawn(3)
    reqs = build_requests(env.task, env.task.episode_s, np.random.default_rng(wl_ss))
    cl = make_cluster(env.task, np.random.default_rng(sim_ss), router=router)
    cl.submit(reqs)
    cl.run_until(env.task.episode_s)
    assert [r.replica_id for r in reqs] == via_env
    assert len(set(via_env)) == env.n


def test_episode_log_and_grade_are_deterministic_and_bounded():
    from inferencegym.evaluation.cluster import run_cluster_episode
    from inferencegym.tasks.cluster_grading import grade_cluster

    a, _ = run_cluster_episode("cluster_bursty_multitenant", "least_outstanding_requests", 4,
                               episode_windows=8)
    b, _ = run_cluster_episode("cluster_bursty_multitenant", "least_outstanding_requests", 4,
                               episode_windows=8)
    assert a.model_dump_json() == b.model_dump_json()
    task = dataclasses.replace(cluster_task("cluster_bursty_multitenant"), episode_windows=8)
    g = grade_cluster(task, a)
    assert 0.0 <= g.score <= 1.0
    for key in ("cluster/ttft_p50_s", "cluster/ttft_p90_s", "cluster/ttft_p99_s", "cluster/tbt_p99_s",
                "cluster/e2e_p99_s", "cluster/throughput_tok_s", "cluster/load_imbalance",
                "cluster/slo_attainment/interactive", "cluster/slo_attainment/batch"):
        assert key in a.metrics and math.isfinite(a.metrics[key]), key
    assert a.metrics["cluster/ttft_p50_s"] <= a.metrics["cluster/ttft_p90_s"] <= a.metrics["cluster/ttft_p99_s"]


def test_grade_drops_when_routing_is_bad():
    """Sending everything to one replica must grade far below least-outstanding routing."""
    from inferencegym.evaluation.cluster import run_cluster_episode
    from inferencegym.tasks.cluster_grading import grade_cluster

    class OneReplica:
        name = "one_replica"

        def act_all(self, obs, infos):
            return {a: (0 if a == "router" else infos[a]["knobs"]) for a in obs}

    task = dataclasses.replace(cluster_task("cluster_routing"), episode_windows=10)
    bad, _ = run_cluster_episode(task, OneReplica(), 2)
    good, _ = run_cluster_episode(task, "least_outstanding_requests", 2)
    assert grade_cluster(task, bad).score < grade_cluster(task, good).score - 0.3
    assert bad.metrics["cluster/load_imbalance"] > 2.0


def test_heterogeneous_replicas_keep_their_hardware_when_knobs_change():
    """Simulator support added for this env: per-replica hardware survives apply_replica_config."""
    env = ClusterEnv({"task_id": "cluster_heterogeneous", "episode_windows": SHORT})
    obs, info = env.reset(seed=2)
    reps = env.cluster.replicas
    assert [(r.model.gpu.name, r.model.gpu_count) for r in reps] == [
        ("h100-80gb", 2), ("a100-80gb", 1), ("h100-80gb", 2), ("a100-80gb", 1)]
    fast = reps[0].model.decode_step_time_s(batch_size=16, context_tokens=1024)
    slow = reps[1].model.decode_step_time_s(batch_size=16, context_tokens=1024)
    assert fast < slow
    while "replica_0" not in obs:
        obs, _, _, _, info = env.step({"router": int(np.argmax(obs["router"]["action_mask"]))})
    acts = {a: info[a]["knobs"] for a in env.replica_ids}
    acts["replica_0"] = np.array([2, 3, 0, 1])
    env.step(acts)
    rep0 = env.cluster.replicas[0]
    model = rep0.pending[1] if rep0.pending is not None else rep0.model
    assert (model.gpu.name, model.gpu_count) == ("h100-80gb", 2)
