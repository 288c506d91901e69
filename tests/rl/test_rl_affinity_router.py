"""``affinity_router``: the ``estimated_ttft`` score with a learned affinity weight (issue 21, eleventh session),
and behaviour cloning of a frozen learning replica module. (Its greedy choices = the affinity rule at its current
weight: ``tests/rl/test_rl_replica_agents.py``.)"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from inferencegym.envs.cluster_env import ClusterEnv
from inferencegym.envs.cluster_spaces import COL
from inferencegym.rl.bc import _trained_replica_module
from inferencegym.rl.modules import module_class

TASK = "cluster_prefix_sharing"


def _module(env, **mc):
    return RLModuleSpec(module_class=module_class("affinity_router"), observation_space=env.observation_spaces["router"],
                        action_space=env.action_spaces["router"], model_config=mc).build()


def _batch(o):
    return {k: torch.as_tensor(np.asarray(v)[None]) for k, v in o.items()}


def test_the_weight_gets_a_gradient_where_cached_shares_differ_and_a_value():
    env = ClusterEnv({"task_id": TASK, "episode_windows": 1})
    module = _module(env, scale=300.0)
    o = {k: np.array(v, copy=True) for k, v in env.observation_spaces["router"].sample().items()}
    o["action_mask"][:] = 1
    o["replicas"][:] = 0.0
    o["replicas"][:, COL["cached_share"]] = [0.0, 1.0, 0.0, 0.5][: o["replicas"].shape[0]]
    out = module.forward_train({Columns.OBS: _batch(o)})
    torch.log_softmax(out[Columns.ACTION_DIST_INPUTS], -1)[0, 1].backward()
    assert module.a.grad is not None and float(module.a.grad) > 0  # more weight makes the cached replica likelier
    assert module.compute_values({Columns.OBS: _batch(o)}).shape == (1,)
    with pytest.raises(ValueError, match="cached_share"):
        _module(ClusterEnv({"task_id": "cluster_routing", "episode_windows": 1}))


def test_behaviour_cloning_clones_a_frozen_learning_replica_module():
    def cfg(rep_type, trainable):
        return SimpleNamespace(policy_mapping={"router": "router_pol", "replica_*": "replica_pol"}, trainable=trainable,
                               modules={"replica_pol": SimpleNamespace(type=rep_type)})

    assert _trained_replica_module(cfg("replica_mlp", ["router_pol"])) == "replica_pol"
    assert _trained_replica_module(cfg("replica_mlp", ["router_pol", "replica_pol"])) == "replica_pol"
    assert _trained_replica_module(cfg("hold_knobs", ["router_pol"])) is None
    assert _trained_replica_module(cfg("replica_sticky", ["replica_pol"])) is None
