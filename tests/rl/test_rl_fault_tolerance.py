"""Issue 17, defect 8: a training run survives an env that raises mid-episode (RLlib's
``restart_failed_sub_environments``, set in every shipped config) and still finishes its iterations
with a complete MLflow run. Tiny: two iterations of 128 env steps, sampled in the driver."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray.cloudpickle  # noqa: E402
import rl_toy_envs  # noqa: E402
from rl_toy_envs import FailOnceEnv  # noqa: E402

ray.cloudpickle.register_pickle_by_value(rl_toy_envs)  # Tune's trial actor cannot import tests/

from inferencegym.rl.config import load_config  # noqa: E402

pytestmark = pytest.mark.ray
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ray_session():
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray


def test_every_shipped_config_restarts_failed_envs_and_runners():
    from inferencegym.rl.train import build_ppo_config

    for path in sorted((REPO / "rllib_configs").glob("*.yaml")):
        cfg = load_config(path)
        assert cfg.fault_tolerance.restart_failed_sub_environments, path.name
        assert cfg.fault_tolerance.restart_failed_env_runners, path.name
    algo_cfg = build_ppo_config(load_config(REPO / "rllib_configs" / "bursty_workload.yaml"))
    assert algo_cfg.restart_failed_sub_environments and algo_cfg.restart_failed_env_runners


def test_training_survives_an_env_that_raises_mid_episode(ray_session, tmp_path):
    import mlflow

    from inferencegym.rl.train import run_training

    marker = tmp_path / "env_failed_once"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sets = ["ppo.train_batch_size_per_learner=128", "ppo.minibatch_size=64", "ppo.num_epochs=1",
            "resources.num_env_runners=0", "resources.num_envs_per_env_runner=1",
            "checkpoint.frequency=0", "mlflow.enabled=true", "mlflow.save_artifact=false",
            "bc.enabled=false", "curriculum.enabled=false", "fine_tune.entropy_knob_scale={}",
            f"env_config={{marker: '{marker}', fail_at_step: 7, horizon: 20}}"]
    cfg = load_config(REPO / "rllib_configs" / "bursty_workload.yaml").with_overrides(iterations=2, sets=sets)
    out = run_training(cfg, storage_path=tmp_path / "results", progress=False, env=FailOnceEnv,
                       mlflow_uri=uri)
    assert marker.exists(), "the injected failure never happened: the test proves nothing"
    assert out.metrics["training_iteration"] == 2
    assert Path(out.checkpoint).exists()
    run = mlflow.MlflowClient(tracking_uri=uri).get_run(out.mlflow_run_id)
    assert run.info.status == "FINISHED"
    history = mlflow.MlflowClient(tracking_uri=uri).get_metric_history(out.mlflow_run_id,
                                                                       "training_iteration")
    assert sorted(int(m.value) for m in history) == [1, 2]
