"""YAML training configs (``rllib_configs/*.yaml``), validated with pydantic on load.

One file describes one PPO experiment: the task, the PPO hyperparameters (adaptive KL, GAE lambda,
learning-rate and entropy schedules in RLlib's ``[[env_step, value], ...]`` list form), the resources
(env runners, envs per runner, learners), the RLModules and the multi-agent mapping, the curriculum,
the safety monitors, the behaviour-cloning warm start, checkpointing and MLflow. Unknown keys are
errors (a typo must not be silently ignored); :func:`load_config` reports every problem with its
location in the file.
"""

from __future__ import annotations

import math

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from inferencegym.envs.actions import FLAT_BUCKETS
from inferencegym.safe_yaml import YamlInputError, load_yaml, read_yaml, short

Schedule = float | list[tuple[int, float]]

PRIVILEGED_CRITIC_DIM = 5
"""Length of the asymmetric critic's privileged block (``rl/env_creators.PrivilegedCriticFeatures``)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # NaN/inf: refused


def _check_schedule(name: str, v: Schedule) -> Schedule:
    if isinstance(v, (int, float)):
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
        return float(v)
    if not v:
        raise ValueError(f"{name} schedule is empty; give a number or [[0, value], [step, value], ...]")
    steps = [s for s, _ in v]
    if steps[0] != 0:
        raise ValueError(f"{name} schedule must start at env step 0 (RLlib requires it); got {steps[0]}")
    if any(b <= a for a, b in zip(steps, steps[1:])):
        raise ValueError(f"{name} schedule steps must increase strictly; got {steps}")
    if any(val < 0 for _, val in v):
        raise ValueError(f"{name} schedule values must be >= 0; got {[val for _, val in v]}")
    return [(int(s), float(val)) for s, val in v]


class PPOSettings(_Strict):
    """PPO hyperparameters (names as in ``PPOConfig.training``)."""

    lr: Schedule = Field(default=3e-4, description="learning rate or [[env_step, lr], ...]")
    entropy_coeff: Schedule = Field(default=0.01, description="entropy bonus or schedule")
    gamma: float = Field(default=0.99, gt=0, le=1)
    lambda_: float = Field(default=0.95, gt=0, le=1, alias="lambda", description="GAE lambda")
    use_kl_loss: bool = True
    kl_coeff: float = Field(default=0.2, ge=0)
    kl_target: float = Field(default=0.01, gt=0)
    clip_param: float = Field(default=0.2, gt=0)
    vf_clip_param: float = Field(default=10.0, gt=0)
    vf_loss_coeff: float = Field(default=0.5, ge=0)
    grad_clip: float | None = Field(default=0.5, gt=0)
    train_batch_size_per_learner: int = Field(default=1024, ge=16)
    minibatch_size: int = Field(default=128, ge=8)
    num_epochs: int = Field(default=4, ge=1)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False)

    @field_validator("lr", "entropy_coeff")
    @classmethod
    def _sched(cls, v: Schedule, info: Any) -> Schedule:
        return _check_schedule(info.field_name, v)

    @model_validator(mode="after")
    def _minibatch(self) -> PPOSettings:
        if self.minibatch_size > self.train_batch_size_per_learner:
            raise ValueError(f"minibatch_size {self.minibatch_size} is larger than "
                             f"train_batch_size_per_learner {self.train_batch_size_per_learner}")
        return self


class Resources(_Strict):
    """Where sampling and learning run. Raise these on a multi-node cluster."""

    num_env_runners: int = Field(default=0, ge=0, description="remote EnvRunner actors (0: sample in the driver)")
    num_envs_per_env_runner: int = Field(default=1, ge=1, description="vectorised envs per runner")
    num_learners: int = Field(default=0, ge=0, description="remote Learner actors (0: learn in the driver)")
    num_cpus_per_env_runner: float = Field(default=1.0, gt=0)
    custom_resources_per_env_runner: dict[str, float] = Field(
        default_factory=dict, description="custom Ray resources each EnvRunner needs, e.g. {env_runner_node: 1}: "
        "EnvRunners then run only on nodes started with `ray start --resources '{\"env_runner_node\": N}'`")
    rollout_fragment_length: int | Literal["auto"] = "auto"


class FaultTolerance(_Strict):
    """What a training run survives (RLlib's ``AlgorithmConfig.fault_tolerance``): an env that raises
    mid-episode is recreated and the episode discarded; a lost (killed, preempted) EnvRunner actor is
    restarted. Interrupted drivers resume with ``inferencegym train --resume``."""

    restart_failed_sub_environments: bool = Field(
        default=True, description="recreate an env whose reset/step raised and go on sampling")
    restart_failed_env_runners: bool = Field(
        default=True, description="restart a failed EnvRunner actor as an identical copy")
    max_num_env_runner_restarts: int = Field(default=100, ge=0,
                                             description="restarts of EnvRunner actors at most")
    delay_between_env_runner_restarts_s: float = Field(default=5.0, ge=0, le=600,
                                                       description="wait before a restart, s")
    num_consecutive_env_runner_failures_tolerance: int = Field(
        default=10, ge=1, description="consecutive failed sampling rounds before the run fails")
    env_runner_health_probe_timeout_s: float = Field(default=30.0, gt=0, le=3600,
                                                     description="health probe timeout, s")
    env_runner_restore_timeout_s: float = Field(default=1800.0, gt=0, le=86400,
                                                description="time allowed to restore a runner, s")


class ModuleSettings(_Strict):
    """One RLModule: ``type`` from :data:`inferencegym.rl.modules.MODULE_TYPES` plus its model_config."""

    type: str
    model_config_: dict[str, Any] = Field(default_factory=dict, alias="model_config")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False)

    @field_validator("type")
    @classmethod
    def _known(cls, v: str) -> str:
        from inferencegym.rl.modules import MODULE_TYPES  # lazy: imports Ray / torch (~5 s); not at start-up

        if v not in MODULE_TYPES:
            raise ValueError(f"unknown module type {v!r}; valid: {', '.join(sorted(MODULE_TYPES))}")
        return v


class CurriculumSettings(_Strict):
    """Load / burst intensity raised one stage each time the mean grade passes the stage's threshold."""

    enabled: bool = False
    metric: str = Field(default="grade/score", description="episode metric compared with the thresholds")
    thresholds: list[float] = Field(default_factory=list, description="grade needed to leave stage i")
    load_scale: list[float] = Field(default_factory=lambda: [1.0], description="offered-load multiplier per stage")
    burst_scale: list[float] = Field(default_factory=lambda: [1.0], description="burst-intensity multiplier per stage")
    min_episodes: int = Field(default=4, ge=1, description="episodes per stage before it may advance")

    @model_validator(mode="after")
    def _stages(self) -> CurriculumSettings:
        if not self.enabled:
            return self
        n = len(self.load_scale)
        if len(self.burst_scale) != n:
            raise ValueError(f"curriculum load_scale has {n} stages but burst_scale has {len(self.burst_scale)}")
        if len(self.thresholds) != n - 1:
            raise ValueError(f"curriculum with {n} stages needs {n - 1} thresholds; got {len(self.thresholds)}")
        if any(not 0 < x <= 10 for x in self.load_scale + self.burst_scale):
            raise ValueError("curriculum scales must be in (0, 10]")
        return self


class SafetySettings(_Strict):
    """Episodes with runaway queues or latency beyond ``latency_factor`` x SLO are counted
    (``safety/*`` metrics) and, if ``terminate``, truncated with ``penalty`` added to the reward."""

    enabled: bool = True
    queue_key: str = "sim/queue_depth"
    queue_limit: float = Field(default=2000.0, gt=0)
    latency_key: str = "sim/ttft_p99_s"
    slo_key: str = Field(default="slo/ttft_s", description="info key of the SLO; else the task's tightest TTFT SLO")
    latency_factor: float = Field(default=2.0, gt=1)
    terminate: bool = False
    penalty: float = Field(default=-10.0, le=0)


class BCSettings(_Strict):
    """Behaviour-cloning warm start: a few epochs of supervised loss on the module before PPO."""

    enabled: bool = False
    baseline: str = Field(default="heuristic", description="policy registry name to imitate")
    episodes: int = Field(default=4, ge=1)
    epochs: int = Field(default=5, ge=1)
    lr: float = Field(default=1e-3, gt=0)
    minibatch_size: int = Field(default=256, ge=8)
    seed: int = Field(default=10_000, ge=0, le=2**32 - 1, description="first seed of the demonstration episodes")
    value_warmup: bool = Field(default=True, description="also fit the value function to the "
                               "demonstrations' discounted returns (a critic that knows the cloned "
                               "policy's worth; without it PPO's first updates undo the cloning)")
    demonstrations: str | None = Field(default=None, description="directory of a privileged teacher's "
                                       "recorded episodes (rl/distill.py, <task>_<seed>.npz): the policy is "
                                       "cloned on them instead of the baseline's; the baseline's episodes "
                                       "then only fit the value function (single-agent env)")
    dagger_rounds: int = Field(default=0, ge=0, description="DAgger rounds after the cloning (rl/dagger.py): "
                               "the student's visited states, labelled by the baseline, join the data; 0: off")
    dagger_episodes: int | None = Field(default=None, ge=1, description="student episodes per round, on "
                                        "fresh seeds after the demonstrations' (default: bc.episodes)")
    dagger_beta: float = Field(default=0.0, ge=0.0, lt=1.0, description="round r executes the baseline's "
                               "action with probability dagger_beta ** r per step (0: the student alone)")
    dagger_student: Literal["greedy", "sample"] = Field(
        default="greedy", description="the student's rollout actions: the mode (what the returned warm "
        "start does when evaluated and served) or samples (numpy Generator from the config seed)")
    dagger_retrain: Literal["continue", "scratch"] = Field(
        default="continue", description="each round retrains from the student's or the initial weights")

class FineTuneSettings(_Strict):
    """Conservative fine-tuning of the warm start (:mod:`inferencegym.rl.learner`): PPO's loss plus a
    KL to the frozen warm start that fades out, an actor warm-up while the critic learns at full
    weight, and per-knob entropy scales. All off by default (plain PPO)."""

    teacher_kl_coeff: Schedule = Field(
        default=0.0, description="weight of KL(warm start || policy) on the visited states, or "
        "[[env_step, weight], ...] (e.g. [[0, 1.0], [100000, 0.0]] fades it out); applies to the "
        "modules with a warm start (bc.enabled), inactive without one")
    actor_warmup_steps: int = Field(
        default=0, ge=0, description="env steps over which the actor's loss terms (surrogate, "
        "entropy, KL to the sampling policy) ramp from 0 to full weight; the critic learns from step 0")
    entropy_knob_scale: dict[str, float] = Field(
        default_factory=dict, description="single-agent env: knob name (a key of "
        "envs.actions.FLAT_BUCKETS) -> multiplier of the entropy coefficient for that knob; knobs "
        "not named keep 1.0. Costly knobs (quantization_tier, kv_budget_fraction) below 1 are "
        "explored less")

    @field_validator("teacher_kl_coeff")
    @classmethod
    def _sched(cls, v: Schedule, info: Any) -> Schedule:
        return _check_schedule(info.field_name, v)

    @field_validator("entropy_knob_scale")
    @classmethod
    def _knobs(cls, v: dict[str, float]) -> dict[str, float]:
        bad = sorted(set(v) - set(FLAT_BUCKETS))
        if bad:
            raise ValueError(f"entropy_knob_scale names unknown knobs {bad}; valid: {list(FLAT_BUCKETS)}")
        if any(x < 0 for x in v.values()):
            raise ValueError(f"entropy_knob_scale multipliers must be >= 0; got {v}")
        return v

    @property
    def uses_teacher(self) -> bool:
        """Whether any point of the teacher-KL schedule is above 0."""
        v = self.teacher_kl_coeff
        return (v > 0) if isinstance(v, float) else any(w > 0 for _, w in v)

    def knob_scale_vector(self) -> list[float] | None:
        """Multipliers in ``FLAT_BUCKETS`` order, or None when no knob is scaled."""
        if not self.entropy_knob_scale:
            return None
        return [float(self.entropy_knob_scale.get(k, 1.0)) for k in FLAT_BUCKETS]


class StopSettings(_Strict):
    """When the Tune trial stops (first reached)."""

    timesteps_total: int | None = Field(default=200_000, ge=1, description="lifetime env steps sampled")
    training_iteration: int | None = Field(default=None, ge=1)
    time_total_s: float | None = Field(default=None, gt=0, description="wall-clock budget")


class CheckpointSettings(_Strict):
    frequency: int = Field(default=5, ge=0, description="iterations between checkpoints (0: only at end)")
    num_to_keep: int = Field(default=2, ge=1)


class MLflowSettings(_Strict):
    enabled: bool = True
    experiment: str | None = Field(default=None, description="defaults to 'train/<task_id>'")
    save_artifact: bool = True


class EvaluationSettings(_Strict):
    episodes: int = Field(default=20, ge=1)
    seed: int = Field(default=1000, ge=0, le=2**32 - 1, description="held-out seeds seed, seed+1, ...")
    baselines: list[str] = Field(default_factory=list)
    val_episodes: int = Field(default=3, ge=0, description="validation episodes per candidate when "
                              "`inferencegym train` picks the returned policy among the warm start and "
                              "the kept checkpoints (0: the last checkpoint, no selection)")
    val_seed: int = Field(default=500, ge=0, le=2**32 - 1, description="first validation seed (disjoint from the held-out "
                          "seeds and the BC seeds)")


class TrainConfig(_Strict):
    """A whole training experiment."""

    name: str
    task_id: str
    env: Literal["single", "cluster"] = Field(description="'single': LLMServe-v0; 'cluster': ClusterEnv")
    env_config: dict[str, Any] = Field(default_factory=dict, description="extra env constructor kwargs")
    seed: int = Field(default=0, ge=0, le=2**32 - 1, description="training seed (numpy Generators)")
    ppo: PPOSettings = Field(default_factory=PPOSettings)
    resources: Resources = Field(default_factory=Resources)
    fault_tolerance: FaultTolerance = Field(default_factory=FaultTolerance)
    modules: dict[str, ModuleSettings]
    policy_mapping: dict[str, str] = Field(
        default_factory=dict,
        description="agent id or prefix ending in '*' -> module id (cluster env); e.g. router: router_pol")
    trainable: list[str] | None = Field(
        default=None, description="module ids PPO updates (default: every module in policy_mapping)")
    curriculum: CurriculumSettings = Field(default_factory=CurriculumSettings)
    safety: SafetySettings = Field(default_factory=SafetySettings)
    bc: BCSettings = Field(default_factory=BCSettings)
    fine_tune: FineTuneSettings = Field(default_factory=FineTuneSettings)
    stop: StopSettings = Field(default_factory=StopSettings)
    checkpoint: CheckpointSettings = Field(default_factory=CheckpointSettings)
    mlflow: MLflowSettings = Field(default_factory=MLflowSettings)
    evaluation: EvaluationSettings = Field(default_factory=EvaluationSettings)

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        if self.env == "single":
            if set(self.modules) != {"default_policy"}:
                raise ValueError("a single-agent config has exactly one module named 'default_policy'; "
                                 f"got {sorted(self.modules)}")
            if self.policy_mapping:
                raise ValueError("policy_mapping is only for env: cluster")
        else:
            if not self.policy_mapping:
                raise ValueError("env: cluster needs policy_mapping (e.g. {router: router_pol, 'replica_*': replica_pol})")
            missing = sorted(set(self.policy_mapping.values()) - set(self.modules))
            if missing:
                raise ValueError(f"policy_mapping uses modules {missing} that are not under modules: "
                                 f"{sorted(self.modules)}")
            if self.trainable is not None:
                bad = sorted(set(self.trainable) - set(self.modules))
                if bad or not self.trainable:
                    raise ValueError(f"trainable must list modules from {sorted(self.modules)}; got {self.trainable}")
        recurrent = sorted(mid for mid, m in self.modules.items() if m.type == "lstm")
        if recurrent and self.env != "single":
            raise ValueError(f"module type lstm ({recurrent}) is for env: single: RLlib's LSTM encoder takes "
                             "1-D observations without an action mask, the router a Dict of replica rows "
                             "and a mask; use attention_router (it sees a load trend feature of its own)")
        if recurrent and self.bc.enabled:
            raise ValueError("bc.enabled is not supported with module type lstm: behaviour cloning (rl/bc.py) "
                             "and the fine-tuning teacher use shuffled single windows, no recurrent state; set "
                             "bc.enabled=false, or use type mlp with model_config.history_windows")
        if self.env == "cluster" and any(m.model_config_.get("history_windows") for m in self.modules.values()):
            raise ValueError("model_config.history_windows is for env: single (the router sees a load trend "
                             "feature of its own)")
        for mid, m in self.modules.items():
            k = int(m.model_config_.get("critic_privileged_dims", 0) or 0)
            if k:
                if self.env != "single" or k != PRIVILEGED_CRITIC_DIM or m.type != "mlp":
                    raise ValueError(f"modules.{mid}.model_config.critic_privileged_dims={k}: the asymmetric "
                                     f"critic is for env: single, type mlp, with {PRIVILEGED_CRITIC_DIM} "
                                     "privileged features (rl/env_creators.PrivilegedCriticFeatures)")
        if self.env == "cluster" and self.bc.dagger_rounds > 0:
            raise ValueError("bc.dagger_rounds is for env: single (the privileged teacher's task); set it "
                             "to 0 for cluster configs")
        if self.env == "single" and self.trainable not in (None, ["default_policy"]):
            raise ValueError("trainable is only for env: cluster")
        if self.fine_tune.entropy_knob_scale and self.env != "single":
            raise ValueError("fine_tune.entropy_knob_scale is for env: single (the flat knob action)")
        if self.ppo.train_batch_size_per_learner < 2 * self.resources.num_envs_per_env_runner:
            raise ValueError("train_batch_size_per_learner is too small for the number of envs")
        return self

    def map_agent(self, agent_id: str) -> str:
        """Module id for an agent id: exact match first, then the longest matching ``prefix*``."""
        if agent_id in self.policy_mapping:
            return self.policy_mapping[agent_id]
        best = None
        for pat, mid in self.policy_mapping.items():
            if pat.endswith("*") and agent_id.startswith(pat[:-1]):
                if best is None or len(pat) > len(best[0]):
                    best = (pat, mid)
        if best is None:
            raise ValueError(f"agent {agent_id!r} matches no policy_mapping entry; "
                             f"entries: {sorted(self.policy_mapping)}")
        return best[1]

    def full_env_config(self) -> dict[str, Any]:
        """``task_id`` + ``env_config`` + the single-agent module's history settings
        (``model_config.history_windows`` > 0 wraps the env in ``envs.history.HistoryObservation``)."""
        out = {"task_id": self.task_id, **self.env_config}
        if self.env == "single":
            mc = self.modules["default_policy"].model_config_
            if int(mc.get("history_windows", 0) or 0) > 0:
                out["history_windows"] = int(mc["history_windows"])
                out["history_ema_weight"] = float(mc.get("history_ema_weight", 0.3))
                if mc.get("phase_features"):
                    out["phase_features"] = int(mc["phase_features"])  # true = 1, or level 2
            if int(mc.get("critic_privileged_dims", 0) or 0) > 0:
                out["privileged_critic"] = True
        return out

    def trained_modules(self) -> list[str]:
        if self.env == "single":
            return ["default_policy"]
        return sorted(self.trainable) if self.trainable else sorted(set(self.policy_mapping.values()))

    def with_overrides(self, *, steps: int | None = None, seed: int | None = None,
                       iterations: int | None = None, num_env_runners: int | None = None,
                       sets: list[str] | None = None) -> TrainConfig:
        """A copy with the CLI's ``--steps`` / ``--seed`` / ``--iterations`` / ``--set a.b=v`` applied
        (``v`` is parsed as YAML: ``--set ppo.minibatch_size=64``, ``--set curriculum.enabled=false``)."""
        data = self.model_dump(by_alias=True)
        for item in sets or ():
            key, eq, raw = item.partition("=")
            if not eq or not key:
                raise ConfigError(f"--set expects key.path=value, got {item!r}")
            node = data
            parts = key.split(".")
            for part in parts[:-1]:
                if not isinstance(node.get(part), dict):
                    raise ConfigError(f"--set {item!r}: {part!r} is not a section of the config")
                node = node[part]
            try:
                node[parts[-1]] = load_yaml(raw, f"--set {key}")
            except YamlInputError as exc:
                raise ConfigError(str(exc)) from None
        if steps is not None:
            data["stop"]["timesteps_total"] = int(steps)
        if iterations is not None:
            data["stop"]["training_iteration"] = int(iterations)
        if seed is not None:
            data["seed"] = int(seed)
        if num_env_runners is not None:
            data["resources"]["num_env_runners"] = int(num_env_runners)
        return parse_config(data, "(config with overrides)")

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)


