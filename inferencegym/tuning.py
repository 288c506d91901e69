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

from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

#: The metric every sweep optimises (maximised).
OBJECTIVE = "eval/grade_score"


class SweepError(ValueError):
    """A sweep file that could not be loaded; the message lists every problem."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Dist(_Strict):
    """One dimension of the search space: exactly one of the keys below."""

    uniform: tuple[float, float] | None = None
    loguniform: tuple[float, float] | None = None
    quniform: tuple[float, float, float] | None = Field(default=None, description="[low, high, q]")
    randint: tuple[int, int] | None = Field(default=None, description="[low, high) integers")
    choice: list[Any] | None = None

    @model_validator(mode="after")
    def _one(self) -> Dist:
        given = [k for k in ("uniform", "loguniform", "quniform", "randint", "choice") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of uniform, loguniform, quniform, randint, choice; got {given or 'none'}")
        if self.choice is not None and not self.choice:
            raise ValueError("choice needs at least one value")
        for k in ("uniform", "loguniform", "quniform", "randint"):
            v = getattr(self, k)
            if v is not None and not v[0] < v[1]:
                raise ValueError(f"{k} needs low < high; got {list(v)}")
        if self.loguniform is not None and self.loguniform[0] <= 0:
            raise ValueError(f"loguniform needs low > 0; got {list(self.loguniform)}")
        return self

    def domain(self) -> Any:
        from ray import tune

        if self.uniform is not None:
            return tune.uniform(*self.uniform)
        if self.loguniform is not None:
            return tune.loguniform(*self.loguniform)
        if self.quniform is not None:
            return tune.quniform(*self.quniform)
        if self.randint is not None:
            return tune.randint(*self.randint)
        return tune.choice(list(self.choice or []))


class SearchSettings(_Strict):
    algorithm: Literal["optuna", "random"] = Field(
        default="optuna", description="optuna: TPE (needs the optuna package); random: random search")
    seed: int = Field(default=0, description="seed of the search algorithm")
    max_concurrent_trials: int | None = Field(default=None, ge=1, description="default: as many as fit")


class SchedulerSettings(_Strict):
    """ASHA early stopping on the objective, in training iterations."""

    type: Literal["asha", "fifo"] = "asha"
    grace_period: int = Field(default=2, ge=1, description="iterations before a trial may be stopped")
    reduction_factor: float = Field(default=2.0, gt=1)


class EvaluationSettings(_Strict):
    """How the objective is measured: greedy policy, ``episodes`` held-out seeds from ``seed``."""

    episodes: int = Field(default=3, ge=1)
    seed: int = Field(default=1000, ge=1000, description="first evaluation seed (training seeds are below 1000)")
    every: int = Field(default=1, ge=1, description="evaluate every N iterations (the last value is carried between)")


class SweepSpec(_Strict):
    """A whole sweep (``tune/*.yaml``)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    base_config: str = Field(description="training config (rllib_configs/*.yaml), relative to the cwd or the sweep file")
    num_samples: int = Field(default=8, ge=1)
    iterations: int = Field(default=10, ge=1, description="training iterations per trial (ASHA max_t)")
    overrides: dict[str, Any] = Field(default_factory=dict, description="fixed values, same keys as space")
    space: dict[str, Dist]
    search: SearchSettings = Field(default_factory=SearchSettings)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    evaluation: EvaluationSettings = Field(default_factory=EvaluationSettings)
    checkpoint_every: int = Field(default=1, ge=1, description="iterations between trial checkpoints (resume)")
    register_model: bool = True
    model_name: str | None = Field(default=None, description="registry name; default inferencegym-<name>")

    @field_validator("space")
    @classmethod
    def _nonempty(cls, v: dict[str, Dist]) -> dict[str, Dist]:
        if not v:
            raise ValueError("space is empty; sweep at least one reward.* or ppo.* key")
        return v


# ------------------------------------------------------------------------------------------------
# Loading and applying


def _format(path: str, exc: ValidationError) -> str:
    lines = [f"invalid sweep file {path}:"]
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
        lines.append(f"  - {loc}: {err['msg']}")
    lines.append("See docs/tuning.md and tune/*.yaml for examples.")
    return "\n".join(lines)


def load_sweep(path: str | Path) -> tuple[SweepSpec, Any]:
    """Load and validate a sweep file and its base training config; returns ``(spec, TrainConfig)``.

    Every key of ``space`` and ``overrides`` is checked against the training config's PPO settings
    and the task's reward config, so a typo fails here and not in trial 7."""
    from inferencegym.rl.config import load_config

    p = Path(path)
    if not p.is_file():
        have = sorted(str(x) for x in Path("tune").glob("*.yaml")) if Path("tune").is_dir() else []
        raise SweepError(f"sweep file {p} not found" + (f"; available: {', '.join(have)}" if have else ""))
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise SweepError(f"sweep file {p} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise SweepError(f"invalid sweep file {p}: expected a mapping at the top level")
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise SweepError(_format(str(p), exc)) from None
    base = Path(spec.base_config)
    if not base.is_absolute() and not base.is_file():
        base = p.parent / spec.base_config
    cfg = load_config(base)
    problems = [msg for key in spec.space if (msg := _check_key(key, cfg.env))]
    problems += [msg for key in spec.overrides if (msg := _check_key(key, cfg.env, fixed=True))]
    if problems:
        raise SweepError(f"invalid sweep file {p}:\n" + "\n".join(f"  - {m}" for m in problems))
    apply_params(cfg, spec.overrides)  # fixed values must validate too
    return spec, cfg


def _reward_class(env_kind: str) -> type:
    if env_kind == "cluster":
        from inferencegym.envs.cluster_env import ClusterRewardConfig

        return ClusterRewardConfig
    from inferencegym.envs.reward import RewardConfig

    return RewardConfig


#: env_config key under which each env takes its reward weights.
REWARD_ENV_KEY = {"single": "reward_config", "cluster": "reward"}


def _ppo_names() -> set[str]:
    from inferencegym.rl.config import PPOSettings

    return {f.alias or name for name, f in PPOSettings.model_fields.items()}


def _resource_names() -> set[str]:
    from inferencegym.rl.config import Resources

    return set(Resources.model_fields)


def _check_key(key: str, env_kind: str, fixed: bool = False) -> str | None:
    """Why ``key`` is not a valid sweep key (None if it is). ``fixed``: an ``overrides`` key, which
    may also set ``resources.*`` and ``env_config.*`` (not searched: they change cost, not policy)."""
    group, _, name = key.partition(".")
    if fixed and group == "resources":
        valid = sorted(_resource_names())
        return None if name in valid else f"{key}: unknown resources setting {name!r}; valid: {', '.join(valid)}"
    if fixed and group == "env_config":
        if name in ("task_id", REWARD_ENV_KEY[env_kind]):
            return f"{key}: set the task in the base config and reward weights as reward.<field>"
        return None if name else f"{key}: give env_config.<constructor kwarg>"
    if group == "reward":
        valid = [f.name for f in fields(_reward_class(env_kind))]
        if name not in valid:
            return f"{key}: unknown reward field {name!r} for a {env_kind} task; valid: {', '.join(valid)}"
        return None
    if group == "ppo":
        valid = sorted(_ppo_names())
        if name not in valid:
            return f"{key}: unknown PPO setting {name!r}; valid: {', '.join(valid)}"
        return None
    allowed = "'reward.', 'ppo.', 'resources.' or 'env_config.'" if fixed else "'reward.' or 'ppo.'"
    return f"{key}: keys must start with {allowed}"


def apply_params(cfg: Any, params: dict[str, Any]) -> Any:
    """The training config with ``reward.*`` / ``ppo.*`` (and fixed ``resources.*`` /
    ``env_config.*``) values applied, validated like a training config."""
    from inferencegym.rl.config import parse_config

    data = copy.deepcopy(cfg.model_dump(by_alias=True))
    reward_key = REWARD_ENV_KEY[cfg.env]
    reward = dict(data["env_config"].get(reward_key) or {})
    for key, value in params.items():
        group, _, name = key.partition(".")
        value = value.item() if hasattr(value, "item") else value  # numpy scalars from the searcher
        if group == "reward":
            reward[name] = value
        elif group == "ppo":
            data["ppo"][name] = value
        elif group == "resources":
            data["resources"][name] = value
        elif group == "env_config":
            data["env_config"][name] = value
        else:
            raise ValueError(f"{key}: keys must start with 'reward.', 'ppo.', 'resources.' or 'env_config.'")
    if reward:
        _reward_class(cfg.env)(**reward)  # validates the field names and types
        data["env_config"][reward_key] = reward
    return parse_config(data, "sweep trial")


# ------------------------------------------------------------------------------------------------
# Objective


def evaluate_module(module: Any, cfg: Any, *, episodes: int, seed: int) -> dict[str, Any]:
    """Grade a module's greedy policy on ``cfg.task_id`` with seeds ``seed .. seed+episodes-1``.

    Uses the same evaluation as ``inferencegym evaluate`` (default reward config: the grade does not
    depend on the reward weights)."""
    from inferencegym.rl.policy_loader import ModulePolicy

    module = copy.deepcopy(module)
    if cfg.env == "cluster":
        from inferencegym.envs.cluster_evaluation import evaluate_cluster_policy

        router_id = cfg.policy_mapping.get("router") or next(m for m in cfg.modules if "router" in m)
        policy = ModulePolicy({router_id: module}, task_id=cfg.task_id, kind="cluster", source="sweep",
                              mapping={"router": router_id})
        return evaluate_cluster_policy(policy, cfg.task_id, episodes=episodes, seed=seed)
    from inferencegym.envs.evaluation import evaluate_policy

    policy = ModulePolicy({"default_policy": module}, task_id=cfg.task_id, kind="single", source="sweep")
    return evaluate_policy(policy, cfg.task_id, episodes=episodes, seed=seed).to_json_dict()


def _acting_module_id(cfg: Any) -> str:
    if cfg.env == "single":
        return "default_policy"
    return cfg.policy_mapping.get("router") or next(m for m in cfg.modules if "router" in m)


def make_trainable(spec: SweepSpec, base_cfg: Any, env: Any = None) -> Any:
    """The Tune trainable of a sweep: PPO built from the base config with the trial's values,
    reporting ``eval/grade_score`` (plus the training metrics) every iteration."""
    from ray import tune

    from inferencegym.rl.train import build_ppo_config

    class SweepTrainable(tune.Trainable):
        def setup(self, config: dict[str, Any]) -> None:
            import torch

            torch.set_num_threads(1)
            self.cfg = apply_params(base_cfg, {**spec.overrides, **config})
            self.algo = build_ppo_config(self.cfg, env=env).build_algo()
            self.module_id = _acting_module_id(self.cfg)
            self.last_eval: dict[str, float] = {}

        def step(self) -> dict[str, Any]:
            result = self.algo.train()
            it = self.iteration + 1
            if it % spec.evaluation.every == 0 or it >= spec.iterations or not self.last_eval:
                t0 = time.perf_counter()
                ev = evaluate_module(self.algo.get_module(self.module_id), self.cfg,
                                     episodes=spec.evaluation.episodes, seed=spec.evaluation.seed)
                self.last_eval = {OBJECTIVE: float(ev["score_mean"]),
                                  "eval/grade_ci95": float(ev["score_ci95"]),
                                  "eval/ttft_p99_s": _num(ev.get("ttft_p99_s")),
                                  "eval/throughput_tok_s": _num(ev.get("throughput_tok_s")),
                                  "eval/wall_s": time.perf_counter() - t0}
            er = result.get("env_runners", {}) or {}
            out = {k: v for k, v in result.items() if k not in ("config",)}
            out.update(self.last_eval)
            out["train/episode_return_mean"] = _num(er.get("episode_return_mean"))
            out["train/grade_score"] = _num(er.get("grade/score"))
            return out

        def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any]:
            self.algo.save_to_path(checkpoint_dir)
            Path(checkpoint_dir, "sweep_eval.json").write_text(json.dumps(self.last_eval))
            return None  # type: ignore[return-value]

        def load_checkpoint(self, checkpoint: Any) -> None:
            path = checkpoint if isinstance(checkpoint, str) else getattr(checkpoint, "path", checkpoint)
            self.algo.restore_from_path(path)
            f = Path(path, "sweep_eval.json")
            if f.is_file():
                self.last_eval = json.loads(f.read_text())

        def cleanup(self) -> None:
            self.algo.stop()

    SweepTrainable.__name__ = SweepTrainable.__qualname__ = "SweepTrainable"
    return SweepTrainable


def _num(x: Any) -> float:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return math.nan
    return f


# ------------------------------------------------------------------------------------------------
# The registry model


try:  # the pyfunc wrapper needs mlflow at class-definition time only
    import mlflow.pyfunc as _pyfunc

    class PolicyPyfunc(_pyfunc.PythonModel):
        """MLflow pyfunc around an RLModule checkpoint: ``predict(list of observations) -> actions``
        (greedy, as served by ``inferencegym serve``)."""

        def load_context(self, context: Any) -> None:
            from inferencegym.serving.policy import ServedPolicy

            self.policy = ServedPolicy.from_spec(f"checkpoint:{context.artifacts['checkpoint']}")

        def predict(self, context, model_input, params=None):  # no type hints: MLflow would validate them
            rows = model_input.values.tolist() if hasattr(model_input, "values") else list(model_input)
            return self.policy.act_batch(self.policy.decode(rows))
except ImportError:  # pragma: no cover - mlflow is a declared dependency
    PolicyPyfunc = None  # type: ignore[assignment,misc]


# ------------------------------------------------------------------------------------------------
# Running


@dataclass
class SweepOutcome:
    experiment_path: str
    experiment: str
    tracking_uri: str
    trials: list[dict[str, Any]] = field(default_factory=list)
    best: dict[str, Any] | None = None
    registered_model: str | None = None
    registered_version: str | None = None
    interrupted: bool = False
    """Some trials are unfinished (Ctrl-C / SIGTERM): nothing was registered; run again to resume."""
    wall_s: float = 0.0


def _searcher(spec: SweepSpec) -> Any:
    """The search algorithm, with ``max_concurrent_trials`` applied at the searcher level."""
    from ray.tune.search import ConcurrencyLimiter

    if spec.search.algorithm == "optuna":
        try:
            from ray.tune.search.optuna import OptunaSearch
        except ImportError as exc:  # optuna not installed
            raise SweepError("search.algorithm 'optuna' needs the optuna package (pip install optuna); "
                             "or use search.algorithm: random") from exc
        alg = OptunaSearch(metric=OBJECTIVE, mode="max", seed=spec.search.seed)
    else:
        from ray.tune.search.basic_variant import BasicVariantGenerator

        return BasicVariantGenerator(random_state=spec.search.seed,
                                     max_concurrent=spec.search.max_concurrent_trials or 0)
    if spec.search.max_concurrent_trials:
        alg = ConcurrencyLimiter(alg, max_concurrent=spec.search.max_concurrent_trials)
    return alg


def _scheduler(spec: SweepSpec) -> Any:
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

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
    import torch
    from ray import tune
    from ray.air.integrations.mlflow import MLflowLoggerCallback
    from ray.rllib.algorithms.ppo import PPO

    from inferencegym.rl.train import build_ppo_config, ensure_ray
    from inferencegym.tracking import project_root, run_tags, tracking_uri

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
    tags = run_tags(task=base_cfg.task_id, policy=f"ppo:{base_cfg.name}", seed=base_cfg.seed, kind="sweep",
                    extra={"sweep": spec.name, "sweep_file": sweep_file or "", "objective": OBJECTIVE})
    callbacks: list[Any] = [MLflowLoggerCallback(tracking_uri=uri, experiment_name=exp_name, tags=tags,
                                                 save_artifact=False)]
    if progress:
        callbacks.append(_progress_callback(spec))
    trainable = make_trainable(spec, base_cfg, env=env)
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
    results = tuner.fit()

    trials = []
    for r in results:
        m = r.metrics or {}
        trials.append({"trial_id": m.get("trial_id"), "params": dict(r.config or {}),
                       OBJECTIVE: m.get(OBJECTIVE), "training_iteration": m.get("training_iteration"),
                       "error": str(r.error) if r.error else None,
                       "checkpoint": r.checkpoint.path if r.checkpoint else None})
    outcome = SweepOutcome(experiment_path=str(exp_dir), experiment=exp_name, tracking_uri=uri, trials=trials,
                           interrupted=results.num_terminated + results.num_errors < len(results))
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


def find_trial_run(uri: str, experiment: str, trial_id: str) -> str | None:
    """The MLflow run id the Tune callback made for ``trial_id`` (its ``trial_name`` tag ends with it)."""
    import mlflow

    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=[experiment], filter_string=f"tags.trial_name LIKE '%{trial_id}'",
                              output_format="list")
    return runs[0].info.run_id if runs else None


def register_best(uri: str, experiment: str, best: dict[str, Any], name: str, cfg: Any) -> tuple[str, str]:
    """Log the best trial's module as a pyfunc model in its MLflow run and register it."""
    import mlflow

    from inferencegym.serving.policy import resolve_checkpoint

    module_dir = resolve_checkpoint(best["checkpoint"])
    mid = _acting_module_id(cfg)
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


def _progress_callback(spec: SweepSpec) -> Any:
    """A rich progress bar over trial iterations (num_samples x iterations at most)."""
    from ray.tune import Callback
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    total = spec.num_samples * spec.iterations

    class SweepProgress(Callback):
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


__all__ = ["OBJECTIVE", "SweepSpec", "SweepError", "SweepOutcome", "load_sweep", "apply_params",
           "run_sweep", "evaluate_module", "register_best", "find_trial_run", "experiment_name"]
