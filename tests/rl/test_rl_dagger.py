"""DAgger in the BC warm start (rl/dagger.py, bc.dagger_rounds): off by default (plain BC, the
same weights), and with rounds the student's visited states join the data with the privileged
teacher's labels for exactly those states."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from ray.rllib.core.rl_module.rl_module import RLModule, RLModuleSpec

from inferencegym.envs.actions import ServeAction, action_to_flat
from inferencegym.policies import get_policy
from inferencegym.rl import bc
from inferencegym.rl.config import ConfigError, load_config
from inferencegym.rl.dagger import (
    beta_for_round,
    collect_relabelled,
    round_seed,
    student_actor,
)
from inferencegym.rl.env_creators import make_single_env
from inferencegym.rl.modules import module_class

REPO = Path(__file__).resolve().parents[2]
# the privileged teacher path is what DAgger relabels with (independent of the shipped config's teacher)
TINY = ["env_config={episode_windows: 3}", "bc.episodes=1", "bc.epochs=2", "bc.baseline=clairvoyant"]


def encode(a):
    return action_to_flat(ServeAction.from_any(a))


def tiny_cfg(*sets: str):
    return load_config(REPO / "rllib_configs" / "adversarial_multitenant.yaml").with_overrides(
        sets=[*TINY, *sets])


def weights(module) -> dict:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def assert_same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k, x in a.items():
        torch.testing.assert_close(x, b[k], rtol=0, atol=0, msg=k)


def test_default_off_is_plain_bc_bit_identical(tmp_path):
    """dagger_rounds=0 (the default; other DAgger fields ignored): the module is exactly the plain
    recipe (teacher demonstrations on the privileged env, seeded init, bc_train), no dagger.json."""
    cfg = tiny_cfg()
    assert cfg.bc.dagger_rounds == 0
    got = RLModule.from_checkpoint(bc.warm_start(cfg, out_dir=tmp_path / "a")["default_policy"])
    off = tiny_cfg("bc.dagger_beta=0.5", "bc.dagger_student=sample", "bc.dagger_episodes=3")
    got_off = RLModule.from_checkpoint(bc.warm_start(off, out_dir=tmp_path / "b")["default_policy"])
    assert not (tmp_path / "a" / "dagger.json").exists()

    teacher = get_policy("clairvoyant", cfg.task_id)
    env = make_single_env({**cfg.full_env_config(), "privileged": True})
    obs, acts, rews, ends = bc.collect_single(env, teacher.act, episodes=1, seed=cfg.bc.seed, encode=encode)
    torch.manual_seed(cfg.seed)
    ref = RLModuleSpec(module_class=module_class("mlp"), observation_space=env.observation_space,
                       action_space=env.action_space,
                       model_config=dict(cfg.modules["default_policy"].model_config_)).build()
    bc.bc_train(ref, obs, acts, epochs=2, lr=cfg.bc.lr, minibatch_size=cfg.bc.minibatch_size, seed=cfg.seed,
                returns=bc.discounted_returns(rews, ends, cfg.ppo.gamma))
    assert_same(weights(got), weights(ref))
    assert_same(weights(got_off), weights(ref))


def test_one_round_adds_the_students_states_labelled_by_the_privileged_teacher(tmp_path, monkeypatch):
    """rounds=1: the second fit sees the demonstrations plus one student episode; replaying the
    student (its weights when it acted) on the round's seed reaches exactly the recorded states, and
    a fresh clairvoyant on the privileged env labels them with exactly the recorded actions."""
    calls = []
    real_train = bc.bc_train

    def spy(module, observations, actions, **kw):
        calls.append({"student": copy.deepcopy(module), "obs": list(observations), "acts": list(actions),
                      "returns": None if kw.get("returns") is None else np.asarray(kw["returns"], float)})
        return real_train(module, observations, actions, **kw)

    monkeypatch.setattr(bc, "bc_train", spy)
    cfg = tiny_cfg("bc.dagger_rounds=1")
    bc.warm_start(cfg, out_dir=tmp_path)
    assert len(calls) == 2
    first, second = calls
    assert len(first["obs"]) == 3 and len(second["obs"]) == 6          # grew by one 3-window episode
    for a, b in zip(first["obs"], second["obs"][:3]):
        np.testing.assert_array_equal(a, b)                              # the demonstrations are kept
    assert np.isnan(second["returns"][:3]).all() and np.isfinite(second["returns"][3:]).all()

    student = second["student"]  # the module as it was when it rolled out (before the refit)
    act = student_actor(student, mode="greedy", rng=np.random.default_rng(0))
    teacher = get_policy("clairvoyant", cfg.task_id)
    env = make_single_env({**cfg.full_env_config(), "privileged": True})
    obs, info = env.reset(seed=round_seed(cfg.bc.seed, 1, 1, 1))
    assert obs.shape == (24 * 5 + 3 + 5,)  # history view + phase forecast + the critic's privileged slots
    for t in range(3):
        np.testing.assert_array_equal(second["obs"][3 + t], obs)
        np.testing.assert_array_equal(second["acts"][3 + t], encode(teacher.act(obs, info)))
        obs, *_, info = env.step(act(obs))
    rec = json.loads((tmp_path / "dagger.json").read_text())
    assert rec["rounds"][0]["samples_added"] == 3 and rec["rounds"][0]["seeds"] == [10_001, 10_001]


def test_scratch_retraining_restarts_each_round_from_the_initial_weights(tmp_path, monkeypatch):
    starts = []
    real_train = bc.bc_train

    def spy(module, observations, actions, **kw):
        starts.append((weights(module), len(actions)))
        return real_train(module, observations, actions, **kw)

    monkeypatch.setattr(bc, "bc_train", spy)
    bc.warm_start(tiny_cfg("bc.dagger_rounds=2", "bc.dagger_retrain=scratch"), out_dir=tmp_path)
    assert [n for _, n in starts] == [3, 6, 9]
    assert_same(starts[1][0], starts[0][0])
    assert_same(starts[2][0], starts[0][0])
    assert json.loads((tmp_path / "dagger.json").read_text())["retrain"] == "scratch"


def test_relabelled_rollout_labels_what_the_teacher_sees_and_mixes_with_beta():
    """The teacher is called on the very observation the student is trained on, with the privileged
    info of that state; beta mixes in the teacher's actions, drawn from the Generator only."""
    cfg = tiny_cfg()
    env = make_single_env({**cfg.full_env_config(), "privileged": True})

    class Teacher:  # acts on the hidden next-window arrivals: wrong alignment or no privilege shows
        def __init__(self):
            self.seen = []

        def act(self, obs, info):
            self.seen.append(np.array(obs))
            return ServeAction(batch_cap=(16, 32, 64, 128)[info["oracle/next_arrivals"] % 4])

    def student(obs):
        return np.zeros(6, dtype=np.int64)

    t = Teacher()
    roll = collect_relabelled(env, student, t, episodes=2, seed=7, encode=encode)
    assert len(roll.obs) == 6 and roll.episode_ends == [False, False, True] * 2
    for o, seen in zip(roll.obs, t.seen):
        np.testing.assert_array_equal(o, seen)
    assert all(np.array_equal(e, np.zeros(6)) for e in roll.executed) and not any(roll.teacher_acted)
    ref = make_single_env({**cfg.full_env_config(), "privileged": True})
    k = 0
    for ep in range(2):
        obs, info = ref.reset(seed=7 + ep)
        for _ in range(3):
            np.testing.assert_array_equal(roll.labels[k], encode(Teacher().act(obs, info)))
            obs, *_, info = ref.step(roll.executed[k])
            k += 1
    mixed = [collect_relabelled(env, student, Teacher(), episodes=2, seed=7, encode=encode, beta=0.6,
                                rng=np.random.default_rng(3)) for _ in range(2)]
    assert mixed[0].teacher_acted == mixed[1].teacher_acted and 0 < sum(mixed[0].teacher_acted) < 6
    for e, lab, by_t in zip(mixed[0].executed, mixed[0].labels, mixed[0].teacher_acted):
        np.testing.assert_array_equal(e, lab if by_t else np.zeros(6))
    with pytest.raises(ValueError, match="numpy Generator"):
        collect_relabelled(env, student, Teacher(), episodes=1, seed=7, encode=encode, beta=0.5)


