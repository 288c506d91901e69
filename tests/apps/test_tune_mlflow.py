"""A real 2-trial, 1-iteration sweep: both trials are MLflow runs with their params and grades, the
objective is the grader score (re-graded from the best checkpoint), the best module is registered,
and running the sweep again resumes it instead of starting over."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.ray

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ray_session():
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


def test_two_trial_sweep_logs_runs_and_registers_best(tmp_path, ray_session):
    import math

    import mlflow

    from inferencegym.apps.tuning import load_sweep, run_sweep

    sweep = {
        "name": "tiny_sweep",
        "base_config": str(REPO / "rllib_configs" / "bursty_workload.yaml"),
        "num_samples": 2,
        "iterations": 1,
        "search": {"algorithm": "optuna", "seed": 3, "max_concurrent_trials": 2},
        "scheduler": {"type": "asha", "grace_period": 1},
        "evaluation": {"episodes": 1, "seed": 1000},
        "overrides": {"resources.num_env_runners": 0, "resources.num_envs_per_env_runner": 1,
                      "ppo.train_batch_size_per_learner": 64, "ppo.minibatch_size": 32,
                      "ppo.num_epochs": 1, "env_config.episode_windows": 16,
                      "bc.episodes": 1, "bc.epochs": 1},
        "space": {"reward.w_slo": {"uniform": [0.5, 2.0]}, "ppo.lr": {"loguniform": [1e-4, 1e-3]}},
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(sweep))
    spec, cfg = load_sweep(path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = run_sweep(spec, cfg, storage_path=tmp_path / "ray_results", mlflow_uri=uri, progress=False)

    assert len(out.trials) == 2 and not any(t["error"] for t in out.trials), out.trials
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["sweep/tiny_sweep"], output_format="list")
    assert len(runs) == 2
    sampled = set()
    # the same warm start `train` uses (bursty_workload.yaml clones its configured baseline), made once
    assert out.warm_start.startswith(f"behaviour cloning of {cfg.bc.baseline}")
    assert cfg.bc.baseline == "phase_rule"  # the best observable rule of the task (issue 21)
    assert (tmp_path / "ray_results" / "tiny_sweep_bc" / "default_policy").is_dir()
    names = sorted(r.info.run_name for r in runs)
    assert names == [f"bursty_workload | {cfg.name} | sweep tiny_sweep trial 0",
                     f"bursty_workload | {cfg.name} | sweep tiny_sweep trial 1"]  # task | config | index
    for run in runs:
        assert run.info.status == "FINISHED"
        assert run.data.tags["warm_start"] == out.warm_start
        # config -> params (the project's training config, not RLlib's ~300 flags); only measurements
        # are metrics: nothing of the config subtree RLlib copies into every result
        assert run.data.params["ppo/minibatch_size"] == "32" and run.data.params["bc/baseline"] == cfg.bc.baseline
        assert len(run.data.params) < 120
        assert not [k for k in run.data.metrics if k.startswith("config")]
        assert "eval/grade_score" in run.data.metrics and "training_iteration" in run.data.metrics
        assert run.data.tags["sweep"] == "tiny_sweep" and run.data.tags["task"] == "bursty_workload"
        assert {"reward.w_slo", "ppo.lr"} <= set(run.data.params)
        assert 0.5 <= float(run.data.params["reward.w_slo"]) <= 2.0
        grade = run.data.metrics["eval/grade_score"]
        assert 0.0 <= grade <= 1.0 and math.isfinite(grade)
        sampled.add(run.data.params["reward.w_slo"])
    assert len(sampled) == 2  # two different points of the space

    # The objective is the grader score of the greedy policy on the evaluation seeds: re-grade the
    # best checkpoint through the same evaluation `inferencegym evaluate` uses and get the same number.
    from inferencegym.evaluation.single import evaluate_policy

    best = out.best
    regraded = evaluate_policy(f"checkpoint:{best['checkpoint']}", "bursty_workload", episodes=1, seed=1000)
    assert regraded.score_mean == pytest.approx(best["eval/grade_score"], abs=1e-12)
    assert best["eval/grade_score"] == max(t["eval/grade_score"] for t in out.trials)

    # the best module is in the model registry and predicts like the checkpoint
    assert out.registered_model == "inferencegym-tiny_sweep" and out.registered_version == "1"
    client = mlflow.MlflowClient()
    mv = client.get_model_version("inferencegym-tiny_sweep", "1")
    best_runs = [r for r in runs if r.info.run_id == mv.run_id]
    assert best_runs and best["trial_id"] in best_runs[0].data.tags["trial_name"]
    assert client.get_run(mv.run_id).data.tags["best_trial"] == "true"
    from inferencegym.rl.env_creators import make_single_env
    from inferencegym.rl.policy_loader import load_policy

    env = make_single_env(cfg.full_env_config())  # the observation the module was trained on (history)
    obs, _ = env.reset(seed=1000)
    obs2 = env.step(env.action_space.sample())[0]
    in_process = load_policy(f"checkpoint:{best['checkpoint']}", "bursty_workload")
    registered = mlflow.pyfunc.load_model("models:/inferencegym-tiny_sweep/1")
    assert registered.predict([obs.tolist(), obs2.tolist()]) == \
        [in_process.act_flat(obs).tolist(), in_process.act_flat(obs2).tolist()]

    # Resume: the same sweep again restores the finished experiment instead of running new trials.
    again = run_sweep(spec, cfg, storage_path=tmp_path / "ray_results", mlflow_uri=uri, progress=False)
    assert sorted(t["trial_id"] for t in again.trials) == sorted(t["trial_id"] for t in out.trials)
    assert len(mlflow.search_runs(experiment_names=["sweep/tiny_sweep"], output_format="list")) == 2


def test_sweep_trials_start_from_the_warm_start(tmp_path, ray_session):
    """A sweep trial's PPO starts from the behaviour-cloned weights `train` would start from."""
    import torch
    from ray.rllib.core.rl_module.rl_module import RLModule

    from inferencegym.apps.tuning import load_sweep
    from inferencegym.apps.tuning.runner import sweep_warm_start
    from inferencegym.apps.tuning.trainable import make_trainable

    sweep = {"name": "warm", "base_config": str(REPO / "rllib_configs" / "bursty_workload.yaml"),
             "num_samples": 1, "iterations": 1, "search": {"algorithm": "random"},
             "overrides": {"resources.num_env_runners": 0, "resources.num_envs_per_env_runner": 1,
                           "ppo.train_batch_size_per_learner": 64, "ppo.minibatch_size": 32,
                           "env_config.episode_windows": 8, "bc.episodes": 1, "bc.epochs": 1},
             "space": {"ppo.lr": {"loguniform": [1e-4, 1e-3]}}}
    path = tmp_path / "warm.yaml"
    path.write_text(yaml.safe_dump(sweep))
    spec, cfg = load_sweep(path)
    paths, text = sweep_warm_start(spec, cfg, tmp_path / "bc")
    assert set(paths) == {"default_policy"} and text.startswith("behaviour cloning")
    trial = make_trainable(spec, cfg, warm_start_paths=paths)(config={"ppo.lr": 3e-4})
    try:
        bc = RLModule.from_checkpoint(paths["default_policy"]).state_dict()
        learner = trial.algo.get_module("default_policy").state_dict()
        assert sorted(bc) == sorted(learner)
        for k in bc:
            torch.testing.assert_close(bc[k], learner[k], msg=k)
    finally:
        trial.stop()
    # warm_start: false in the sweep file: said, and no cloning
    off = spec.model_copy(update={"warm_start": False})
    assert sweep_warm_start(off, cfg, tmp_path / "bc2") == (
        None, "none: the sweep file sets warm_start: false (trials start from random weights)")
    assert not (tmp_path / "bc2").exists()
