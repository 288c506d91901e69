"""Training as a Tune experiment: config -> ``PPOConfig`` -> ``tune.Tuner(PPO)``.

Tune provides checkpointing (``CheckpointConfig``), resumption after interruption
(``Tuner.restore``) and MLflow logging (``MLflowLoggerCallback``, one MLflow run per trial). The same
code runs in-process (``inferencegym train``) and as a Ray job (``ray job submit ... -- python -m
inferencegym.train --config ...``): inside a job ``ray.init()`` attaches to the cluster through
``RAY_ADDRESS``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferencegym.rl.bc import warm_start
from inferencegym.rl.callbacks import make_callbacks_class
from inferencegym.rl.config import TrainConfig
from inferencegym.rl.env_creators import ENV_NAMES, register_envs
from inferencegym.rl.learner import ConservativePPOTorchLearner
from inferencegym.rl.modules import lstm_model_config, module_class
from inferencegym.tracking import project_root, run_tags, tracking_uri

#: Module id of the single-agent policy (RLlib's default).
DEFAULT_MODULE_ID = "default_policy"
#: Result key used for the step budget (lifetime env steps sampled).
STEPS_KEY = "num_env_steps_sampled_lifetime"


def module_specs(cfg: TrainConfig, load_state_paths: dict[str, str] | None = None) -> Any:
    """``RLModuleSpec`` (single) or ``MultiRLModuleSpec`` (cluster) from the config's modules."""
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec


    paths = load_state_paths or {}
    # lstm: the completed config, so that PPO's auto-included keys (vf_share_layers=False) do not
    # override the module's defaults when RLlib merges the algorithm's model_config under the spec's
    specs = {mid: RLModuleSpec(module_class=module_class(m.type), load_state_path=paths.get(mid),
                               model_config=(lstm_model_config(m.model_config_) if m.type == "lstm"
                                             else dict(m.model_config_)))
             for mid, m in cfg.modules.items()}
    if cfg.env == "single":
        return specs[DEFAULT_MODULE_ID]
    return MultiRLModuleSpec(rl_module_specs=specs)


def _mapping_fn(cfg: TrainConfig):
    mapping = dict(cfg.policy_mapping)

    def policy_mapping_fn(agent_id: str, episode: Any = None, **kwargs: Any) -> str:
        if agent_id in mapping:
            return mapping[agent_id]
        best = max((p for p in mapping if p.endswith("*") and agent_id.startswith(p[:-1])),
                   key=len, default=None)
        if best is None:
            raise ValueError(f"agent {agent_id!r} matches no policy_mapping entry; entries: {sorted(mapping)}")
        return mapping[best]

    return policy_mapping_fn


def learner_settings(cfg: TrainConfig, teacher_paths: dict[str, str] | None) -> dict[str, Any]:
    """``learner_config_dict`` of :class:`~inferencegym.rl.learner.ConservativePPOTorchLearner`
    from ``cfg.fine_tune``; the teacher is the warm start of each warm-started module."""
    ft = cfg.fine_tune
    coeff = ft.teacher_kl_coeff
    return {"teacher_kl_coeff": coeff if isinstance(coeff, float) else [list(x) for x in coeff],
            "teacher_state_paths": dict(teacher_paths or {}) if ft.uses_teacher else {},
            "actor_warmup_steps": ft.actor_warmup_steps,
            "entropy_knob_scale": ft.knob_scale_vector()}


