"""MLflow helpers shared by training, evaluation and the dashboard.

- :func:`tracking_uri`: ``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<repo or cwd>/mlflow.db``
  (MLflow 3.17's file store is disabled, so the default is a local sqlite store).
- :func:`run_tags`: the tags every run carries (task, policy, seed, git commit).
- :func:`log_evaluation_run`: one MLflow run for an ``inferencegym evaluate`` invocation.

``mlflow`` is imported inside the functions (it takes about a second to import).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from inferencegym import __version__

ENV_VAR = "MLFLOW_TRACKING_URI"


def project_root(start: str | Path | None = None) -> Path:
    """The nearest directory (from ``start`` or the cwd, upwards) holding ``pyproject.toml`` or
    ``.git``; the cwd itself if there is none."""
    here = Path(start or os.getcwd()).resolve()
    for d in (here, *here.parents):
        if (d / "pyproject.toml").is_file() or (d / ".git").exists():
            return d
    return here


def tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI`` or ``sqlite:///<project root>/mlflow.db``."""
    env = os.environ.get(ENV_VAR)
    if env:
        return env
    return f"sqlite:///{project_root() / 'mlflow.db'}"


def git_commit(path: str | Path | None = None) -> str:
    """The current git commit of the project (``"unknown"`` outside a git checkout)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=str(path or project_root()),
                             capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def run_tags(*, task: str, policy: str, seed: int | str | None = None, kind: str = "train",
             extra: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Tags a reviewer needs on every run."""
    tags = {"task": str(task), "policy": str(policy), "seed": str(seed), "kind": kind,
            "git_commit": git_commit(), "inferencegym.version": _version()}
    tags.update({k: str(v) for k, v in (extra or {}).items()})
    return tags


#: Experiment tag MLflow 3's UI reads to open an experiment on its runs table (not the GenAI tabs).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


def ui_url(base: str, experiment_id: str | None = None, run_id: str | None = None) -> str:
    """The MLflow UI page of the experiments list, an experiment's runs table or one run.

    MLflow 3's UI opens on its GenAI pages (traces) unless told ``workflowType=machine_learning``."""
    base = base.rstrip("/")
    if experiment_id is None:
        path = "/experiments"
    elif run_id is None:
        path = f"/experiments/{experiment_id}/runs"
    else:
        path = f"/experiments/{experiment_id}/runs/{run_id}"
    return f"{base}/#{path}?workflowType=machine_learning"


def ensure_experiment(name: str, uri: str | None = None) -> str:
    """Create (or get) the experiment ``name`` in the store ``uri`` (default: the project's), tagged
    so that the UI shows it as a model-training experiment; returns its id."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri or tracking_uri())
    exp = client.get_experiment_by_name(name)
    if exp is None:
        try:
            exp_id = client.create_experiment(name)
        except mlflow.exceptions.MlflowException:  # created meanwhile by another process
            exp = client.get_experiment_by_name(name)
            if exp is None:
                raise
            exp_id = exp.experiment_id
    else:
        exp_id = exp.experiment_id
    if exp is None or exp.tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:
        client.set_experiment_tag(exp_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    return str(exp_id)


def _version() -> str:
    return __version__


def _flat_numeric(prefix: str, obj: Any, out: dict[str, float]) -> None:
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            _flat_numeric(f"{prefix}/{k}" if prefix else str(k), v, out)
    elif isinstance(obj, bool):
        out[prefix] = float(obj)
    elif isinstance(obj, (int, float)):
        if math.isfinite(float(obj)):
            out[prefix] = float(obj)
    else:
        try:
            f = float(obj)  # numpy scalars
        except (TypeError, ValueError):
            return
        if math.isfinite(f):
            out[prefix] = f


def _metric_key(k: str) -> str:
    # MLflow keys: alphanumerics, _ - . space / only.
    return "".join(c if (c.isalnum() or c in "_-. /") else "_" for c in k)


def log_evaluation_run(results: Iterable[Mapping[str, Any]] | Mapping[str, Any],
                       params: Mapping[str, Any] | None = None,
                       artifacts: Iterable[str | Path] | None = None,
                       *, experiment: str = "evaluate", run_name: str | None = None) -> str:
    """Log one ``inferencegym evaluate`` invocation as an MLflow run; returns the run id.

    ``results``: the evaluate ``--json`` objects (one per policy x task, or a single one). Numeric
    fields become metrics named ``<policy>/<task>/<field>`` (just ``<field>`` when there is only one
    row); the rows are also stored as ``results.json``. ``params``: CLI arguments. ``artifacts``:
    files to attach (plots, reports). Tags: task(s), policy(ies), seed, git commit.
    """
    import mlflow

    rows = [dict(results)] if isinstance(results, Mapping) else [dict(r) for r in results]
    params = dict(params or {})
    tasks = sorted({str(r.get("task")) for r in rows})
    policies = sorted({str(r.get("policy")) for r in rows})
    seed = params.get("seed", rows[0].get("seeds", [None])[0] if rows and rows[0].get("seeds") else None)
    mlflow.set_tracking_uri(tracking_uri())
    mlflow.set_experiment(experiment_id=ensure_experiment(experiment))
    tags = run_tags(task=",".join(tasks), policy=",".join(policies), seed=seed, kind="evaluate")
    with mlflow.start_run(run_name=run_name or f"evaluate {','.join(policies)} on {','.join(tasks)}",
                          tags=tags) as run:
        if params:
            mlflow.log_params({k: (json.dumps(v) if isinstance(v, (list, dict)) else v)
                               for k, v in params.items()})
        metrics: dict[str, float] = {}
        for r in rows:
            numeric = {k: v for k, v in r.items() if k not in ("policy", "task", "seeds")}
            prefix = "" if len(rows) == 1 else f"{r.get('policy')}/{r.get('task')}"
            _flat_numeric(prefix, numeric, metrics)
        if metrics:
            mlflow.log_metrics({_metric_key(k): v for k, v in metrics.items()})
        mlflow.log_text(json.dumps(rows, indent=2, default=str), "results.json")
        for a in artifacts or ():
            p = Path(a)
            if p.is_dir():
                mlflow.log_artifacts(str(p), artifact_path=p.name)
            elif p.is_file():
                mlflow.log_artifact(str(p))
            else:
                raise FileNotFoundError(f"artifact {p} does not exist")
        return run.info.run_id