def test_dagger_is_deterministic_and_changes_the_clone(tmp_path):
    cfg = tiny_cfg("bc.dagger_rounds=2", "bc.dagger_student=sample", "bc.dagger_beta=0.5")
    a = RLModule.from_checkpoint(bc.warm_start(cfg, out_dir=tmp_path / "a")["default_policy"])
    b = RLModule.from_checkpoint(bc.warm_start(cfg, out_dir=tmp_path / "b")["default_policy"])
    assert_same(weights(a), weights(b))
    assert (tmp_path / "a" / "dagger.json").read_text() == (tmp_path / "b" / "dagger.json").read_text()
    plain = RLModule.from_checkpoint(bc.warm_start(tiny_cfg(), out_dir=tmp_path / "c")["default_policy"])
    assert any(not torch.equal(x, plain.state_dict()[k]) for k, x in a.state_dict().items())
    rounds = json.loads((tmp_path / "a" / "dagger.json").read_text())["rounds"]
    assert [r["samples_total"] for r in rounds] == [6, 9] and [r["beta"] for r in rounds] == [0.5, 0.25]
    assert len((tmp_path / "a" / "bc_losses.txt").read_text().split()) == 3 * 2


def test_schedules_and_config_errors():
    assert beta_for_round(0.5, 1) == 0.5 and beta_for_round(0.5, 3) == 0.125 and beta_for_round(0.0, 1) == 0.0
    assert round_seed(10_000, 8, 4, 1) == 10_008 and round_seed(10_000, 8, 4, 2) == 10_012
    with pytest.raises(ValueError, match="count from 1"):
        beta_for_round(0.5, 0)
    with pytest.raises(ConfigError, match="dagger_beta"):
        tiny_cfg("bc.dagger_beta=1.0")
    with pytest.raises(ConfigError, match="dagger_student"):
        tiny_cfg("bc.dagger_student=epsilon")
    with pytest.raises(ConfigError, match="env: single"):
        load_config(REPO / "rllib_configs" / "cluster_routing.yaml").with_overrides(sets=["bc.dagger_rounds=1"])


def test_bc_train_masks_nan_returns():
    """NaN value targets (the teacher's demonstrations under DAgger) are skipped, not propagated."""
    import gymnasium as gym

    rng = np.random.default_rng(0)
    obs = [rng.normal(size=4).astype(np.float32) for _ in range(64)]
    acts = [np.array([int(o[0] > 0), int(o[1] > 0)]) for o in obs]
    rets = [float("nan")] * 32 + [float(o[2]) for o in obs[32:]]
    torch.manual_seed(0)
    m = RLModuleSpec(module_class=module_class("mlp"), observation_space=gym.spaces.Box(-5, 5, (4,)),
                     action_space=gym.spaces.MultiDiscrete([2, 2]), model_config={"hidden": [8]}).build()
    losses = bc.bc_train(m, obs, acts, epochs=3, lr=1e-2, minibatch_size=16, seed=0, returns=rets)
    assert all(np.isfinite(losses))
    assert all(torch.isfinite(p).all() for p in m.parameters())
    with pytest.raises(ValueError, match="every return is NaN"):
        bc.bc_train(m, obs, acts, epochs=1, lr=1e-2, minibatch_size=16, returns=[float("nan")] * 64)