def build_ppo_config(cfg: TrainConfig, *, env: Any = None,
                     load_state_paths: dict[str, str] | None = None,
                     teacher_paths: dict[str, str] | None = None) -> Any:
    """The ``PPOConfig`` for a training config.

    ``env``: override the env (a registered name or an env class; tests use a small local env);
    by default the registered ``inferencegym_single`` / ``inferencegym_cluster`` creator.
    ``load_state_paths``: module id -> RLModule state dir to start from (BC warm start).
    ``teacher_paths``: module id -> frozen teacher for ``fine_tune.teacher_kl_coeff`` (defaults to
    ``load_state_paths``; a resumed run passes the warm start here but starts from its checkpoint).
    """
    from ray.rllib.algorithms.ppo import PPOConfig


    if env is None:
        register_envs()
        env = ENV_NAMES[cfg.env]
    env_config = cfg.full_env_config()
    if cfg.safety.enabled and cfg.safety.terminate:
        env_config["safety"] = cfg.safety.model_dump()
    p, r = cfg.ppo, cfg.resources
    config = (
        PPOConfig()
        # RLlib's env pre-check steps random actions, which can pick a replica the action mask
        # excludes (the cluster env rejects that); the envs are checked in their own tests.
        .environment(env, env_config=env_config, disable_env_checking=True)
        .env_runners(num_env_runners=r.num_env_runners, num_envs_per_env_runner=r.num_envs_per_env_runner,
                     num_cpus_per_env_runner=r.num_cpus_per_env_runner,
                     custom_resources_per_env_runner=dict(r.custom_resources_per_env_runner),
                     rollout_fragment_length=r.rollout_fragment_length)
        .learners(num_learners=r.num_learners, learner_class=ConservativePPOTorchLearner,
                  learner_config_dict=learner_settings(cfg, teacher_paths if teacher_paths is not None
                                                       else load_state_paths))
        .fault_tolerance(**cfg.fault_tolerance.model_dump())
        .training(lr=p.lr, entropy_coeff=p.entropy_coeff, gamma=p.gamma, lambda_=p.lambda_,
                  use_kl_loss=p.use_kl_loss, kl_coeff=p.kl_coeff, kl_target=p.kl_target,
                  clip_param=p.clip_param, vf_clip_param=p.vf_clip_param, vf_loss_coeff=p.vf_loss_coeff,
                  grad_clip=p.grad_clip, train_batch_size_per_learner=p.train_batch_size_per_learner,
                  minibatch_size=p.minibatch_size, num_epochs=p.num_epochs)
        .rl_module(rl_module_spec=module_specs(cfg, load_state_paths))
        .callbacks(make_callbacks_class(cfg.curriculum, cfg.safety))
        .reporting(metrics_num_episodes_for_smoothing=20)
        .debugging(seed=cfg.seed, log_level="ERROR")
    )
    if cfg.env == "cluster":
        config = config.multi_agent(policies=set(cfg.modules), policy_mapping_fn=_mapping_fn(cfg),
                                    policies_to_train=cfg.trained_modules())
    return config


def _stop(cfg: TrainConfig) -> dict[str, Any]:
    stop: dict[str, Any] = {}
    if cfg.stop.timesteps_total:
        stop[STEPS_KEY] = cfg.stop.timesteps_total
    if cfg.stop.training_iteration:
        stop["training_iteration"] = cfg.stop.training_iteration
    if cfg.stop.time_total_s:
        stop["time_total_s"] = cfg.stop.time_total_s
    return stop


def ensure_ray(num_cpus: int | None = None) -> None:
    """Attach to ``RAY_ADDRESS`` if set (ray job / cluster), else start a local Ray on 127.0.0.1."""
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    if os.environ.get("RAY_ADDRESS"):
        ray.init(log_to_driver=False)
        return
    for attempt in (1, 2):  # a busy machine can time out Ray's node startup once
        try:
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
            return
        except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception here
            if attempt == 2 or "timed out during startup" not in str(exc):
                raise
            ray.shutdown()


@dataclass
class TrainOutcome:
    """What a training run produced."""

    experiment_path: str
    checkpoint: str | None
    module_dir: str | None
    mlflow_run_id: str | None
    tracking_uri: str | None
    metrics: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0
    warm_start: dict[str, str] | None = None
    """Module id -> the behaviour-cloned module the run started from (None without BC)."""


def _mlflow_callback(cfg: TrainConfig, uri: str, config_path: str | None) -> Any:
    """One MLflow run per trial, named ``<task> | <config name> | trial <i>``, with the training
    config as params and only measured numbers as metrics (:mod:`inferencegym.rl.mlflow_logger`)."""
    from inferencegym.rl.mlflow_logger import ProjectMLflowLogger, trial_index

    tags = run_tags(task=cfg.task_id, policy=f"ppo:{cfg.name}", seed=cfg.seed, kind="train",
                    extra={"config": config_path or "", "env": cfg.env})
    return ProjectMLflowLogger(tracking_uri=uri, experiment_name=cfg.mlflow.experiment or f"train/{cfg.task_id}",
                               tags=tags, params=cfg.model_dump(mode="json"),
                               run_name=lambda trial: f"{cfg.task_id} | {cfg.name} | trial {trial_index(trial)}",
                               save_artifact=cfg.mlflow.save_artifact)


