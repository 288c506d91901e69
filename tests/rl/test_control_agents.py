"""Policies of the control-plane agents (issue 22 item 4): the production rules and the shipped learned
controllers drive the ``autoscaler`` / ``admission`` agents exactly as they run inside ``evaluate``;
the attention router leaves absent replicas out; PPO over every agent builds and runs one iteration."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from inferencegym.evaluation.control import run_episode
from inferencegym.rl.control_agents import agent_policy, make_control_env
from inferencegym.tasks.control import day_split, get_control_task

DAGGER_R3 = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "control" / "dagger_r3"
"""The DAgger MLP shipped before the residual autoscaler (``schedule`` features; PPO warm-starts from it)."""


def _drive(env, policies: dict, seed: int) -> dict:
    """Play one episode of ``env`` with ``policies`` (agent id -> object with ``act(obs)``)."""
    obs, _ = env.reset(seed=seed)
    while True:
        obs, _, _, truncs, infos = env.step({a: policies[a].act(o) for a, o in obs.items()})
        if truncs["__all__"]:
            return next(iter(infos.values()))


@pytest.mark.parametrize("task_id,agent,spec,episode_s", [
    ("cluster_autoscaling", "autoscaler", "scheduled", 1200.0),
    ("cluster_autoscaling", "autoscaler", "pretrained:cluster_autoscaling", 600.0),
    ("cluster_admission", "admission", "pretrained:cluster_admission", 120.0),
])
def test_a_controller_as_the_agents_policy_plays_the_episode_evaluate_plays(task_id, agent, spec, episode_s):
    day = day_split(14)["test"][0]
    seed = day  # reset(seed) picks day = test_days[seed % 2]
    cfg = {"task_id": task_id, "episode_s": episode_s, "split": "test", "router": "least_outstanding",
           "replicas": "fixed", agent: "agent"}
    env = make_control_env(cfg)
    assert env.possible_agents == [agent]
    info = _drive(env, {agent: agent_policy(agent, spec, env)}, seed)
    task = dataclasses.replace(get_control_task(task_id), episode_s=episode_s)
    ref = run_episode(task, spec, day=env.day, seed=seed)
    got = info["summary"]
    for k in ("gpu_hours", "slo_attainment", "rejected", "arrivals"):
        assert got[k] == pytest.approx(ref[k], rel=1e-12), k
    assert info["score"] == pytest.approx(ref["score"], rel=1e-12)


def test_a_rule_named_in_the_config_acts_inside_the_env():
    env = make_control_env({"task_id": "cluster_admission", "episode_s": 60.0, "admission": "gaie_shed",
                            "replicas": "fixed"})
    assert env.possible_agents == ["router"]
    with pytest.raises(ValueError, match="per request"):
        agent_policy("admission", "gaie_shed", env)
    with pytest.raises(ValueError, match="hindsight"):
        make_control_env({"autoscaler": "hindsight"})


def test_the_attention_router_leaves_absent_replicas_out():
    torch = pytest.importorskip("torch")
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from inferencegym.envs.control_spaces import agent_spaces
    from inferencegym.rl.modules import ReplicaAttentionRouter

    obs_sp, act_sp = agent_spaces(6, "history")
    torch.manual_seed(0)
    m = RLModuleSpec(module_class=ReplicaAttentionRouter, observation_space=obs_sp["router"],
                     action_space=act_sp["router"]).build()
    rng = np.random.default_rng(0)
    present = torch.tensor([[1, 1, 0, 1, 0, 0]], dtype=torch.float32)

    def logits(reps):
        o = {"replicas": torch.as_tensor(reps[None], dtype=torch.float32), "request": torch.zeros(1, 5),
             "action_mask": present, "present": present}
        with torch.no_grad():
            return m.forward_inference({Columns.OBS: o})[Columns.ACTION_DIST_INPUTS][0]

    a = rng.normal(size=(6, 7))
    b = a.copy()
    b[[2, 4, 5]] = rng.normal(size=(3, 7)) * 10  # absent slots' rows change
    la, lb = logits(a), logits(b)
    keep = present[0] > 0.5
    assert torch.allclose(la[keep], lb[keep], atol=1e-5)
    c = a.copy()
    c[1] += 5.0  # a present replica's row changes the others' scores (they attend to it)
    assert not torch.allclose(la[[0, 3]], logits(c)[[0, 3]], atol=1e-4)


@pytest.mark.ray
def test_ppo_with_the_control_agents_builds_and_runs_one_iteration(local_ray):
    from inferencegym.rl.control_agents import control_ppo_config

    env_config = {"task_id": "cluster_autoscaling", "episode_s": 60.0, "split": "train",
                  "admission": "agent", "replica_window_s": 10.0, "autoscaler_features": "schedule",
                  "lifecycle": {"initial_replicas": 1, "provision_mean_s": 5.0, "provision_std_s": 0.0,
                                "warmup_s": 1.0, "load_bandwidth_gb_s": 100.0}}
    algo = control_ppo_config(env_config, warm_start={"autoscaler": f"checkpoint:{DAGGER_R3}"},
                              train_batch_size=64, minibatch_size=32).build_algo()
    result = algo.train()
    algo.stop()
    assert result["env_runners"]["num_env_steps_sampled"] >= 64
    for mid in ("autoscaler", "admission", "router", "replica"):
        assert mid in result["learners"]
