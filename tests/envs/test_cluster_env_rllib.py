"""One tiny PPO iteration on ClusterEnv with the project's router / replica modules (RLlib smoke)."""

from __future__ import annotations

import pytest


@pytest.mark.ray
def test_ppo_one_iteration_on_cluster_env(local_ray):
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from inferencegym.envs.cluster_env import ClusterEnv
    from inferencegym.rl.modules import ReplicaAgentModule, ReplicaAttentionRouter

    cfg = (PPOConfig()
           .environment(ClusterEnv, env_config={"task_id": "cluster_heterogeneous",
                                                "episode_windows": 4})
           .env_runners(num_env_runners=0).learners(num_learners=0)
           .training(train_batch_size_per_learner=256, minibatch_size=64, num_epochs=1)
           .multi_agent(policies={"router_pol", "replica_pol"},
                        policy_mapping_fn=lambda aid, *a, **k: "router_pol" if aid == "router"
                        else "replica_pol")
           .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs={
               "router_pol": RLModuleSpec(module_class=ReplicaAttentionRouter),
               "replica_pol": RLModuleSpec(module_class=ReplicaAgentModule)}))
           .debugging(seed=0))
    algo = cfg.build_algo()
    result = algo.train()
    algo.stop()
    assert result["env_runners"]["num_env_steps_sampled"] >= 256
    returns = result["env_runners"]["agent_episode_returns_mean"]
    assert "router" in returns and "replica_0" in returns
    for mid in ("router_pol", "replica_pol"):
        assert mid in result["learners"]
