"""Running (or resuming) a sweep with Tune, logging every trial to MLflow, with a progress bar."""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from ray import tune
from ray.rllib.algorithms.ppo import PPO
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
from ray.tune.search import ConcurrencyLimiter
from ray.tune.search.basic_variant import BasicVariantGenerator
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from inferencegym.apps.tuning.registry import register_best
from inferencegym.apps.tuning.schema import OBJECTIVE, SweepError, SweepSpec, apply_params
from inferencegym.apps.tuning.trainable import make_trainable
from inferencegym.rl.mlflow_logger import ProjectMLflowLogger, trial_index
from inferencegym.rl.train import build_ppo_config, ensure_ray
from inferencegym.tracking import project_root, run_tags, tracking_uri


@dataclass
class SweepOutcome:
    experiment_path: str
    experiment: str
    tracking_uri: str
    trials: list[dict[str, Any]] = field(default_factory=list)
    best: dict[str, Any] | None = None
    registered_model: str | None = None
    registered_version: str | None = None
    warm_start: str = ""
    """How every trial started: the behaviour-cloning warm start ``train`` uses, or why not."""
    interrupted: bool = False
    """Some trials are unfinished (Ctrl-C / SIGTERM): nothing was registered; run again to resume."""
    wall_s: float = 0.0


def _searcher(spec: SweepSpec) -> Any:
    """The search algorithm, with ``max_concurrent_trials`` applied at the searcher level."""
    if spec.search.algorithm == "optuna":
        try:
            from ray.tune.search.optuna import OptunaSearch
        except ImportError as exc:  # optuna not installed
            raise SweepError("search.algorithm 'optuna' needs the optuna package (pip install optuna); "
                             "or use search.algorithm: random") from exc
        alg = OptunaSearch(metric=OBJECTIVE, mode="max", seed=spec.search.seed)
    else:
        return BasicVariantGenerator(random_state=spec.search.seed,
                                     max_concurrent=spec.search.max_concurrent_trials or 0)
    if spec.search.max_concurrent_trials:
        alg = ConcurrencyLimiter(alg, max_concurrent=spec.search.max_concurrent_trials)
    return alg


def _scheduler(spec: SweepSpec) -> Any:
    if spec.scheduler.type == "fifo":
        return FIFOScheduler()
    return ASHAScheduler(time_attr="training_iteration", max_t=spec.iterations,
                         grace_period=min(spec.scheduler.grace_period, spec.iterations),
                         reduction_factor=spec.scheduler.reduction_factor)


def experiment_name(spec: SweepSpec) -> str:
    return f"sweep/{spec.name}"


def run_sweep(spec: SweepSpec, base_cfg: Any, *, num_samples: int | None = None,
              storage_path: str | Path | None = None, resume: bool = True, progress: bool = True,
              mlflow_uri: str | None = None, env: Any = None, sweep_file: str | None = None) -> SweepOutcome:
    """Run (or resume) a sweep; returns the trials' params and grades and the registered model."""
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    ensure_ray()
    if num_samples is not None:
        spec = spec.model_copy(update={"num_samples": int(num_samples)})
    storage = Path(storage_path or project_root() / "ray_results").resolve()
    storage.mkdir(parents=True, exist_ok=True)
    exp_dir = storage / spec.name
    uri = mlflow_uri or tracking_uri()
    exp_name = experiment_name(spec)
    warm_paths, warm_text = sweep_warm_start(spec, base_cfg, storage / f"{spec.name}_bc", env=env,
                                             resuming=tune.Tuner.can_restore(str(exp_dir)))
    if progress:
        from rich.console import Console

        Console(stderr=True).print(f"sweep {spec.name}: warm start of every trial: {warm_text}")
    tags = run_tags(task=base_cfg.task_id, policy=f"ppo:{base_cfg.name}", seed=base_cfg.seed, kind="sweep",
                    extra={"sweep": spec.name, "sweep_file": sweep_file or "", "objective": OBJECTIVE,
                           "warm_start": warm_text})
    callbacks: list[Any] = [ProjectMLflowLogger(
        tracking_uri=uri, experiment_name=exp_name, tags=tags, params=apply_params(base_cfg, spec.overrides).model_dump(mode="json"),
        log_trial_config=True, save_artifact=False,
        run_name=lambda trial: f"{base_cfg.task_id} | {base_cfg.name} | sweep {spec.name} trial {trial_index(trial)}")]
    if progress:
        callbacks.append(_progress_callback(spec))
    trainable = make_trainable(spec, base_cfg, env=env, warm_start_paths=warm_paths)
    resources = PPO.default_resource_request(build_ppo_config(apply_params(base_cfg, spec.overrides), env=env))
    trainable = tune.with_resources(trainable, resources)

    if tune.Tuner.can_restore(str(exp_dir)):
        if not resume:
            raise SweepError(f"sweep {spec.name!r} already exists at {exp_dir}; resume it (drop "
                             f"--no-resume) or remove that directory to start again")
        tuner = tune.Tuner.restore(str(exp_dir), trainable=trainable, resume_unfinished=True,
                                   resume_errored=True)
    else:
        tuner = tune.Tuner(
            trainable,
            param_space={k: d.domain() for k, d in spec.space.items()},
            tune_config=tune.TuneConfig(metric=OBJECTIVE, mode="max", num_samples=spec.num_samples,
                                        search_alg=_searcher(spec), scheduler=_scheduler(spec)),
            run_config=tune.RunConfig(
                name=spec.name, storage_path=str(storage), callbacks=callbacks, verbose=0,
                stop={"training_iteration": spec.iterations},
                checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=spec.checkpoint_every,
                                                        checkpoint_at_end=True, num_to_keep=2),
                failure_config=tune.FailureConfig(max_failures=0)))
    with graceful_stop() as stop_signals:
        results = tuner.fit()

    trials = []
    for r in results:
        m = r.metrics or {}
        trials.append({"trial_id": m.get("trial_id"), "params": dict(r.config or {}),
                       OBJECTIVE: m.get(OBJECTIVE), "training_iteration": m.get("training_iteration"),
                       "error": str(r.error) if r.error else None,
                       "checkpoint": r.checkpoint.path if r.checkpoint else None})
    outcome = SweepOutcome(experiment_path=str(exp_dir), experiment=exp_name, tracking_uri=uri, trials=trials,
                           warm_start=warm_text, interrupted=bool(stop_signals) or
                           results.num_terminated + results.num_errors < len(results))
    ok = [t for t in trials if t[OBJECTIVE] is not None and not t["error"] and not math.isnan(t[OBJECTIVE])]
    if ok:
        best = max(ok, key=lambda t: t[OBJECTIVE])
        outcome.best = best
        if spec.register_model and best["checkpoint"] and not outcome.interrupted:
            name = spec.model_name or f"inferencegym-{spec.name}"
            outcome.registered_model, outcome.registered_version = register_best(
                uri, exp_name, best, name, base_cfg)
    outcome.wall_s = time.perf_counter() - t0
    return outcome


