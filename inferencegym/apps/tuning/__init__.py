"""Tune sweeps over reward shaping and PPO hyperparameters (``inferencegym tune --sweep tune/X.yaml``).

A sweep file (``tune/*.yaml``, validated on load, unknown keys are errors) names a training config
from ``rllib_configs/``, a search space over ``reward.<RewardConfig field>`` and
``ppo.<PPO setting>``, a search algorithm (Optuna's TPE, or random search), ASHA early stopping and
the evaluation that makes the objective.

The objective is the **grader score** of the trial's greedy policy on held-out evaluation seeds
(``eval/grade_score``), never the shaped reward: the shaped reward changes with the very weights
being swept, so comparing trials on it would compare different scales. Every trial is an MLflow
run (Tune's ``MLflowLoggerCallback``) in the experiment ``sweep/<name>`` with tag ``sweep=<name>``,
its sampled values as params and the grades as metrics; the best trial's module is logged to its
run as an MLflow pyfunc model and registered in the model registry. An interrupted sweep resumes
with ``Tuner.restore`` (searcher state, finished and paused trials and their checkpoints).
"""

from inferencegym.apps.tuning.schema import OBJECTIVE, SweepError, SweepSpec, apply_params, load_sweep

__all__ = ["OBJECTIVE", "SweepSpec", "SweepError", "SweepOutcome", "load_sweep", "apply_params",
           "run_sweep", "evaluate_module", "register_best", "find_trial_run", "experiment_name"]


def __getattr__(name: str):
    # Loading a sweep file must not import Ray, torch and MLflow (~4 s): the runner is resolved on use.
    if name in ("run_sweep", "SweepOutcome", "experiment_name"):
        from inferencegym.apps.tuning import runner  # lazy: imports Ray / torch (~5 s); not at start-up
        return getattr(runner, name)
    if name == "evaluate_module":
        from inferencegym.apps.tuning.trainable import (
            evaluate_module,  # lazy: imports Ray / torch (~5 s); not at start-up
        )
        return evaluate_module
    if name in ("register_best", "find_trial_run"):
        from inferencegym.apps.tuning import registry  # lazy: imports Ray / torch (~5 s); not at start-up
        return getattr(registry, name)
    raise AttributeError(f"module 'inferencegym.apps.tuning' has no attribute {name!r}")
