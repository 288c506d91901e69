"""Training the replica agents with the best observable router held fixed (issue 21, item 4): the
replica-only env (router played inside by a rule) and the ``est_ttft_router`` module."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inferencegym.envs.cluster_env import ClusterEnv
from inferencegym.evaluation.cluster import run_cluster_episode
from inferencegym.policies.routers import EstimatedTTFTRouter, FixedKnobsReplica, get_cluster_policy
from inferencegym.rl.env_creators import make_cluster_env

TASK = "cluster_prefix_sharing"


def test_replica_only_env_is_the_cluster_env_with_the_rule_routing():
    env = make_cluster_env({"task_id": TASK, "internal_router": "estimated_ttft", "episode_windows": 4})
    assert env.agents == [f"replica_{i}" for i in range(env.inner.n)]
    assert env.observation_spaces["router"] == env.inner.observation_spaces["router"]  # its module's space
    rep = FixedKnobsReplica().bind(env.inner)
    obs, infos = env.reset(seed=5)
    steps = 0
    while True:
        assert set(obs) <= set(env.agents)
        obs, _, _, truncs, infos = env.step({a: rep.act(o, infos.get(a)) for a, o in obs.items()})
        steps += 1
        if truncs["__all__"]:
            break
    assert steps == 3                # one step per later control window (reset returns the first)
    log, _ = run_cluster_episode(TASK, get_cluster_policy("best_static_knobs"), 5, episode_windows=4)
    assert env.episode_log().metrics == log.metrics            # same episode, request for request
    with pytest.raises(ValueError, match="privileged"):
        make_cluster_env({"task_id": TASK, "internal_router": "clairvoyant"})


@pytest.mark.parametrize("module_type,affinity_s", [("est_ttft_router", 0.0), ("est_ttft_router", 0.02),
                                                     ("est_ttft_router", 0.3), ("affinity_router", 0.0),
                                                     ("affinity_router", 0.05)])
def test_est_ttft_router_module_picks_what_the_rule_picks(module_type, affinity_s):
    """The fixed module, and the learned-affinity module (greedy at its current weight, sampling scale aside)."""
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from inferencegym.policies.routers import AffinityEstimatedTTFTRouter
    from inferencegym.rl.modules import module_class

    env = ClusterEnv({"task_id": TASK, "episode_windows": 2})
    slo_s = min(t.ttft_slo_s for t in env.task.tenants)  # the est_ttft column's unit
    module = RLModuleSpec(module_class=module_class(module_type), observation_space=env.observation_spaces["router"],
                          action_space=env.action_spaces["router"],
                          model_config={"scale": 1.0e4 if module_type == "est_ttft_router" else 300.0,
                                        "affinity": affinity_s / slo_s}).build()
    rule = EstimatedTTFTRouter() if affinity_s == 0.0 else AffinityEstimatedTTFTRouter()
    rule.affinity_s = affinity_s
    rule, rep = rule.bind(env), FixedKnobsReplica().bind(env)
    obs, infos = env.reset(seed=2)
    agree = total = 0
    while True:
        act = {}
        for aid, o in obs.items():
            if aid == "router":
                batch = {k: torch.as_tensor(np.asarray(v)[None]) for k, v in o.items()}
                logits = module.forward_inference({Columns.OBS: batch})[Columns.ACTION_DIST_INPUTS][0]
                choice = int(torch.argmax(logits))
                agree += choice == rule.act(o, infos.get(aid))
                total += 1
                act[aid] = choice
            else:
                act[aid] = rep.act(o, infos.get(aid))
        obs, _, _, truncs, infos = env.step(act)
        if truncs["__all__"]:
            break
    assert total > 20 and agree / total >= 0.97                # float32 ties aside


def test_est_ttft_router_affinity_needs_the_prefix_columns():
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from inferencegym.rl.modules import module_class

    env = ClusterEnv({"task_id": "cluster_routing", "episode_windows": 1})
    with pytest.raises(ValueError, match="cached_share"):
        RLModuleSpec(module_class=module_class("est_ttft_router"), observation_space=env.observation_spaces["router"],
                     action_space=env.action_spaces["router"], model_config={"affinity": 0.02}).build()


def test_a_loaded_policy_with_a_trained_replica_module_sets_the_knobs(tmp_path, monkeypatch):
    """A trained replica module is evaluated (it used to be replaced by replica_static); the
    est_ttft_router + replica module pair exports and loads pickle-free."""
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    import inferencegym.rl.policy_loader as pl
    from inferencegym.rl.modules import module_class

    env = ClusterEnv({"task_id": TASK, "episode_windows": 3})
    mapping = {"router": "router_pol", "replica_*": "replica_pol"}
    torch.manual_seed(0)
    for mid, typ, agent, mc in (("router_pol", "est_ttft_router", "router", {"scale": 1.0e4}),
                                ("replica_pol", "replica_mlp", "replica_0", {"hidden": [8]})):
        m = RLModuleSpec(module_class=module_class(typ), observation_space=env.observation_spaces[agent],
                         action_space=env.action_spaces[agent], model_config=mc).build()
        pl.export_module(m, tmp_path / TASK, module_type=typ, model_config=mc, module_id=mid, task_id=TASK,
                         kind="cluster", mapping=mapping)
        if mid == "replica_pol":
            replica_module = m
    monkeypatch.setattr(pl, "PRETRAINED_DIR", tmp_path)
    pol = pl.load_policy(f"pretrained:{TASK}", TASK)
    obs, infos = env.reset(seed=1)
    seen = 0
    while True:
        act = pol.act_all(obs, infos)
        for aid, o in obs.items():
            if aid != "router":
                from ray.rllib.core.columns import Columns
                logits = replica_module.forward_inference(
                    {Columns.OBS: torch.as_tensor(np.asarray(o)[None])})[Columns.ACTION_DIST_INPUTS][0]
                want = [int(torch.argmax(part)) for part in torch.split(logits, list(env.action_spaces[aid].nvec))]
                assert act[aid].tolist() == want
                seen += 1
        obs, _, _, truncs, infos = env.step(act)
        if truncs["__all__"]:
            break
    assert seen >= 8


def test_the_warm_start_is_evaluated_with_every_cloned_module(tmp_path):
    """Behaviour cloning writes the router module and the trained replica module side by side; the
    warm start the run records (and compares PPO with) loads both, not the router with the task's
    initial knobs (a defect until the eleventh session)."""
    from types import SimpleNamespace

    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from inferencegym.rl.modules import module_class
    from inferencegym.rl.pipeline import warm_start_dir
    from inferencegym.rl.policy_loader import load_checkpoint

    env = ClusterEnv({"task_id": TASK, "episode_windows": 2})
    bc = tmp_path / "run_bc"
    torch.manual_seed(0)
    for mid, typ, agent, mc in (("router_pol", "est_ttft_router", "router", {"scale": 1.0e4}),
                                ("replica_pol", "replica_mlp", "replica_0", {"hidden": [8]})):
        RLModuleSpec(module_class=module_class(typ), observation_space=env.observation_spaces[agent],
                     action_space=env.action_spaces[agent], model_config=mc).build().save_to_path(str(bc / mid))
    (bc / "bc_losses.txt").write_text("0.1\n")
    both = SimpleNamespace(warm_start={"router_pol": str(bc / "router_pol"), "replica_pol": str(bc / "replica_pol")})
    assert warm_start_dir(both) == str(bc)
    assert warm_start_dir(SimpleNamespace(warm_start={"router_pol": str(bc / "router_pol")})) == str(bc / "router_pol")
    assert warm_start_dir(SimpleNamespace(warm_start=None)) is None
    pol = load_checkpoint(bc, TASK)
    assert sorted(pol.modules) == ["replica_pol", "router_pol"]
    assert pol.module_for("replica_2") is pol.modules["replica_pol"]
    assert sorted(load_checkpoint(bc / "router_pol", TASK).modules) == ["router_pol"]
