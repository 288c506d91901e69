"""The training runs unchanged as a Ray job on a **two-node** Ray cluster on this machine.

The cluster is started exactly as docs/cluster.md says: ``python -m inferencegym.apps.ray_local up``
picks a free port for every listener of both nodes (so it cannot collide with another local Ray, e.g.
on the dashboard agent's port) and starts a head plus a worker node (``ray start --address``) that
offers the custom resource ``env_runner_node``. The training config asks for one EnvRunner that needs
that resource (``resources.custom_resources_per_env_runner``), so the EnvRunner can only run on the
worker. ``ray job submit --working-dir .`` runs one tiny iteration; the test checks the job SUCCEEDED,
its MLflow run exists, and Ray's state API shows the EnvRunner actor on the worker node, not the head.
``ray_local down`` stops exactly the processes ``up`` started (never another user's Ray).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.ray
REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _ray_json(args: list[str], env: dict[str, str]) -> list[dict]:
    out = subprocess.run([str(BIN / "ray"), *args, "--format", "json"], env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return json.loads(out.stdout)


def test_ray_job_on_two_nodes_places_env_runners_on_the_worker(tmp_path):
    state = tmp_path / "cluster.json"
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "token",
           "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}  # the job runs `python` from PATH
    env.pop("RAY_ADDRESS", None)
    local = [sys.executable, "-m", "inferencegym.apps.ray_local"]
    started = subprocess.run([*local, "up", "--workers", "1", "--head-cpus", "1", "--worker-cpus", "1",
                              "--worker-resources", '{"env_runner_node": 1}', "--state", str(state)],
                             env=env, cwd=REPO, capture_output=True, text=True, timeout=400)
    pgids = json.loads(state.read_text())["pgids"] if state.exists() else []
    try:
        assert started.returncode == 0, started.stdout[-3000:] + started.stderr[-3000:]
        assert len(pgids) == 2
        address = started.stdout.strip().splitlines()[-1]
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", address), started.stdout
        db = tmp_path / "mlflow.db"
        runtime_env = {"env_vars": {"MLFLOW_TRACKING_URI": f"sqlite:///{db}", "OMP_NUM_THREADS": "1"}}
        cmd = [str(BIN / "ray"), "job", "submit", "--address", address, "--working-dir", ".",
               "--runtime-env-json", json.dumps(runtime_env), "--",
               "python", "-m", "inferencegym.train", "--config", "rllib_configs/cluster_routing.yaml",
               "--iterations", "1", "--name", "job_two_nodes", "--storage", str(tmp_path / "results"),
               "--no-progress", "--val-episodes", "1",
               "--set", "ppo.train_batch_size_per_learner=128", "--set", "ppo.minibatch_size=64",
               "--set", "ppo.num_epochs=1", "--set", "resources.num_env_runners=1",
               "--set", "resources.num_envs_per_env_runner=1", "--set", "resources.num_cpus_per_env_runner=1",
               "--set", "resources.custom_resources_per_env_runner={env_runner_node: 1}",
               "--set", "checkpoint.frequency=0", "--set", "mlflow.save_artifact=false",
               "--set", "bc.enabled=false", "--set", "env_config={episode_windows: 3}"]
        sub = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
        out = sub.stdout + sub.stderr
        assert sub.returncode == 0, out[-4000:]
        assert re.search(r"Job 'raysubmit_\w+' succeeded", out), out[-4000:]  # status SUCCEEDED

        # where the EnvRunner ran: the worker node (the only one with env_runner_node), not the head
        nodes = _ray_json(["list", "nodes", "--address", address, "--detail"], env)
        assert len(nodes) == 2, nodes
        worker = [n["node_id"] for n in nodes if "env_runner_node" in (n.get("resources_total") or {})]
        head = [n["node_id"] for n in nodes if n.get("is_head_node")]
        assert len(worker) == 1 and len(head) == 1 and worker != head, nodes
        runners = _ray_json(["list", "actors", "--address", address, "--detail",
                             "--filter", "class_name=MultiAgentEnvRunner"], env)
        assert runners, "no EnvRunner actor was started"
        assert {a["node_id"] for a in runners} == set(worker), runners

        import mlflow

        assert db.exists(), "the job wrote no MLflow store at the MLFLOW_TRACKING_URI it was given"
        mlflow.set_tracking_uri(f"sqlite:///{db}")
        runs = mlflow.search_runs(experiment_names=["train/cluster_routing"], output_format="list")
        assert len(runs) == 1 and runs[0].info.status == "FINISHED"
        assert runs[0].info.run_name == "cluster_routing | job_two_nodes | trial 0"
        assert runs[0].data.tags["task"] == "cluster_routing"
        assert runs[0].data.params["resources/custom_resources_per_env_runner/env_runner_node"] == "1.0"
        assert "training_iteration" in runs[0].data.metrics
        assert 0.0 <= runs[0].data.metrics["validation/selected_score"] <= 1.0
    finally:
        stopped = subprocess.run([*local, "down", "--state", str(state)], env=env, cwd=REPO,
                                 capture_output=True, text=True, timeout=300)
        assert stopped.returncode == 0, stopped.stderr[-2000:]
    # down stopped every process up started (their process groups are gone) and only those
    for pgid in pgids:
        with pytest.raises(ProcessLookupError):
            os.killpg(pgid, 0)
