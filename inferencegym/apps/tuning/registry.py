"""The MLflow model registry side of a sweep: the best trial's module as a pyfunc model."""

from __future__ import annotations

from typing import Any

import mlflow
import mlflow.pyfunc as _pyfunc

from inferencegym.apps.policy_endpoint.policy import ServedPolicy, resolve_checkpoint
from inferencegym.apps.tuning.trainable import acting_module_id


class PolicyPyfunc(_pyfunc.PythonModel):
    """MLflow pyfunc around an RLModule checkpoint: ``predict(list of observations) -> actions``
    (greedy, as served by ``inferencegym serve``)."""

    def load_context(self, context: Any) -> None:
        self.policy = ServedPolicy.from_spec(f"checkpoint:{context.artifacts['checkpoint']}")

    def predict(self, context, model_input, params=None):  # no type hints: MLflow would validate them
        rows = model_input.values.tolist() if hasattr(model_input, "values") else list(model_input)
        return self.policy.act_batch(self.policy.decode(rows))


def find_trial_run(uri: str, experiment: str, trial_id: str) -> str | None:
    """The MLflow run id the Tune callback made for ``trial_id`` (its ``trial_name`` tag ends with it)."""
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=[experiment], filter_string=f"tags.trial_name LIKE '%{trial_id}'",
                              output_format="list")
    return runs[0].info.run_id if runs else None


def register_best(uri: str, experiment: str, best: dict[str, Any], name: str, cfg: Any) -> tuple[str, str]:
    """Log the best trial's module as a pyfunc model in its MLflow run and register it."""
    module_dir = resolve_checkpoint(best["checkpoint"])
    mid = acting_module_id(cfg)
    if (module_dir / mid).is_dir():
        module_dir = module_dir / mid
    run_id = find_trial_run(uri, experiment, best["trial_id"])
    mlflow.set_tracking_uri(uri)
    with mlflow.start_run(run_id=run_id) if run_id else mlflow.start_run(run_name=f"best of {experiment}"):
        mlflow.set_tags({"best_trial": "true", "task": cfg.task_id, "module_id": mid})
        info = mlflow.pyfunc.log_model(name="policy", python_model=PolicyPyfunc(),
                                       artifacts={"checkpoint": str(module_dir)},
                                       pip_requirements=["inferencegym"])
    mv = mlflow.register_model(info.model_uri, name)
    return mv.name, str(mv.version)
