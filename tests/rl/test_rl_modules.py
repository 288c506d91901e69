"""RLModules built with RLModuleSpec(...).build() and no Ray cluster: shapes, masks, any N, values."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from inferencegym.rl.bc import bc_train
from inferencegym.rl.modules import (MASKED_LOGIT, HoldKnobsModule, MLPModule, MLPRouter,
                                     ReplicaAttentionRouter, ReplicaAgentModule, module_class)


def router_space(n: int, f: int = 11, r: int = 5) -> gym.spaces.Dict:
    return gym.spaces.Dict({
        "replicas": gym.spaces.Box(-100, 100, (n, f), np.float32),
        "request": gym.spaces.Box(-100, 100, (r,), np.float32),
        "action_mask": gym.spaces.Box(0.0, 1.0, (n,), np.float32)})


def router_batch(n: int, b: int, rng: np.random.Generator, f: int = 11, r: int = 5, mask=None) -> dict:
    m = np.ones((b, n), np.float32) if mask is None else np.asarray(mask, np.float32)
    return {Columns.OBS: {"replicas": torch.as_tensor(rng.normal(size=(b, n, f)).astype(np.float32)),
                          "request": torch.as_tensor(rng.normal(size=(b, r)).astype(np.float32)),
                          "action_mask": torch.as_tensor(m)}}


def build(cls, obs_space, act_space, **mc):
    torch.manual_seed(0)
    return RLModuleSpec(module_class=cls, observation_space=obs_space, action_space=act_space,
                        model_config=mc).build()


def test_attention_router_shapes_and_value_head():
    n, rng = 4, np.random.default_rng(0)
    m = build(ReplicaAttentionRouter, router_space(n), gym.spaces.Discrete(n))
    batch = router_batch(n, 6, rng)
    out = m.forward_train(batch)
    assert out[Columns.ACTION_DIST_INPUTS].shape == (6, n)
    assert out[Columns.EMBEDDINGS].shape == (6, 64)
    v1 = m.compute_values(batch)
    v2 = m.compute_values(batch, embeddings=out[Columns.EMBEDDINGS])
    assert v1.shape == (6,)
    torch.testing.assert_close(v1, v2)  # the value head reuses the shared encoder
    inf = m.forward_inference(batch)[Columns.ACTION_DIST_INPUTS]
    torch.testing.assert_close(inf, out[Columns.ACTION_DIST_INPUTS])


def test_attention_router_respects_mask_everywhere():
    n, b, rng = 5, 64, np.random.default_rng(1)
    mask = np.ones((b, n), np.float32)
    mask[:, [0, 3]] = 0.0
    mask[::2, 4] = 0.0
    m = build(ReplicaAttentionRouter, router_space(n), gym.spaces.Discrete(n))
    batch = router_batch(n, b, rng, mask=mask)
    for fwd in (m.forward_inference, m.forward_exploration, m.forward_train):
        logits = fwd(batch)[Columns.ACTION_DIST_INPUTS]
        assert torch.all(logits[torch.as_tensor(mask) < 0.5] == MASKED_LOGIT)
        dist = m.get_exploration_action_dist_cls().from_logits(logits)
        torch.manual_seed(0)
        samples = torch.stack([dist.sample() for _ in range(50)])  # (50, B)
        chosen_mask = torch.as_tensor(mask).gather(1, samples.T)
        assert torch.all(chosen_mask == 1.0), "a masked replica was sampled"
        assert torch.isfinite(dist.entropy()).all()


def test_attention_router_works_for_any_number_of_replicas():
    rng = np.random.default_rng(2)
    m4 = build(ReplicaAttentionRouter, router_space(4), gym.spaces.Discrete(4))
    m16 = build(ReplicaAttentionRouter, router_space(16), gym.spaces.Discrete(16))
    # no parameter depends on N: the weights of the 4-replica module load into the 16-replica one
    m16.load_state_dict(m4.state_dict())
    for n in (2, 7, 16, 64):
        out = m4.forward_inference(router_batch(n, 3, rng))[Columns.ACTION_DIST_INPUTS]
        assert out.shape == (3, n)
    # permuting replicas permutes the logits (replicas are a set, not a sequence)
    batch = router_batch(6, 2, rng)
    perm = torch.as_tensor([3, 1, 5, 0, 2, 4])
    pb = {Columns.OBS: {"replicas": batch[Columns.OBS]["replicas"][:, perm],
                        "request": batch[Columns.OBS]["request"],
                        "action_mask": batch[Columns.OBS]["action_mask"][:, perm]}}
    a = m4.forward_inference(batch)[Columns.ACTION_DIST_INPUTS]
    pa = m4.forward_inference(pb)[Columns.ACTION_DIST_INPUTS]
    torch.testing.assert_close(a[:, perm], pa, rtol=1e-4, atol=1e-5)


def test_router_errors_are_clear():
    with pytest.raises(ValueError, match="divisible"):
        build(ReplicaAttentionRouter, router_space(4), gym.spaces.Discrete(4), embed_dim=30, num_heads=4)
    with pytest.raises(ValueError, match="does not match"):
        build(ReplicaAttentionRouter, router_space(4), gym.spaces.Discrete(5))
    with pytest.raises(ValueError, match="unknown model_config keys"):
        build(ReplicaAttentionRouter, router_space(4), gym.spaces.Discrete(4), embed_dimm=8)
    with pytest.raises(ValueError, match="unknown module type 'transformer'; valid: "):
        module_class("transformer")


def test_mlp_router_ablation_masks_and_is_tied_to_n():
    n, rng = 4, np.random.default_rng(3)
    m = build(MLPRouter, router_space(n), gym.spaces.Discrete(n))
    mask = np.ones((8, n), np.float32)
    mask[:, 1] = 0
    out = m.forward_train(router_batch(n, 8, rng, mask=mask))
    assert out[Columns.ACTION_DIST_INPUTS].shape == (8, n)
    assert torch.all(out[Columns.ACTION_DIST_INPUTS][:, 1] == MASKED_LOGIT)
    assert m.compute_values(router_batch(n, 8, rng)).shape == (8,)


def test_mlp_module_multidiscrete_and_replica_module():
    obs = gym.spaces.Box(0, np.inf, (23,), np.float32)
    act = gym.spaces.MultiDiscrete([8, 4, 3, 3, 2, 2])
    m = build(MLPModule, obs, act, hidden=[32, 32])
    x = {Columns.OBS: torch.rand(5, 23)}
    out = m.forward_train(x)
    assert out[Columns.ACTION_DIST_INPUTS].shape == (5, int(act.nvec.sum()))
    a = m.get_inference_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS]).to_deterministic().sample()
    assert a.shape == (5, 6)
    assert all(act.contains(np.asarray(row)) for row in a.numpy())
    torch.testing.assert_close(m.compute_values(x), m.compute_values(x, out[Columns.EMBEDDINGS]))
    r = build(ReplicaAgentModule, gym.spaces.Box(-100, 100, (28,), np.float32), gym.spaces.MultiDiscrete([5, 4, 3, 4]))
    assert r.forward_inference({Columns.OBS: torch.zeros(3, 28)})[Columns.ACTION_DIST_INPUTS].shape == (3, 16)


def test_hold_knobs_keeps_current_knobs():
    nvec = [5, 4, 3, 4]
    m = build(HoldKnobsModule, gym.spaces.Box(-100, 100, (28,), np.float32), gym.spaces.MultiDiscrete(nvec))
    knobs = np.array([[3, 2, 0, 1], [0, 3, 2, 3]])
    obs = np.zeros((2, 28), np.float32)
    obs[:, 22:26] = knobs / (np.asarray(nvec) - 1)
    out = m.forward_exploration({Columns.OBS: torch.as_tensor(obs)})
    dist = m.get_exploration_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS])
    torch.manual_seed(0)
    for _ in range(20):
        np.testing.assert_array_equal(dist.sample().numpy(), knobs)


def test_bc_train_imitates_a_rule():
    """A few epochs of supervised NLL make the router pick the least-loaded unmasked replica."""
    n, rng = 4, np.random.default_rng(4)
    m = build(ReplicaAttentionRouter, router_space(n, f=3, r=2), gym.spaces.Discrete(n))
    obs, acts = [], []
    for _ in range(512):
        feats = rng.random((n, 3)).astype(np.float32)
        mask = np.ones(n, np.float32)
        mask[rng.integers(n)] = 0.0
        load = np.where(mask > 0, feats[:, 0], np.inf)
        obs.append({"replicas": feats, "request": rng.random(2).astype(np.float32), "action_mask": mask})
        acts.append(int(np.argmin(load)))
    losses = bc_train(m, obs, acts, epochs=25, lr=3e-3, minibatch_size=64, seed=0)
    assert losses[-1] < 0.5 * losses[0]
    test = obs[:128]
    logits = m.forward_inference({Columns.OBS: {k: torch.as_tensor(np.stack([o[k] for o in test]))
                                                for k in test[0]}})[Columns.ACTION_DIST_INPUTS]
    acc = float((logits.argmax(-1).numpy() == np.asarray(acts[:128])).mean())
    assert acc > 0.8, acc
    with pytest.raises(ValueError, match="as many actions as observations"):
        bc_train(m, obs[:3], acts[:2], epochs=1, lr=1e-3, minibatch_size=8)


def test_discounted_returns_restart_at_episode_ends():
    from inferencegym.rl.bc import discounted_returns

    g = discounted_returns([1.0, 1.0, 1.0, 2.0, 2.0], [False, False, True, False, True], 0.5)
    np.testing.assert_allclose(g, [1.75, 1.5, 1.0, 3.0, 2.0])
    with pytest.raises(ValueError, match="one episode_ends flag per reward"):
        discounted_returns([1.0], [], 0.9)


def test_bc_value_warmup_fits_the_critic_and_leaves_the_cloned_policy_alone():
    """With returns, BC also trains the value head (the critic PPO starts from), on the encoder's
    detached features: the policy it clones is exactly the one cloned without returns."""
    n, rng = 4, np.random.default_rng(5)
    obs, acts, rets = [], [], []
    for _ in range(512):
        feats = rng.random((n, 3)).astype(np.float32)
        obs.append({"replicas": feats, "request": rng.random(2).astype(np.float32),
                    "action_mask": np.ones(n, np.float32)})
        acts.append(int(np.argmin(feats[:, 0])))
        rets.append(5.0 + 10.0 * float(feats[:, 0].min()))
    batch = {Columns.OBS: {k: torch.as_tensor(np.stack([o[k] for o in obs])) for k in obs[0]}}
    errs, logits = {}, {}
    for with_returns in (False, True):
        torch.manual_seed(0)
        m = build(ReplicaAttentionRouter, router_space(n, f=3, r=2), gym.spaces.Discrete(n))
        bc_train(m, obs, acts, epochs=30, lr=3e-3, minibatch_size=64, seed=0,
                 returns=rets if with_returns else None)
        with torch.no_grad():
            v = m.compute_values(batch).numpy()
            logits[with_returns] = m.forward_inference(batch)[Columns.ACTION_DIST_INPUTS].numpy()
        errs[with_returns] = float(np.mean((v - np.asarray(rets)) ** 2) / np.var(rets))
    assert errs[True] < 0.5 * errs[False], errs
    np.testing.assert_array_equal(logits[True], logits[False])
    assert float((logits[True].argmax(-1) == np.asarray(acts)).mean()) > 0.8
    with pytest.raises(ValueError, match="one return per observation"):
        bc_train(m, obs[:4], acts[:4], epochs=1, lr=1e-3, minibatch_size=8, returns=rets[:3])


def test_building_our_modules_logs_no_rlmodule_config_deprecation():
    """RLlib's ``RLModule.__init__`` builds the deprecated ``RLModuleConfig`` itself and logs
    "RLModule(config=[RLModuleConfig object]) has been deprecated" in every process; our modules use
    the new constructor arguments (through ``RLModuleSpec``), so that notice is silenced
    (inferencegym.rl.rllib_compat) and must not appear; other RLlib warnings still would."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import gymnasium as gym, numpy as np\n"
            "from ray.rllib.core.rl_module.rl_module import RLModuleSpec\n"
            "from inferencegym.rl.modules import MLPModule\n"
            "box = gym.spaces.Box(-1, 1, (4,), np.float32)\n"
            "RLModuleSpec(module_class=MLPModule, observation_space=box, action_space=gym.spaces.Discrete(3),"
            " model_config={}).build()\n"
            "print('built')\n")
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=repo,
                         env={**__import__("os").environ, "PYTHONPATH": str(repo)})
    assert out.returncode == 0 and "built" in out.stdout, out.stderr[-3000:]
    assert "RLModuleConfig" not in out.stdout + out.stderr