@contextlib.contextmanager
def graceful_stop() -> Iterator[list[int]]:
    """Within the block, SIGTERM (``kill``, a scheduler, ``docker stop``) and SIGINT (Ctrl-C) stop
    Tune gracefully: the first one goes to Tune's own interrupt handler (through SIGUSR1, which Tune
    always watches), which saves the experiment state and makes ``fit()`` return the trials so far,
    instead of the process dying mid-write with Ray's native stack dump; a second one raises
    KeyboardInterrupt. Yields the list of signals received (empty: not interrupted). Installed after
    ``ray.init`` (which installs Ray's own handlers) and restored afterwards; main thread only."""
    import signal
    import threading

    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def _not_listening(signum: int, _frame: Any) -> None:  # Tune's fit() has not taken SIGUSR1 yet
        raise KeyboardInterrupt

    def _stop(signum: int, _frame: Any) -> None:
        received.append(signum)
        if len(received) > 1:
            raise KeyboardInterrupt
        signal.raise_signal(signal.SIGUSR1)

    old_env = os.environ.get("TUNE_DISABLE_SIGINT_HANDLER")
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"  # ours forwards SIGINT, and knows it happened
    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    previous[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, _not_listening)
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if old_env is None:
            os.environ.pop("TUNE_DISABLE_SIGINT_HANDLER", None)
        else:
            os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = old_env


def sweep_warm_start(spec: SweepSpec, base_cfg: Any, bc_dir: Path, *, env: Any = None,
                     resuming: bool = False) -> tuple[dict[str, str] | None, str]:
    """The warm start every trial of the sweep starts from, and a one-line description of it.

    The same behaviour cloning ``inferencegym train`` runs (the base config's ``bc.*`` with the
    sweep's fixed overrides), done once per sweep in ``<storage>/<sweep>_bc`` and reused on resume.
    Without it (``warm_start: false``, ``bc.enabled: false`` or a test env) the description says so."""
    cfg = apply_params(base_cfg, spec.overrides)
    if not spec.warm_start:
        return None, "none: the sweep file sets warm_start: false (trials start from random weights)"
    if not cfg.bc.enabled:
        return None, "none: bc.enabled is false in the base config (trials start from random weights)"
    if env is not None:
        return None, "none: a custom env was given (behaviour cloning needs the InferenceGym envs)"
    from inferencegym.rl.bc import warm_start

    text = (f"behaviour cloning of {cfg.bc.baseline} ({cfg.bc.episodes} episodes, {cfg.bc.epochs} epochs), "
            f"as inferencegym train")
    saved = {mid: str(bc_dir / mid) for mid in cfg.modules if (bc_dir / mid).is_dir()}
    if resuming and saved:
        return saved, text
    return warm_start(cfg, out_dir=bc_dir), text


def _progress_callback(spec: SweepSpec) -> Any:
    """A rich progress bar over trial iterations (num_samples x iterations at most)."""
    total = spec.num_samples * spec.iterations

    class SweepProgress(tune.Callback):
        def setup(self, **info: Any) -> None:
            self.best = -math.inf
            self.progress = Progress(TextColumn("[bold]sweep[/] " + spec.name), BarColumn(),
                                     TextColumn("{task.completed}/{task.total} trial-iterations"),
                                     TextColumn("{task.fields[info]}"), TimeElapsedColumn())
            self.progress.start()
            self.task = self.progress.add_task("sweep", total=total, info="")

        def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
            g = result.get(OBJECTIVE)
            if g is not None and g == g:
                self.best = max(self.best, g)
            self.progress.update(self.task, advance=1, info=f"best {OBJECTIVE} so far {self.best:.3f}")

        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            # an early-stopped trial will not use its remaining iterations
            done = sum(int(t.last_result.get("training_iteration", 0) or 0) for t in trials)
            left = sum(spec.iterations for t in trials if t.status not in ("TERMINATED", "ERROR"))
            self.progress.update(self.task, completed=done, total=max(done + left, done))

        def on_experiment_end(self, trials: list, **info: Any) -> None:
            self.progress.stop()

    return SweepProgress()