class ConfigError(ValueError):
    """A training config that could not be loaded; the message lists every problem."""


def _format_errors(path: str, exc: ValidationError) -> str:
    lines = [f"invalid training config {path}:"]
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
        given = err.get("input")
        given_s = "" if isinstance(given, dict) else f" (given: {short(given)})"
        lines.append(f"  - {loc}: {err['msg']}{given_s}")
    lines.append("See docs/training.md for the schema and rllib_configs/ for examples.")
    return "\n".join(lines)


def _non_finite(data: Any, path: str = "") -> str | None:
    """The dotted path of the first NaN or infinite number in ``data`` (free-form sections too)."""
    if isinstance(data, float) and not math.isfinite(data):
        return path or "(top level)"
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for k, v in items:
        found = _non_finite(v, f"{path}.{k}" if path else str(k))
        if found:
            return found
    return None


def parse_config(data: Any, source: str = "<dict>") -> TrainConfig:
    """Validate an already-parsed mapping; raises :class:`ConfigError` with every problem listed."""
    if not isinstance(data, dict):
        raise ConfigError(f"invalid training config {source}: expected a mapping at the top level, "
                          f"got {type(data).__name__}")
    bad = _non_finite(data)
    if bad:
        raise ConfigError(f"invalid training config {source}: {bad} must be a finite number (NaN and "
                          f"infinity are refused)")
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(source, exc)) from None


def load_config(path: str | Path) -> TrainConfig:
    """Load and validate a YAML training config."""
    p = Path(path)
    if not p.is_file():
        here = sorted(x.name for x in Path("rllib_configs").glob("*.yaml")) if Path("rllib_configs").is_dir() else []
        raise ConfigError(f"training config {p} not found" + (f"; available in rllib_configs/: {here}" if here else ""))
    try:
        data = read_yaml(p, "training config")
    except YamlInputError as exc:
        raise ConfigError(f"training config {exc}") from None
    return parse_config(data, str(p))
