"""The ``replica_sticky`` replica agent (issue 21): its untrained greedy policy is exactly
``hold_knobs`` (so its warm start is the shipped cluster baselines' replicas), and PPO can move it
through the residual head alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from inferencegym.envs.cluster_spaces import REPLICA_ACTION_NVEC
from inferencegym.rl.env_creators import make_cluster_env
from inferencegym.rl.modules import module_class

TASK = "cluster_prefix_sharing"


def _build(env, **mc):
    rid = env.replica_ids[0]
    return RLModuleSpec(module_class=module_class("replica_sticky"), observation_space=env.observation_spaces[rid],
                        action_space=env.action_spaces[rid], model_config=mc).build()


def _greedy(module, obs: np.ndarray) -> np.ndarray:
    logits = module.forward_inference({Columns.OBS: torch.as_tensor(obs)})[Columns.ACTION_DIST_INPUTS]
    parts, off = [], 0
    for n in REPLICA_ACTION_NVEC:
        parts.append(torch.argmax(logits[:, off:off + n], dim=-1))
        off += n
    return torch.stack(parts, dim=-1).numpy()


def test_untrained_sticky_module_holds_every_knob_and_its_residual_moves_it():
    env = make_cluster_env({"task_id": TASK, "internal_router": "estimated_ttft", "episode_windows": 3})
    module = _build(env, hold_logit=2.5)
    obs, infos = env.reset(seed=3)
    rng = np.random.default_rng(0)
    rows, knobs = [], []
    for _ in range(2):  # windows with random knobs: the module must follow whatever is current
        act = {a: rng.integers(0, np.asarray(REPLICA_ACTION_NVEC)) for a in obs}
        obs, _, _, _, infos = env.step(act)
        for a, o in obs.items():
            rows.append(o)
            knobs.append(np.asarray(infos[a]["knobs"]))
    x = np.asarray(rows, np.float32)
    np.testing.assert_array_equal(_greedy(module, x), np.asarray(knobs))
    # sampling explores: a knob changes with probability (n-1) / (e^2.5 + n-1) per window
    logits = module.forward_exploration({Columns.OBS: torch.as_tensor(x)})[Columns.ACTION_DIST_INPUTS]
    p_hold = torch.softmax(logits[:, :REPLICA_ACTION_NVEC[0]], -1).max(-1).values
    n = REPLICA_ACTION_NVEC[0]
    assert torch.allclose(p_hold, torch.full_like(p_hold, np.exp(2.5) / (np.exp(2.5) + n - 1)), atol=1e-5)
    # the residual head is what PPO trains: a bias of 3 nats on batch cap 64 beats the hold logit
    with torch.no_grad():
        module.pi.bias[2] = 3.0
    assert (_greedy(module, x)[:, 0] == 2).all()


def test_the_deterministic_readout_is_where_the_sampled_policy_settles():
    """A residual preference below the hold logit (1 nat for bucket 3 of the first knob, hold 2.5):
    one window's argmax would hold, the sampled chain settles on bucket 3 (its stationary mode), and
    the readout plays it; the other knobs (no preference) hold; training still samples the full logits."""
    env = make_cluster_env({"task_id": TASK, "internal_router": "estimated_ttft", "episode_windows": 3})
    module = _build(env, hold_logit=2.5)
    obs, _ = env.reset(seed=4)
    x = torch.as_tensor(np.asarray(list(obs.values()), np.float32))
    held = _greedy(module, x.numpy())
    n = REPLICA_ACTION_NVEC[0]
    with torch.no_grad():
        module.pi.bias[3] = 1.0
    got = _greedy(module, x.numpy())
    assert (got[:, 0] == 3).all() and (held[:, 0] != 3).all()
    np.testing.assert_array_equal(got[:, 1:], held[:, 1:])
    train_logits = module.forward_exploration({Columns.OBS: x})[Columns.ACTION_DIST_INPUTS][:, :n]
    assert (train_logits.argmax(-1).numpy() == held[:, 0]).all()  # one window's argmax still holds
    # the stationary distribution of the sampled chain, pi_j ~ e^r_j (S + e^r_j (e^h - 1)), peaks at bucket 3
    r = module.pi.bias[:n].detach().numpy().astype(float)
    w = np.exp(r) * (np.exp(r).sum() + np.exp(r) * (np.exp(2.5) - 1))
    assert int(np.argmax(w)) == 3


def test_sticky_module_refuses_a_bad_config():
    env = make_cluster_env({"task_id": TASK, "internal_router": "estimated_ttft", "episode_windows": 2})
    with pytest.raises(ValueError, match="hold_logit"):
        _build(env, hold_logit=-1.0)
    with pytest.raises(ValueError, match="unknown model_config keys"):
        _build(env, hold=3.0)
