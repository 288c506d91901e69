"""The residual autoscaler (``rl/control_residual.py``): its training data (generated without a fleet)
is what an evaluated episode shows it and what the ceiling does there; untrained it *is* the
``scheduled`` rule; its correction is bounded and falls back to the rule outside the training range;
an export evaluates and serves the same actions."""

import dataclasses

import numpy as np
import pytest
import torch
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

import inferencegym.rl  # noqa: F401  (registers the control handlers)
from inferencegym.envs.control_features import RESIDUAL_NAMES, feature_names, feature_set_of_size
from inferencegym.evaluation.control import run_episode
from inferencegym.policies.autoscalers import make_autoscaler
from inferencegym.rl.control import LearnedAutoscaler, load_control_policy
from inferencegym.rl.control_residual import (BASE_INDEX, EpisodeSource, ResidualAutoscalerModule, episode_samples,
                                              fit_residual)
from inferencegym.rl.control_spaces import control_spaces
from inferencegym.tasks.control import DEFAULT_WINDOWS, get_control_task


def short_task(windows: int = 3):
    t = get_control_task("cluster_autoscaling")
    return dataclasses.replace(t, episode_s=windows * t.window_s)


class Recorder:
    def __init__(self, inner) -> None:
        self.inner, self.seen, self.acts = inner, [], []

    def act(self, x):
        self.seen.append(np.array(x))
        a = self.inner(x)
        self.acts.append(a)
        return a


class Teacher:
    """``hindsight`` as an autoscaler object, recording its targets."""

    def __init__(self) -> None:
        self.h, self.acts = make_autoscaler("hindsight"), []

    def reset(self, ctx):
        self.h.reset(ctx)

    def act(self, obs):
        self.acts.append(self.h.act(obs))
        return self.acts[-1]


def module(**mc):
    obs, act = control_spaces("cluster_autoscaling", role="autoscaler", features="residual")
    return RLModuleSpec(module_class=ResidualAutoscalerModule, observation_space=obs, action_space=act,
                        model_config={"hidden": [8], "max_down": 2, "max_up": 1, **mc}).build()


class Greedy:
    def __init__(self, m) -> None:
        self.m = m

    def act(self, x):
        with torch.no_grad():
            return int(self.m.target(torch.as_tensor(np.asarray(x, np.float32)[None]))[0])


