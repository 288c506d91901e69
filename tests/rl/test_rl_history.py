"""History in the single-agent observation (envs/history.py): the env wrapper used in training and
the policy loader's stacker at inference see the same stacked observation."""

from __future__ import annotations

import numpy as np
import pytest

from inferencegym.envs.history import HistoryStacker
from inferencegym.rl.config import ConfigError, load_config
from inferencegym.rl.env_creators import make_single_env
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_stacker_shifts_windows_and_averages():
    s = HistoryStacker(2, windows=3, ema_weight=0.5)
    out = s.push([1.0, 2.0])
    assert out.tolist() == [1, 2, 1, 2, 1, 2, 1, 2]  # first window repeated, EMA = first window
    out = s.push([3.0, 4.0])
    assert out.tolist() == [3, 4, 1, 2, 1, 2, 2, 3]
    out = s.push([5.0, 6.0])
    assert out.tolist() == [5, 6, 3, 4, 1, 2, 3.5, 4.5]
    s.reset()
    assert s.push([7.0, 8.0]).tolist() == [7, 8] * 4
    with pytest.raises(ValueError, match="2 features"):
        s.push([1.0, 2.0, 3.0])


def test_env_wrapper_and_policy_loader_stack_the_same_way():
    """A module trained on the wrapped env acts identically whether it is given the wrapped env's
    observations or the raw env's (the loader stacks them itself, reset per episode)."""
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from inferencegym.rl.modules import module_class
    from inferencegym.rl.policy_loader import ModulePolicy

    wrapped = make_single_env({"task_id": "adversarial_multitenant", "history_windows": 3,
                               "episode_windows": 12})
    raw = make_single_env({"task_id": "adversarial_multitenant", "episode_windows": 12})
    d = raw.observation_space.shape[0]
    assert wrapped.observation_space.shape == (4 * d,)
    import torch

    torch.manual_seed(0)
    m = RLModuleSpec(module_class=module_class("mlp"), observation_space=wrapped.observation_space,
                     action_space=wrapped.action_space, model_config={"hidden": [16], "history_windows": 3}).build()
    pol = ModulePolicy({"default_policy": m}, task_id="adversarial_multitenant", kind="single", source="test")
    for ep in range(2):
        pol.reset(ep)
        ow, _ = wrapped.reset(seed=ep)
        orr, _ = raw.reset(seed=ep)
        for _ in range(8):
            np.testing.assert_array_equal(ow[:d], orr)
            a_w, a_r = pol.act_flat(ow), pol.act_flat(orr)
            np.testing.assert_array_equal(a_w, a_r)
            ow, *_ = wrapped.step(a_w)
            orr, *_ = raw.step(a_r)


def test_history_settings_reach_the_env_and_are_single_agent_only():
    cfg = load_config(REPO / "rllib_configs" / "adversarial_multitenant.yaml").with_overrides(
        sets=["modules.default_policy.model_config={hidden: [64, 64], history_windows: 4}"])
    assert cfg.full_env_config()["history_windows"] == 4
    with pytest.raises(ConfigError, match="env: single"):
        load_config(REPO / "rllib_configs" / "cluster_routing.yaml").with_overrides(
            sets=["modules.replica_pol.model_config={history_windows: 2}"])


def test_warm_start_is_deterministic_and_clones_through_the_history_env(tmp_path):
    """Same seed -> bit-identical BC module (initial weights seeded); the module is built on the
    history-stacked observation of the config."""
    import torch
    from ray.rllib.core.rl_module.rl_module import RLModule

    from inferencegym.rl.bc import warm_start

    cfg = load_config(REPO / "rllib_configs" / "adversarial_multitenant.yaml").with_overrides(sets=[
        "env_config={episode_windows: 3}", "bc.episodes=1", "bc.epochs=2"])
    a = RLModule.from_checkpoint(warm_start(cfg, out_dir=tmp_path / "a")["default_policy"])
    b = RLModule.from_checkpoint(warm_start(cfg, out_dir=tmp_path / "b")["default_policy"])
    # 4 windows + their average of 24 features, the 3 phase-forecast features, the critic's 5 privileged ones
    assert a.observation_space.shape == (24 * 5 + 3 + 5,)
    for (k, x), (_, y) in zip(sorted(a.state_dict().items()), sorted(b.state_dict().items())):
        torch.testing.assert_close(x, y, rtol=0, atol=0, msg=k)
