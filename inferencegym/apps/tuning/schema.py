"""Sweep files: the validated schema of ``tune/*.yaml`` and how a trial's values apply to a config."""

from __future__ import annotations

import copy
from dataclasses import fields
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from inferencegym.envs.reward import ClusterRewardConfig, RewardConfig
from inferencegym.rl.config import BCSettings, PPOSettings, Resources, load_config, parse_config
from inferencegym.safe_yaml import YamlInputError, read_yaml

#: The metric every sweep optimises (maximised).
OBJECTIVE = "eval/grade_score"


class SweepError(ValueError):
    """A sweep file that could not be loaded; the message lists every problem."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # NaN/inf: refused


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


class SweepEvaluationSettings(_Strict):
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
    evaluation: SweepEvaluationSettings = Field(default_factory=SweepEvaluationSettings)
    checkpoint_every: int = Field(default=1, ge=1, description="iterations between trial checkpoints (resume)")
    warm_start: bool = Field(default=True, description=(
        "start every trial from the behaviour-cloning warm start `train` uses (the base config's bc.*; "
        "cloned once per sweep, before the first trial) when the base config enables it; false: trials "
        "start from random weights, which the sweep prints and tags on every run"))
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


    p = Path(path)
    if not p.is_file():
        have = sorted(str(x) for x in Path("tune").glob("*.yaml")) if Path("tune").is_dir() else []
        raise SweepError(f"sweep file {p} not found" + (f"; available: {', '.join(have)}" if have else ""))
    try:
        data = read_yaml(p, "sweep file")
    except YamlInputError as exc:
        raise SweepError(f"sweep file {exc}") from None
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
    return ClusterRewardConfig if env_kind == "cluster" else RewardConfig


#: env_config key under which each env takes its reward weights.
REWARD_ENV_KEY = {"single": "reward_config", "cluster": "reward"}


def _ppo_names() -> set[str]:
    return {f.alias or name for name, f in PPOSettings.model_fields.items()}


def _resource_names() -> set[str]:
    return set(Resources.model_fields)


def _check_key(key: str, env_kind: str, fixed: bool = False) -> str | None:
    """Why ``key`` is not a valid sweep key (None if it is). ``fixed``: an ``overrides`` key, which
    may also set ``resources.*``, ``env_config.*`` and ``bc.*`` (not searched: they change cost or the
    shared warm start, not a trial's policy)."""
    group, _, name = key.partition(".")
    if fixed and group == "resources":
        valid = sorted(_resource_names())
        return None if name in valid else f"{key}: unknown resources setting {name!r}; valid: {', '.join(valid)}"
    if fixed and group == "bc":
        valid = sorted(n for n in BCSettings.model_fields if n != "enabled")
        return None if name in valid else f"{key}: unknown bc setting {name!r} (the sweep's warm_start: " \
            f"turns cloning on or off); valid: {', '.join(valid)}"
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
    allowed = "'reward.', 'ppo.', 'resources.', 'env_config.' or 'bc.'" if fixed else "'reward.' or 'ppo.'"
    return f"{key}: keys must start with {allowed}"


def apply_params(cfg: Any, params: dict[str, Any]) -> Any:
    """The training config with ``reward.*`` / ``ppo.*`` (and fixed ``resources.*`` /
    ``env_config.*`` / ``bc.*``) values applied, validated like a training config."""


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
        elif group == "bc":
            data["bc"][name] = value
        else:
            raise ValueError(f"{key}: keys must start with 'reward.', 'ppo.', 'resources.', 'env_config.' or 'bc.'")
    if reward:
        _reward_class(cfg.env)(**reward)  # validates the field names and types
        data["env_config"][reward_key] = reward
    return parse_config(data, "sweep trial")