def test_offline_training_samples_are_what_an_episode_shows_and_what_the_ceiling_does():
    t = short_task()
    x, y = episode_samples(t, EpisodeSource(windows_path=str(DEFAULT_WINDOWS), day=4, seed=11))
    rec = LearnedAutoscaler(Recorder(lambda v: 6), features="residual")
    run_episode(t, "wva", day=4, seed=11, autoscaler=rec)
    assert x.shape == (3 * 150 // 15, len(RESIDUAL_NAMES)) and feature_set_of_size(len(RESIDUAL_NAMES)) == "residual"
    assert np.array_equal(np.stack(rec.policy.seen), x)  # the features do not depend on the fleet
    teacher = Teacher()
    run_episode(t, "hindsight", day=4, seed=11, autoscaler=teacher)
    assert y.tolist() == [float(a) for a in teacher.acts]


def test_an_untrained_residual_module_is_the_scheduled_rule():
    t = short_task()
    rec = LearnedAutoscaler(Recorder(Greedy(module()).act), features="residual")
    got = run_episode(t, "scheduled", day=2, seed=3, autoscaler=rec)
    ref = run_episode(t, "scheduled", day=2, seed=3)
    assert got["score"] == pytest.approx(ref["score"], abs=1e-12)
    names = feature_names("residual")
    assert all(a == int(round(v[names.index("sched_target")])) for a, v in zip(rec.policy.acts, rec.policy.seen))


def test_the_correction_is_bounded_and_falls_back_to_the_rule_out_of_range():
    m = module(margin=0.0)
    x = np.abs(np.random.default_rng(0).normal(1.0, 0.5, size=(200, len(RESIDUAL_NAMES)))).astype(np.float32)
    x[:, BASE_INDEX] = 5.0
    fit_residual(m, x, np.full(len(x), 12.0, np.float32), quantile=0.5, epochs=400)  # the teacher wants +7
    tgt = m.target(torch.as_tensor(x)).detach().numpy()
    inside = m.in_range(torch.as_tensor(x)).numpy()
    assert inside.mean() > 0.8 and np.all(tgt[inside] == 6.0)  # +1 at most (max_up)
    far = x[:1].copy()
    far[0, RESIDUAL_NAMES.index("rate_m1")] = 50.0  # a load no training day had
    assert not bool(m.in_range(torch.as_tensor(far))[0]) and float(m.target(torch.as_tensor(far))[0]) == 5.0
    m2 = module(margin=0.0)
    fit_residual(m2, x, np.full(len(x), 1.0, np.float32), quantile=0.5, epochs=400)  # the teacher wants -4
    assert np.all(m2.target(torch.as_tensor(x)).detach().numpy()[inside] == 3.0)  # -2 at most (max_down)


def test_an_exported_residual_module_evaluates_and_acts_as_in_process(tmp_path):
    from inferencegym.rl.policy_loader import export_module

    m = module()
    x = np.abs(np.random.default_rng(1).normal(2.0, 1.0, size=(300, len(RESIDUAL_NAMES)))).astype(np.float32)
    x[:, BASE_INDEX] = np.round(x[:, BASE_INDEX]) + 1
    fit_residual(m, x, x[:, BASE_INDEX] + np.where(x[:, 4] > 2.0, 1.0, -2.0).astype(np.float32), quantile=0.5,
                 epochs=20)
    export_module(m, tmp_path, module_type="residual_autoscaler", model_config=m.model_config,
                  module_id="default_policy", task_id="cluster_autoscaling", kind="control",
                  extra={"control": {"role": "autoscaler", "features": "residual"}})
    ctl = load_control_policy(f"checkpoint:{tmp_path}", "cluster_autoscaling")
    assert ctl.features == "residual"
    assert [ctl.policy.act(v) for v in x[:50]] == [Greedy(m).act(v) for v in x[:50]]
    t = short_task(2)
    a = run_episode(t, "scheduled", day=1, seed=2, autoscaler=ctl)
    b = run_episode(t, "scheduled", day=1, seed=2, autoscaler=LearnedAutoscaler(Greedy(m), features="residual"))
    assert a["score"] == pytest.approx(b["score"], abs=1e-12)


def test_the_up_head_caps_upward_corrections_and_leaves_downward_ones(tmp_path):
    from inferencegym.rl.policy_loader import export_module

    x = np.abs(np.random.default_rng(2).normal(1.0, 0.5, size=(300, len(RESIDUAL_NAMES)))).astype(np.float32)
    x[:, BASE_INDEX] = 5.0
    up = np.arange(len(x)) % 2 == 0  # the teacher wants +1 here, -2 elsewhere; feature 4 tells them apart
    x[:, 4] = np.where(up, 2.0, 0.5)
    y = np.where(up, 6.0, 3.0).astype(np.float32)
    m = module(margin=0.0, up_head=True)
    fit_residual(m, x, y, quantile=0.5, epochs=300)
    t0 = m.target(torch.as_tensor(x)).detach().numpy()  # up head untrained (zero): no upward correction
    inside = m.in_range(torch.as_tensor(x)).numpy()
    assert np.all(t0[inside & ~up] == 3.0) and np.all(t0[inside & up] <= 5.0)
    fit_residual(m, x, y, quantile=0.5, epochs=300, head="up")
    t1 = m.target(torch.as_tensor(x)).detach().numpy()
    assert np.mean(t1[inside & up] == 6.0) > 0.9 and np.all(t1[inside & ~up] == 3.0)
    with pytest.raises(ValueError, match="no 'up' head"):
        fit_residual(module(), x, y, quantile=0.5, epochs=1, head="up")
    export_module(m, tmp_path, module_type="residual_autoscaler", model_config=m.model_config,
                  module_id="default_policy", task_id="cluster_autoscaling", kind="control",
                  extra={"control": {"role": "autoscaler", "features": "residual"}})
    ctl = load_control_policy(f"checkpoint:{tmp_path}", "cluster_autoscaling")
    assert [ctl.policy.act(v) for v in x[:40]] == [Greedy(m).act(v) for v in x[:40]]
