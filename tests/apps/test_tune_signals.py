"""``inferencegym tune`` stopped with SIGTERM (``kill``, a batch scheduler, ``docker stop``) ends like
Ctrl-C: Tune saves the experiment, the command prints the trial table and says it was interrupted,
registers nothing and exits 0; no native Ray crash dump, and the same command resumes the sweep."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.ray
REPO = Path(__file__).resolve().parents[2]


def test_tune_sigterm_prints_the_trial_table_and_saves_the_experiment(tmp_path):
    sweep = {"name": "sigterm_sweep", "base_config": str(REPO / "rllib_configs" / "bursty_workload.yaml"),
             "num_samples": 2, "iterations": 200,  # far more than run before the signal
             "search": {"algorithm": "random", "seed": 3, "max_concurrent_trials": 2},
             "scheduler": {"type": "fifo"}, "evaluation": {"episodes": 1, "seed": 1000, "every": 5},
             "overrides": {"resources.num_env_runners": 0, "resources.num_envs_per_env_runner": 1,
                           "ppo.train_batch_size_per_learner": 64, "ppo.minibatch_size": 32,
                           "ppo.num_epochs": 1, "env_config.episode_windows": 8,
                           "bc.episodes": 1, "bc.epochs": 1},
             "space": {"ppo.lr": {"loguniform": [1e-4, 1e-3]}}}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    storage = tmp_path / "rr"
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}", "OMP_NUM_THREADS": "1",
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("RAY_ADDRESS", None)
    log = tmp_path / "tune.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "inferencegym.cli", "tune", "--sweep", str(path),
                                 "--storage", str(storage)], cwd=tmp_path, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # wait (no fixed sleep) until both trials have reported an iteration: the sweep is mid-run
        deadline = time.monotonic() + 420
        while True:
            assert proc.poll() is None, log.read_text()[-4000:]
            done = [p for p in storage.glob("sigterm_sweep/*/progress.csv") if len(p.read_text().splitlines()) >= 2]
            if len(done) == 2:
                break
            assert time.monotonic() < deadline, "no trial reported a result in time:\n" + log.read_text()[-4000:]
            time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.read_text()
    assert rc == 0, text[-4000:]
    assert "sweep sigterm_sweep (2 trials" in text  # the trial table
    assert "interrupted" in text and "No model was registered" in text
    assert "SIGTERM received" not in text and "*** " not in text  # no native crash dump
    from ray import tune

    assert tune.Tuner.can_restore(str(storage / "sigterm_sweep"))  # resumable
