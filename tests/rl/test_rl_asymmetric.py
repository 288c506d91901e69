"""Issue 21: the asymmetric critic (privileged features for the value head only), the lookahead
distillation data path, and the paired confirmation behind the demo's "improved" verdict."""

from __future__ import annotations

import types

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from inferencegym.envs.actions import FLAT_NVEC
from inferencegym.rl.distill import collect_lookahead, load_demonstrations, stack_episode
from inferencegym.rl.env_creators import PRIVILEGED_CRITIC_DIM, make_single_env
from inferencegym.rl.modules import MLPModule

TASK = "adversarial_multitenant"


def _module(dim: int, priv: int) -> MLPModule:
    torch.manual_seed(0)
    return RLModuleSpec(module_class=MLPModule, observation_space=gym.spaces.Box(-10, 10, (dim,), np.float32),
                        action_space=gym.spaces.MultiDiscrete(list(FLAT_NVEC)),
                        model_config={"hidden": [16], "critic_privileged_dims": priv}).build()


def test_the_actor_never_reads_the_privileged_features_and_the_critic_does():
    m = _module(12, 5)
    x = torch.as_tensor(np.random.default_rng(0).normal(size=(4, 12)).astype(np.float32))
    y = x.clone()
    y[:, -5:] += 3.0
    a = m.forward_inference({Columns.OBS: x})[Columns.ACTION_DIST_INPUTS]
    b = m.forward_inference({Columns.OBS: y})[Columns.ACTION_DIST_INPUTS]
    assert torch.equal(a, b)
    assert not torch.allclose(m.compute_values({Columns.OBS: x}), m.compute_values({Columns.OBS: y}))
    y[:, 0] += 3.0  # an observable feature moves the actor
    assert not torch.equal(a, m.forward_inference({Columns.OBS: y})[Columns.ACTION_DIST_INPUTS])
    with pytest.raises(ValueError, match="critic_privileged_dims"):
        _module(5, 5)


def test_the_training_env_appends_the_hidden_phase_and_future_load():
    plain = make_single_env({"task_id": TASK, "history_windows": 2, "phase_features": True})
    env = make_single_env({"task_id": TASK, "history_windows": 2, "phase_features": True, "privileged_critic": True})
    assert env.observation_space.shape[0] == plain.observation_space.shape[0] + PRIVILEGED_CRITIC_DIM
    o0, _ = env.reset(seed=3)
    p0, _ = plain.reset(seed=3)
    np.testing.assert_array_equal(o0[:-PRIVILEGED_CRITIC_DIM], p0)  # the actor's part is the plain obs
    phases, loads = set(), []
    for _ in range(40):
        o, *_ = env.step(env.action_space.sample() * 0)
        phases.add(float(o[-5]))
        loads.append(float(o[-4]))
    # the task's four hidden phases (low / high, with or without a mega-prompt) as index / 3
    assert all(abs(3 * p - round(3 * p)) < 1e-5 for p in phases) and len(phases) >= 2
    assert max(loads) > 0 and env.observation_space.contains(o)


def test_distillation_stacks_what_the_training_env_shows_and_refuses_held_out_seeds(tmp_path):
    with pytest.raises(ValueError, match="training seeds"):
        collect_lookahead(TASK, [1000], tmp_path)
    raw = make_single_env({"task_id": TASK})
    hist = make_single_env({"task_id": TASK, "history_windows": 4, "phase_features": True})
    raws, stacked = [raw.reset(seed=1)[0]], [hist.reset(seed=1)[0]]
    for _ in range(6):
        a = np.zeros(len(FLAT_NVEC), np.int64)
        raws.append(raw.step(a)[0])
        stacked.append(hist.step(a)[0])
    got = stack_episode(np.asarray(raws), windows=4, ema_weight=0.3, phase_task_id=TASK)
    np.testing.assert_allclose(got, np.asarray(stacked), rtol=0, atol=1e-6)
    acts = np.zeros((7, len(FLAT_NVEC)), np.int64)
    base = acts.copy()
    base[2, 1] = 3
    with open(tmp_path / f"{TASK}_0.npz", "wb") as fh:
        np.savez(fh, obs=np.asarray(raws), actions=acts, base_actions=base, score=0.9)
    obs, labels, summary = load_demonstrations([tmp_path / f"{TASK}_0.npz"], windows=4, phase_task_id=TASK)
    assert len(obs) == len(labels) == 7 and summary["deviation_share"] == pytest.approx(1 / 7)


def test_improvement_is_claimed_only_when_the_paired_interval_is_above_zero(monkeypatch):
    import inferencegym.rl.pipeline as pipe

    grades = {"ppo": [0.91, 0.92, 0.93, 0.90], "warm": [0.90, 0.90, 0.91, 0.89]}
    monkeypatch.setattr(pipe, "evaluate_one", lambda p, t, *, episodes, seed, name: {
        "scores": grades[p.name], "score_mean": float(np.mean(grades[p.name]))})
    ppo, warm = types.SimpleNamespace(name="ppo"), types.SimpleNamespace(name="warm")
    out = pipe.confirm_improvement(ppo, warm, TASK, episodes=4)
    assert out["improved"] and out["better_seeds"] == 4 and out["diff_mean"] == pytest.approx(0.015)
    grades["ppo"] = [0.93, 0.88, 0.92, 0.90]  # +0.0075 on average, but the interval spans 0
    assert not pipe.confirm_improvement(ppo, warm, TASK, episodes=4)["improved"]
    assert not pipe.confirm_improvement(ppo, warm, TASK, episodes=4, selected_warm_start=True)["improved"]
