"""Issue 16: the recurrent option (``type: lstm``: RLlib's default PPO module with ``use_lstm=True``).

Config checks (single env only, no behaviour cloning) and Ray-free module checks: the module builds on
the real env's spaces, acts, and the policy loader carries its state across steps exactly as a
whole-sequence forward pass does. One ``ray`` test runs a PPO iteration with it through the project's
learner and connectors.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from inferencegym.rl.config import ConfigError, load_config
from inferencegym.rl.env_creators import make_single_env
from inferencegym.rl.modules import LSTMModule, lstm_model_config, module_class
from inferencegym.rl.policy_loader import ModulePolicy, export_module, load_exported

REPO = Path(__file__).resolve().parents[2]
TASK = "adversarial_multitenant"
LSTM_SETS = ["modules.default_policy.type=lstm", "modules.default_policy.model_config={lstm_cell_size: 16}",
             "bc.enabled=false"]


def _config(name: str, sets: list[str]):
    return load_config(REPO / "rllib_configs" / f"{name}.yaml").with_overrides(sets=sets)


def test_config_accepts_lstm_for_the_single_env_without_history_stacking():
    cfg = _config(TASK, LSTM_SETS)
    assert cfg.modules["default_policy"].type == "lstm"
    assert "history_windows" not in cfg.full_env_config()  # the env is not frame-stacked


@pytest.mark.parametrize("name, sets, message", [
    (TASK, LSTM_SETS[:2] + ["bc.enabled=true"], "bc.enabled is not supported with module type lstm"),
    ("cluster_routing", ["modules.router_pol.type=lstm", "modules.router_pol.model_config={}",
                         "bc.enabled=false"], r"module type lstm \(\['router_pol'\]\) is for env: single"),
])
def test_config_rejects_lstm_with_bc_or_the_cluster_env(name, sets, message):
    with pytest.raises(ConfigError, match=message):
        _config(name, sets)


def test_lstm_model_config_completes_and_rejects_clearly():
    mc = lstm_model_config({"lstm_cell_size": 8})
    assert mc["use_lstm"] is True and mc["lstm_cell_size"] == 8 and mc["max_seq_len"] == 20
    assert lstm_model_config(mc) == mc  # idempotent (re-applied when a checkpoint is rebuilt)
    with pytest.raises(ValueError, match="history_windows is for type mlp"):
        lstm_model_config({"history_windows": 4})
    with pytest.raises(ValueError, match="needs use_lstm=True"):
        lstm_model_config({"use_lstm": False})


def _module(cell: int = 16):
    env = make_single_env({"task_id": TASK, "episode_windows": 12})
    torch.manual_seed(0)
    m = RLModuleSpec(module_class=module_class("lstm"), observation_space=env.observation_space,
                     action_space=env.action_space, model_config={"lstm_cell_size": cell}).build()
    return env, m


def test_lstm_module_builds_on_the_env_spaces_and_carries_state():
    env, m = _module()
    assert isinstance(m, LSTMModule) and m.is_stateful()
    obs = []
    o, _ = env.reset(seed=3)
    pol = ModulePolicy({"default_policy": m}, task_id=TASK, kind="single", source="test")
    pol.reset(3)
    stepwise = []
    for _ in range(6):
        obs.append(o)
        a = pol.act_flat(o)
        assert env.action_space.contains(a.astype(env.action_space.dtype))
        stepwise.append(a)
        o, *_ = env.step(a)
    # The same observations as one (B=1, T=6) sequence from the initial state: the greedy actions
    # of the step-by-step policy (state carried between calls) are the sequence's actions.
    seq = torch.as_tensor(np.stack(obs), dtype=torch.float32)[None]
    state = {k: v[None] for k, v in m.get_initial_state().items()}
    with torch.no_grad():
        out = m.forward_inference({Columns.OBS: seq, Columns.STATE_IN: state})
    dist = m.get_inference_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS][0])
    np.testing.assert_array_equal(np.asarray(dist.to_deterministic().sample()), np.stack(stepwise))
    assert out[Columns.STATE_OUT]["h"].shape == (1, 1, 16)
    # The state matters: the last window's logits differ from those of the window seen afresh.
    with torch.no_grad():
        fresh = m.forward_inference({Columns.OBS: seq[:, -1:], Columns.STATE_IN: state})
    assert not torch.allclose(fresh[Columns.ACTION_DIST_INPUTS][0, 0], out[Columns.ACTION_DIST_INPUTS][0, -1])
    # reset() starts again from the initial state: the same episode gives the same actions.
    pol.reset(3)
    np.testing.assert_array_equal(np.stack([pol.act_flat(x) for x in obs]), np.stack(stepwise))


def test_lstm_module_round_trips_through_the_pretrained_export(tmp_path):
    env, m = _module(cell=8)
    export_module(m, tmp_path, module_type="lstm", model_config={"lstm_cell_size": 8},
                  module_id="default_policy", task_id=TASK, kind="single")
    loaded = load_exported(tmp_path, TASK)
    pol = ModulePolicy({"default_policy": m}, task_id=TASK, kind="single", source="test")
    o, _ = env.reset(seed=1)
    for _ in range(4):
        a = pol.act_flat(o)
        np.testing.assert_array_equal(loaded.act_flat(o), a)
        o, *_ = env.step(a)


@pytest.mark.ray
def test_ppo_one_iteration_with_the_lstm_module():
    """One tiny PPO iteration on the real env through the project's learner (loss mask, (B, T)
    batches from RLlib's connectors) and callbacks."""
    import ray

    from inferencegym.rl.train import build_ppo_config

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    torch.set_num_threads(1)
    cfg = _config(TASK, LSTM_SETS + [
        "ppo.train_batch_size_per_learner=128", "ppo.minibatch_size=64", "ppo.num_epochs=1",
        "resources.num_env_runners=0", "resources.num_envs_per_env_runner=1", "checkpoint.frequency=0",
        "mlflow.enabled=false", "env_config.episode_windows=40",
        "modules.default_policy.model_config={lstm_cell_size: 16, max_seq_len: 8}"]).with_overrides(iterations=1)
    algo = build_ppo_config(cfg).build_algo()
    try:
        result = algo.train()
        learner = result["learners"]["default_policy"]
        assert np.isfinite(learner["total_loss"]) and np.isfinite(learner["entropy"])
        module = algo.get_module("default_policy")
        assert isinstance(module, LSTMModule) and module.is_stateful()
        # the module's defaults hold under PPO's auto-included vf_share_layers=False: one shared LSTM
        assert module.model_config["vf_share_layers"] is True
        assert sum(isinstance(x, torch.nn.LSTM) for x in module.modules()) == 1
    finally:
        algo.stop()


def test_http_endpoint_refuses_a_recurrent_module_clearly():
    from inferencegym.apps.policy_endpoint.policy import ServedPolicy

    _, m = _module(cell=8)
    with pytest.raises(ValueError, match="is recurrent .* the endpoint is stateless"):
        ServedPolicy.from_module(m, spec="checkpoint:/x", module_id="default_policy")
