"""The MLflow side of every Tune experiment (``train``, ``demo``, ``tune``): one run per trial.

Tune's stock ``MLflowLoggerCallback`` names each run after the Tune trial (``PPO_inferencegym_clus...``:
three runs of different tasks look alike in the UI), logs the *trial config* as params (RLlib's whole
flattened ``AlgorithmConfig``, ~300 keys) and every numeric result key as a metric, which includes the
``config/*`` subtree of each RLlib result (config flags and learning rates logged as "metrics" every
iteration) and one sqlite transaction per key. :class:`ProjectMLflowLogger` instead

- names the run ``<task> | <config name> | trial <index>`` (a sweep adds ``sweep <name>``), and tags it
  with the task, the trial id and the trial index;
- logs the project's own training config (the YAML, flattened: PPO, resources, modules, BC, ...) plus
  a sweep trial's sampled values as params, never RLlib's config dump;
- logs only measured numbers as metrics (no ``config/*``, no per-connector timers, no booleans), in
  one ``log_batch`` call per iteration, at step = env steps sampled;
- tags the experiment so that MLflow 3's UI opens it on its runs table (not the GenAI traces page).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from ray.air.integrations.mlflow import MLflowLoggerCallback

from inferencegym.tracking import _metric_key, ensure_experiment

#: Result keys left out of MLflow metrics: the trial config RLlib copies into every result, RLlib's
#: per-connector timers and counters (hundreds of series) and bookkeeping that is not a measurement.
METRIC_SKIP = ("config/", "timers", "connector", "_sum_episodes_length", "num_healthy_workers", "perf/",
               "fault_tolerance/", "iterations_since_restore", "timesteps_since_restore", "done", "pid",
               "weights_seq_no", "actor_manager", "timestamp", "num_training_step_calls", "trainable_parameters",
               "diff_num_grad_updates")
#: Result key used as the MLflow step (lifetime env steps sampled).
STEPS_KEY = "num_env_steps_sampled_lifetime"


def trial_index(trial: Any) -> int | str:
    """The trial's 0-based index in its experiment: the ``_<5 digits>`` suffix of grid / random trial
    ids (Tune's ``BasicVariantGenerator``), else the counter a search algorithm (Optuna) puts at the
    start of the trial's ``experiment_tag`` (1-based there); the trial id when neither is present."""
    trial_id = str(getattr(trial, "trial_id", "?"))
    m = re.fullmatch(r"[0-9a-f]+_(\d{5})", trial_id)
    if m:
        return int(m.group(1))
    m = re.match(r"(\d+)(_|$)", str(getattr(trial, "experiment_tag", "") or ""))
    if m:
        return int(m.group(1)) - 1
    return trial_id


def flat_params(obj: Any, prefix: str = "") -> dict[str, str]:
    """``{"ppo/lr": "0.0003", ...}`` from nested mappings; lists as JSON; ``None`` left out."""
    out: dict[str, str] = {}
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            out.update(flat_params(v, f"{prefix}/{k}" if prefix else str(k)))
    elif obj is not None:
        out[_metric_key(prefix)] = (json.dumps(obj) if isinstance(obj, (list, tuple)) else str(obj))[:6000]
    return out


def result_metrics(result: Mapping[str, Any]) -> dict[str, float]:
    """The finite numeric measurements of a Tune/RLlib result, flattened with ``/``."""
    from ray.tune.utils import flatten_dict

    out: dict[str, float] = {}
    for k, v in flatten_dict(dict(result), delimiter="/").items():
        if any(x in k for x in METRIC_SKIP) or isinstance(v, bool):
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            out[_metric_key(k)] = f
    return out


class ProjectMLflowLogger(MLflowLoggerCallback):
    """``MLflowLoggerCallback`` with meaningful run names, the project config as params and only
    measured numbers as metrics (see the module docstring)."""

    def __init__(self, *, tracking_uri: str, experiment_name: str, tags: dict[str, str],
                 run_name: Callable[[Any], str], params: Mapping[str, Any] | None = None,
                 log_trial_config: bool = False, save_artifact: bool = False) -> None:
        super().__init__(tracking_uri=tracking_uri, experiment_name=experiment_name, tags=tags,
                         save_artifact=save_artifact)
        self._run_name = run_name
        self._params = flat_params(dict(params or {}))
        self._log_trial_config = log_trial_config

    def setup(self, *args: Any, **kwargs: Any) -> None:
        ensure_experiment(self.experiment_name, self.tracking_uri)
        super().setup(*args, **kwargs)

    def log_trial_start(self, trial: Any) -> None:
        if trial in self._trial_runs:
            return
        from mlflow.entities import Param

        tags = {**self.tags, "trial_name": str(trial), "trial_id": str(trial.trial_id),
                "trial_index": str(trial_index(trial))}
        run = self.mlflow_util.start_run(tags=tags, run_name=self._run_name(trial))
        run_id = run.info.run_id
        self._trial_runs[trial] = run_id
        params = dict(self._params)
        if self._log_trial_config:  # a sweep's sampled values (reward.*, ppo.*): few, and what varies
            params.update(flat_params(dict(trial.config or {})))
        items = [Param(k, v) for k, v in sorted(params.items())]
        client = self.mlflow_util._get_client()
        for i in range(0, len(items), 100):
            client.log_batch(run_id, params=items[i:i + 100])

    def log_trial_result(self, iteration: int, trial: Any, result: dict) -> None:
        from mlflow.entities import Metric

        step = int(result.get(STEPS_KEY) or result.get("training_iteration") or 0)
        ts = int(time.time() * 1000)
        metrics = [Metric(key=k, value=v, timestamp=ts, step=step) for k, v in result_metrics(result).items()]
        client = self.mlflow_util._get_client()
        run_id = self._trial_runs[trial]
        for i in range(0, len(metrics), 1000):
            client.log_batch(run_id, metrics=metrics[i:i + 1000])

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        run_id = self._trial_runs[trial]
        if self.should_save_artifact:
            self.mlflow_util.save_artifacts(run_id=run_id, dir=trial.local_path)
        self.mlflow_util.end_run(run_id=run_id, status="FAILED" if failed else "FINISHED")