def _progress_callback(total_steps: int | None) -> Any:
    """A Tune callback that drives a rich progress bar (env steps) in the driver."""
    from ray.tune import Callback
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    class RichProgress(Callback):
        def __init__(self) -> None:
            self.progress = None
            self.task = None

        def __getstate__(self) -> dict:  # Tune pickles its callbacks: drop the live display
            return {"progress": None, "task": None}

        def setup(self, **info: Any) -> None:
            self.progress = Progress(TextColumn("[bold]train[/]"), BarColumn(),
                                     TextColumn("{task.completed:,.0f}/{task.total:,.0f} env steps"),
                                     TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TimeRemainingColumn())
            self.progress.start()
            self.task = self.progress.add_task("train", total=total_steps or 1, info="")

        def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
            er = result.get("env_runners", {}) or {}
            ret = er.get("episode_return_mean")
            grade = er.get("grade/score")
            text = f"it {result.get('training_iteration')}"
            if ret is not None and ret == ret:  # NaN: no episode ended in this iteration
                text += f" | return {ret:.3g}"
            if grade is not None and grade == grade:
                text += f" | grade {grade:.3f}"
            if self.progress is not None:
                self.progress.update(self.task, completed=result.get(STEPS_KEY, 0), info=text)

        def on_experiment_end(self, trials: list, **info: Any) -> None:
            if self.progress is not None:
                self.progress.stop()

    return RichProgress()


def run_training(cfg: TrainConfig, *, storage_path: str | Path | None = None, resume: bool = False,
                 progress: bool = True, config_path: str | None = None, env: Any = None,
                 mlflow_uri: str | None = None, verbose: int = 0) -> TrainOutcome:
    """Train ``cfg`` as a one-trial Tune experiment; returns checkpoint, module dir and MLflow run id.

    ``storage_path`` defaults to ``<project root>/ray_results``. With ``resume`` an interrupted
    experiment of the same name is continued (``Tuner.restore``) instead of started again.
    """
    import torch
    from ray import tune
    from ray.rllib.algorithms.ppo import PPO

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    ensure_ray()
    storage = Path(storage_path or project_root() / "ray_results").resolve()
    storage.mkdir(parents=True, exist_ok=True)
    exp_dir = storage / cfg.name
    load_paths = teacher_paths = None
    bc_dir = exp_dir.parent / f"{cfg.name}_bc"
    resuming = resume and tune.Tuner.can_restore(str(exp_dir))
    if cfg.bc.enabled and not resuming:
        load_paths = teacher_paths = warm_start(cfg, out_dir=bc_dir, env=env)
    elif cfg.bc.enabled:  # resumed: the checkpoint holds the weights; the warm start stays the teacher
        teacher_paths = {mid: str(bc_dir / mid) for mid in cfg.modules if (bc_dir / mid).is_dir()}
    ppo_config = build_ppo_config(cfg, env=env, load_state_paths=load_paths, teacher_paths=teacher_paths)
    callbacks = []
    uri = None
    mlcb = None
    if cfg.mlflow.enabled:
        uri = mlflow_uri or tracking_uri()
        mlcb = _mlflow_callback(cfg, uri, config_path)
        callbacks.append(mlcb)
    total = cfg.stop.timesteps_total
    if progress:
        callbacks.append(_progress_callback(total))
    run_config = tune.RunConfig(
        name=cfg.name, storage_path=str(storage), stop=_stop(cfg), callbacks=callbacks, verbose=verbose,
        checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=cfg.checkpoint.frequency,
                                                num_to_keep=cfg.checkpoint.num_to_keep, checkpoint_at_end=True),
        failure_config=tune.FailureConfig(max_failures=0))
    if resume and tune.Tuner.can_restore(str(exp_dir)):
        tuner = tune.Tuner.restore(str(exp_dir), trainable=PPO, param_space=ppo_config,
                                   resume_errored=True, restart_errored=False)
    else:
        tuner = tune.Tuner(PPO, param_space=ppo_config, run_config=run_config)
    results = tuner.fit()
    res = results[0]
    if res.error:
        raise RuntimeError(f"training failed: {res.error}") from res.error
    ckpt = res.checkpoint.path if res.checkpoint else None
    module_dir = str(Path(ckpt) / "learner_group" / "learner" / "rl_module") if ckpt else None
    run_id = None
    if mlcb is not None:
        runs = list(getattr(mlcb, "_trial_runs", {}).values())
        run_id = runs[0] if runs else None
    metrics = dict(res.metrics or {})
    return TrainOutcome(experiment_path=str(exp_dir), checkpoint=ckpt, module_dir=module_dir,
                        mlflow_run_id=run_id, tracking_uri=uri, metrics=metrics,
                        wall_s=time.perf_counter() - t0, warm_start=teacher_paths or None)


def summary_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """The headline numbers of a Tune result (flat dict, for printing and for MLflow)."""
    er = metrics.get("env_runners", {}) or {}
    out = {"training_iteration": metrics.get("training_iteration"), "env_steps": metrics.get(STEPS_KEY),
           "time_total_s": metrics.get("time_total_s"),
           "episode_return_mean": er.get("episode_return_mean"), "grade/score": er.get("grade/score")}
    return {k: float(v) for k, v in out.items() if v is not None}
