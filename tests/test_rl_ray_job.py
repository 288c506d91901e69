"""The same training runs unchanged as a Ray job on a local head (127.0.0.1).

Starts its own head with ``ray start --head --block`` in a separate temp dir and process group (so
stopping it touches only the processes this test started, never other Ray clusters on the machine),
submits ``python -m inferencegym.train --config rllib_configs/cluster_routing.yaml`` for one tiny
iteration with ``ray job submit --working-dir .``, checks the job SUCCEEDED and that its MLflow run
exists in the sqlite store handed to it through the runtime env.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.ray
REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _wait_http(url: str, timeout_s: float, proc: subprocess.Popen) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"ray start exited early with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError as exc:  # includes HTTPError (auth): the server answers
            if getattr(exc, "code", None):
                return
            time.sleep(1.0)
    raise TimeoutError(f"{url} did not answer within {timeout_s} s")


@pytest.mark.timeout(900)
def test_ray_job_submit_one_iteration(tmp_path):
    gcs, dash, client, agent, agent_grpc, rt_agent, metrics, nm, om = _free_ports(9)
    temp_dir = Path(tempfile.mkdtemp(prefix="rayjob_", dir="/tmp"))
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "token",
           "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1",
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}  # the job runs `python` from PATH
    env.pop("RAY_ADDRESS", None)
    head = subprocess.Popen(
        [str(BIN / "ray"), "start", "--head", "--block", f"--port={gcs}", "--num-cpus=2",
         "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", f"--ray-client-server-port={client}",
         f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
         f"--runtime-env-agent-port={rt_agent}", f"--metrics-export-port={metrics}",
         f"--node-manager-port={nm}", f"--object-manager-port={om}", f"--temp-dir={temp_dir}",
         "--disable-usage-stats"],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"http://127.0.0.1:{dash}"
    db = tmp_path / "mlflow.db"
    try:
        _wait_http(f"{address}/api/version", 240, head)
        runtime_env = {"env_vars": {"MLFLOW_TRACKING_URI": f"sqlite:///{db}", "OMP_NUM_THREADS": "1"}}
        cmd = [str(BIN / "ray"), "job", "submit", "--address", address, "--working-dir", ".",
               "--runtime-env-json", json.dumps(runtime_env), "--",
               "python", "-m", "inferencegym.train", "--config", "rllib_configs/cluster_routing.yaml",
               "--iterations", "1", "--name", "job_smoke", "--storage", str(tmp_path / "results"),
               "--no-progress", "--val-episodes", "1",
               "--set", "ppo.train_batch_size_per_learner=128", "--set", "ppo.minibatch_size=64",
               "--set", "ppo.num_epochs=1", "--set", "resources.num_env_runners=0",
               "--set", "resources.num_envs_per_env_runner=1", "--set", "checkpoint.frequency=0",
               "--set", "mlflow.save_artifact=false", "--set", "bc.enabled=false", "--set", "env_config={episode_windows: 3}"]
        sub = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=780)
        out = sub.stdout + sub.stderr
        assert sub.returncode == 0, out[-4000:]
        assert re.search(r"Job 'raysubmit_\w+' succeeded", out), out[-4000:]  # status SUCCEEDED
        import mlflow

        assert db.exists(), "the job wrote no MLflow store at the MLFLOW_TRACKING_URI it was given"
        mlflow.set_tracking_uri(f"sqlite:///{db}")
        runs = mlflow.search_runs(experiment_names=["train/cluster_routing"], output_format="list")
        assert len(runs) == 1 and runs[0].info.status == "FINISHED"
        assert runs[0].data.tags["task"] == "cluster_routing"
        assert "training_iteration" in runs[0].data.metrics
        # checkpoint selection on a validation seed: the run records the returned candidate's grade
        assert 0.0 <= runs[0].data.metrics["validation/selected_score"] <= 1.0
        assert runs[0].data.tags["selected_candidate"].startswith("checkpoint_")
    finally:
        if head.poll() is None:
            os.killpg(head.pid, signal.SIGTERM)  # --block: ray stops the processes it started
            try:
                head.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(head.pid, signal.SIGKILL)
                head.wait(timeout=30)
        subprocess.run(["rm", "-rf", str(temp_dir)], check=False)
