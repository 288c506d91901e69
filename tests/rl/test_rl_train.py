"""One-iteration PPO smoke tests (tiny batches, sampling in the driver) and the Tune/MLflow path.

The test-local envs in ``rl_toy_envs`` have the spaces of InferenceGym's envs; the ``real`` tests run
one iteration on the real ``LLMServe-v0`` and ``ClusterEnv`` through the registered creators.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import rl_toy_envs  # noqa: E402
import ray.cloudpickle  # noqa: E402
from rl_toy_envs import ToyClusterEnv, ToySingleEnv  # noqa: E402

# Tune trial actors cannot import the test-local module: ship it by value.
ray.cloudpickle.register_pickle_by_value(rl_toy_envs)

from inferencegym.rl.config import load_config, parse_config  # noqa: E402

pytestmark = pytest.mark.ray
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def ray_session():
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray


def tiny(path: str, **sets) -> object:
    """A shipped config shrunk to one tiny iteration sampled in the driver."""
    base = ["ppo.train_batch_size_per_learner=128", "ppo.minibatch_size=64", "ppo.num_epochs=1",
            "resources.num_env_runners=0", "resources.num_envs_per_env_runner=1",
            "checkpoint.frequency=0", "mlflow.enabled=false", "bc.enabled=false"]
    return load_config(REPO / "rllib_configs" / path).with_overrides(
        iterations=1, sets=base + [f"{k}={v}" for k, v in sets.items()])


def _train_once(cfg, env=None):
    import torch

    from inferencegym.rl.train import build_ppo_config

    torch.set_num_threads(1)
    algo = build_ppo_config(cfg, env=env).build_algo()
    try:
        return algo.train(), algo
    except Exception:
        algo.stop()
        raise


def test_ppo_one_iteration_toy_single(ray_session):
    cfg = tiny("bursty_workload.yaml", **{"curriculum.enabled": "false",
                                         "fine_tune.entropy_knob_scale": "{}"})  # toy: 2 action components
    result, algo = _train_once(cfg, env=ToySingleEnv)
    try:
        learner = result["learners"]["default_policy"]
        assert np.isfinite(learner["total_loss"])
        assert "curr_kl_coeff" in learner and "curr_entropy_coeff" in learner
        assert result["env_runners"]["grade/score"] >= 0.0  # grade from the final info
        assert result["env_runners"]["safety/runaway_queue"] == 0.0
    finally:
        algo.stop()


def _callback_of(algo):
    from inferencegym.rl.callbacks import InferenceGymCallbacks

    cbs = algo.callbacks if isinstance(algo.callbacks, list) else [algo.callbacks]
    return next(c for c in cbs if isinstance(c, InferenceGymCallbacks))


def test_ppo_one_iteration_toy_cluster_with_curriculum(ray_session, tmp_path):
    """The curriculum advances, reaches the envs, and its stage survives a checkpoint restore (the
    path Tune takes on resume: a fresh Algorithm, then ``load_checkpoint`` -> ``on_checkpoint_loaded``)."""
    from inferencegym.rl.train import build_ppo_config

    cfg = tiny("cluster_routing.yaml", **{"curriculum.enabled": "true",
                                         "curriculum.thresholds": "[0.0, 0.0]",
                                         "curriculum.min_episodes": "1"})
    stage1 = (cfg.curriculum.load_scale[1], cfg.curriculum.burst_scale[1])
    stage0 = (cfg.curriculum.load_scale[0], cfg.curriculum.burst_scale[0])
    assert stage0 != stage1
    result, algo = _train_once(cfg, env=ToyClusterEnv)
    try:
        assert set(result["learners"]) >= {"router_pol"}
        assert "policy_loss" not in result["learners"].get("replica_pol", {})  # hold_knobs: not trained
        assert np.isfinite(result["learners"]["router_pol"]["total_loss"])
        # grade 0 >= threshold 0 after >= 1 episode: the curriculum moved to stage 1 and told the env
        assert result["curriculum/stage"] == 1
        envs = algo.env_runner.env.envs
        assert envs and all(e.unwrapped.curriculum == stage1 for e in envs)
        algo.save_to_path(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    fresh = build_ppo_config(cfg, env=ToyClusterEnv).build_algo()
    try:
        envs = fresh.env_runner.env.envs
        assert _callback_of(fresh).stage == 0 and all(e.unwrapped.curriculum == stage0 for e in envs)
        fresh.load_checkpoint(str(tmp_path / "ckpt"))  # Trainable restore: what Tune calls on resume
        assert _callback_of(fresh).stage == 1
        assert all(e.unwrapped.curriculum == stage1 for e in envs)
    finally:
        fresh.stop()


def test_curriculum_calls_the_hook_of_every_env():
    from types import SimpleNamespace

    from inferencegym.tasks.spec import get_task
    from inferencegym.rl.callbacks import apply_curriculum

    envs = [ToyClusterEnv({}), ToyClusterEnv({})]
    runner = SimpleNamespace(env=SimpleNamespace(envs=envs))
    assert apply_curriculum(runner, 0.5, 0.25) == 2
    assert all(e.curriculum == (0.5, 0.25) for e in envs)
    apply_curriculum(runner, 1.0, 1.0)
    assert all(e.curriculum == (1.0, 1.0) for e in envs)
    assert apply_curriculum(SimpleNamespace(env=None), 1.0, 1.0) == 0  # driver runner without env
    # no task-swapping fallback: an env without set_curriculum is an error that says how to fix it
    task_only = SimpleNamespace(task=get_task("bursty_workload"))
    with pytest.raises(AttributeError, match="disable the curriculum"):
        apply_curriculum(SimpleNamespace(env=SimpleNamespace(envs=[task_only])), 0.5, 1.0)
    assert task_only.task == get_task("bursty_workload")


def test_tune_run_checkpoint_mlflow_and_policy_loader(ray_session, tmp_path, monkeypatch):
    """run_training: a 1-iteration Tune trial writes a checkpoint and an MLflow run; the checkpoint
    loads with load_policy and acts; a resumed experiment restores instead of restarting."""
    import mlflow

    from inferencegym.rl.policy_loader import load_checkpoint
    from inferencegym.rl.train import run_training

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = tiny("cluster_routing.yaml", **{"mlflow.enabled": "true", "mlflow.save_artifact": "false",
                                         "curriculum.enabled": "false"})
    out = run_training(cfg, storage_path=tmp_path / "results", progress=False, env=ToyClusterEnv, mlflow_uri=uri)
    assert out.metrics["training_iteration"] == 1
    assert Path(out.module_dir, "router_pol").is_dir()
    client = mlflow.MlflowClient(tracking_uri=uri)
    run = client.get_run(out.mlflow_run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["task"] == "cluster_routing" and "git_commit" in run.data.tags
    assert any(k.startswith("learners/router_pol") for k in run.data.metrics)

    monkeypatch.setattr("inferencegym.rl.policy_loader._task_kind", lambda task_id: "cluster")
    pol = load_checkpoint(out.checkpoint, "cluster_routing")
    env = ToyClusterEnv({})
    obs, _ = env.reset(seed=0)
    for _ in range(10):
        a = pol.act(obs["router"])
        assert isinstance(a, int) and obs["router"]["action_mask"][a] == 1.0
        obs, *_ = env.step({"router": a})
    # resume: the finished experiment is restored (no new iteration beyond its stop criterion)
    out2 = run_training(cfg, storage_path=tmp_path / "results", progress=False, env=ToyClusterEnv,
                        mlflow_uri=uri, resume=True)
    assert out2.metrics["training_iteration"] == 1


@pytest.mark.parametrize("config", ["static_workload.yaml", "cluster_routing.yaml"])
def test_ppo_one_iteration_real_env(ray_session, config):
    """One iteration on the real envs through the registered creators (episodes shortened)."""
    cfg = tiny(config, **{"env_config": "{episode_windows: 3}"})
    result, algo = _train_once(cfg)
    try:
        for mid in cfg.trained_modules():
            assert np.isfinite(result["learners"][mid]["total_loss"]), mid
        assert result["env_runners"]["num_episodes"] >= 1
        assert 0.0 <= result["env_runners"]["grade/score"] <= 1.0
    finally:
        algo.stop()


@pytest.mark.parametrize("config", ["bursty_workload.yaml", "cluster_heterogeneous.yaml"])
def test_bc_warm_start_on_real_env_feeds_ppo(ray_session, tmp_path, config):
    """BC on the real env (1 short episode of the config's baseline) saves a module state that PPO
    starts from: the learner's weights equal the BC weights before any update."""
    import torch
    from ray.rllib.core.rl_module.rl_module import RLModule

    from inferencegym.rl.bc import warm_start
    from inferencegym.rl.train import build_ppo_config

    cfg = tiny(config, **{"env_config": "{episode_windows: 4}", "bc.enabled": "true", "bc.episodes": "1",
                          "bc.epochs": "2", "curriculum.enabled": "false", "fine_tune.teacher_kl_coeff": "0.7",
                          "fine_tune.actor_warmup_steps": "64"})
    paths = warm_start(cfg, out_dir=tmp_path / "bc")
    mid = next(iter(paths))
    losses = [float(x) for x in (tmp_path / "bc" / "bc_losses.txt").read_text().split()]
    assert len(losses) == 2 and all(np.isfinite(losses))
    bc_module = RLModule.from_checkpoint(paths[mid])
    algo = build_ppo_config(cfg, load_state_paths=paths).build_algo()
    try:
        learner_module = algo.get_module(mid)
        for (k, a), (_, b) in zip(sorted(bc_module.state_dict().items()), sorted(learner_module.state_dict().items())):
            torch.testing.assert_close(a, b, msg=k)
        # conservative fine-tuning: the learner reports the KL to the frozen warm start
        learned = algo.train()["learners"][mid]
        # KL >= 0 in exact arithmetic; the float32 batch mean of KL ~ 0 (a policy equal to its
        # teacher) can round to -3.5e-9, so the bound has a tolerance
        assert np.isfinite(learned["teacher_kl"]) and learned["teacher_kl"] >= -1e-6
        assert learned["curr_teacher_kl_coeff"] == pytest.approx(0.7)
        assert learned["actor_scale"] == 0.0  # first update: the actor is still in its warm-up
    finally:
        algo.stop()
