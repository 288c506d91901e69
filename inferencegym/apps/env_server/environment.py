"""The OpenEnv side of InferenceGym: typed Action / Observation / State models and an ``Environment``
that wraps the single-agent Gymnasium env (``InferenceGym/LLMServe-v0``).

Nothing here simulates anything: every step is one ``step`` of the real ``LLMServeEnv``. The adapter
only translates: ``ServeAction`` fields <-> OpenEnv ``Action``; the Gymnasium observation vector and
``info`` (raw metrics, ``reward/<name>`` components) -> :class:`InferenceGymObservation`; the episode
log -> a grade when the episode ends.
"""

from __future__ import annotations

import secrets
import uuid
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import ConfigDict, Field, create_model, field_validator

from inferencegym import __version__
from inferencegym.envs import get_task, grade, list_tasks, serve_env
from inferencegym.envs.actions import InvalidActionError, ServeAction

DEFAULT_TASK_ID = "static_workload"
ENV_NAME = "inferencegym"
TASK_SPLIT = "test"
"""The one split of the OpenEnv Task API: the single-agent tasks in registry order."""


class EpisodeOverError(RuntimeError):
    """``step`` after the episode ended (call ``reset``)."""


class NotResetError(RuntimeError):
    """``step`` before the first ``reset``."""


def _upper_tier(cls: type, v: Any) -> Any:
    return v.upper() if isinstance(v, str) else v


class _StrictAction(Action):
    """OpenEnv's Action in pydantic strict mode: ``"64"``, ``true`` or ``64.0`` is not a batch cap,
    ``"yes"`` or ``1`` is not a boolean (JSON numbers still fill float fields)."""

    model_config = ConfigDict(**{**Action.model_config, "strict": True})


# The OpenEnv action: the ServeAction fields (same names, bounds and descriptions) on OpenEnv's
# Action base (extra="forbid", strict, plus its ``metadata`` dict). Built from ServeAction so the two
# never drift apart.
InferenceGymAction = create_model(
    "InferenceGymAction",
    __base__=_StrictAction,
    __doc__="The serving configuration for the next control window (see ServeAction).",
    __validators__={"_upper_tier": field_validator("quantization_tier", mode="before")(_upper_tier)},
    **{name: (f.annotation, f) for name, f in ServeAction.model_fields.items()},
)


def to_serve_action(action: Any) -> ServeAction:
    """An :data:`InferenceGymAction`, a ``ServeAction`` or a dict -> ``ServeAction``."""
    if isinstance(action, Action):
        action = action.model_dump(exclude={"metadata"})
    return ServeAction.from_any(action)


class InferenceGymObservation(Observation):
    """What the agent sees after ``reset`` / ``step`` (``reward`` and ``done`` are lifted to the top
    level of the wire format by OpenEnv)."""

    task_id: str = Field(description="task of the episode")
    step: int = Field(0, ge=0, description="control windows played so far")
    features: list[float] = Field(default_factory=list,
                                  description="the Gymnasium observation vector (normalised, O(1))")
    feature_names: list[str] = Field(default_factory=list, description="name of each feature")
    raw: dict[str, float] = Field(default_factory=dict,
                                  description="raw metrics of the last window (seconds, tokens, USD)")
    reward_components: dict[str, float] = Field(default_factory=dict,
                                                description="reward/<name> components of the last window")
    action: dict[str, Any] | None = Field(None, description="the serving configuration just applied")
    truncated: bool = Field(False, description="episode ended by the time limit")
    grade: float | None = Field(None, description="grader score in [0, 1] once the episode is over")
    grade_breakdown: dict[str, Any] | None = Field(None, description="grader components")


class InferenceGymState(State):
    """Episode bookkeeping (``GET /state``)."""

    task_id: str = DEFAULT_TASK_ID
    seed: int | None = None
    done: bool = False
    total_reward: float = 0.0
    max_steps: int | None = None


def _float_or_none(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f and f not in (float("inf"), float("-inf")) else None


def split_info(info: dict[str, Any] | None) -> tuple[dict[str, float], dict[str, float]]:
    """``info`` -> (raw metrics ``sim/<key>`` without the prefix, reward components ``reward/<name>``).

    Everything else is left out on purpose: ``oracle/*`` is the hidden workload phase that only the
    clairvoyant reference may see, ``grade/*`` is reported separately at the end. Non-finite and
    non-numeric values are dropped (JSON has no NaN)."""
    raw: dict[str, float] = {}
    comps: dict[str, float] = {}
    if not isinstance(info, dict):
        return raw, comps
    for k, v in info.items():
        if not isinstance(k, str) or isinstance(v, (dict, list, str)):
            continue
        if k.startswith("reward/"):
            f = _float_or_none(v)
            if f is not None:
                comps[k[len("reward/"):]] = f
        elif k.startswith("sim/"):
            f = _float_or_none(v)
            if f is not None:
                raw[k[len("sim/"):]] = f
    return raw, comps


def _feature_names(env: Any, n: int) -> list[str]:
    for holder in (env, getattr(env, "unwrapped", None)):
        names = getattr(holder, "feature_names", None) or getattr(holder, "FEATURE_NAMES", None)
        if names is not None and len(names) == n:
            return [str(x) for x in names]
    try:
        names = getattr(serve_env, "OBS_FEATURES", None) or getattr(serve_env, "FEATURE_NAMES", None)
        if names is not None and len(names) == n:
            return [str(x) for x in names]
    except ImportError:
        pass
    return [f"f{i}" for i in range(n)]


def _as_list(obs: Any) -> list[float]:
    import numpy as np

    if isinstance(obs, dict):
        return [float(x) for k in sorted(obs) for x in np.asarray(obs[k], dtype=float).ravel()]
    return [float(x) for x in np.asarray(obs, dtype=float).ravel()]


def make_gym_env(task_id: str):
    """The real single-agent env of ``task_id`` (raises ValueError listing valid tasks)."""
    import gymnasium

    spec = get_task(task_id)
    if getattr(spec, "kind", "single") != "single":
        raise ValueError(f"task {task_id!r} is a {spec.kind} task; the OpenEnv server serves the "
                         f"single-agent tasks: {', '.join(single_task_ids())}")
    return gymnasium.make("InferenceGym/LLMServe-v0", task_id=task_id)


def single_task_ids() -> list[str]:
    return [t.task_id for t in list_tasks(kind="single")]


class InferenceGymEnvironment(Environment):
    """OpenEnv ``Environment`` over ``InferenceGym/LLMServe-v0``; one instance = one episode at a time.

    ``reset(seed=None, episode_id=None, task_id=None)``: a new episode of ``task_id`` (default: the
    current task, initially ``static_workload``). Without a seed one is drawn and reported in the
    state, so every episode can be replayed exactly.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, task_id: str = DEFAULT_TASK_ID) -> None:
        super().__init__()
        self._task_id = task_id
        self._env = None
        self._state = InferenceGymState(task_id=task_id)
        self._started = False
        self._last_obs: Any = None
        self._last_info: dict[str, Any] = {}
        self._names: list[str] | None = None

    # -- OpenEnv Task API (TaskProvider protocol): one split "test" holding the single-agent tasks
    def list_splits(self) -> list[dict[str, str]]:
        return [{"name": TASK_SPLIT, "type": "test"}]

    def _split_tasks(self, split: str) -> list[dict[str, Any]]:
        if split != TASK_SPLIT:
            # the SDK maps IndexError to 400 (anything else would be a 500)
            raise IndexError(f"unknown split {split!r}; valid: {TASK_SPLIT!r}")

        return [{"id": t.task_id, "index": i, "difficulty": t.difficulty, "description": t.description}
                for i, t in enumerate(list_tasks(kind="single"))]

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        return self._split_tasks(split)

    def num_tasks(self, split: str) -> int:
        return len(self._split_tasks(split))

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        tasks = self._split_tasks(split)
        if not 0 <= index < len(tasks):
            raise IndexError(f"task index must be in 0..{len(tasks) - 1}, got {index}")
        return tasks[index]

    def get_task_range(self, split: str, start: int | None = None,
                       stop: int | None = None) -> list[dict[str, Any]]:
        tasks = self._split_tasks(split)
        start = 0 if start is None else start
        stop = len(tasks) if stop is None else stop
        if start < 0 or stop < start:
            raise IndexError(f"need 0 <= start <= stop, got start={start}, stop={stop}")
        return tasks[start:stop]

    # ------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, episode_id: str | None = None,
              task_id: str | None = None, split: str | None = None, index: int | None = None,
              **kwargs: Any) -> InferenceGymObservation:
        if index is not None:  # OpenEnv Task API selection: reset(split=..., index=...)
            try:
                chosen = self.get_task(split or TASK_SPLIT, int(index))["id"]
            except IndexError as exc:
                raise ValueError(str(exc)) from None
            if task_id is not None and task_id != chosen:
                raise ValueError(f"task_id {task_id!r} contradicts split/index ({chosen!r})")
            task_id = chosen
        task_id = task_id or self._task_id
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
        if self._env is None or task_id != self._task_id:
            new_env = make_gym_env(task_id)  # may raise ValueError: leave the old env untouched
            if self._env is not None:
                self._env.close()
            self._env, self._task_id, self._names = new_env, task_id, None
        if seed is None:
            seed = secrets.randbits(31)
        obs, info = self._env.reset(seed=seed)
        self._started = True
        self._last_obs, self._last_info = obs, dict(info or {})
        self._state = InferenceGymState(
            episode_id=episode_id or str(uuid.uuid4()), step_count=0, task_id=task_id, seed=seed,
            done=False, total_reward=0.0, max_steps=self._max_steps())
        return self._observation(obs, info, reward=None, done=False, truncated=False, action=None)

    def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> InferenceGymObservation:
        if not self._started or self._env is None:
            raise NotResetError("call reset before step")
        if self._state.done:
            raise EpisodeOverError(f"the episode is over after {self._state.step_count} steps; "
                                   f"call reset to start a new one")
        serve_action = to_serve_action(action)  # InvalidActionError before touching the env
        obs, reward, terminated, truncated, info = self._env.step(serve_action)
        done = bool(terminated or truncated)
        self._last_obs, self._last_info = obs, dict(info or {})
        self._state.step_count += 1
        self._state.total_reward += float(reward)
        self._state.done = done
        return self._observation(obs, info, reward=float(reward), done=done, truncated=bool(truncated),
                                 action=serve_action.model_dump())

    @property
    def state(self) -> InferenceGymState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="InferenceGym",
            description="Serving-configuration control of an LLM inference cluster on a calibrated "
                        "discrete-event simulator: one step = one control window; tasks "
                        "static_workload, bursty_workload, adversarial_multitenant.",
            version=__version__,
            documentation_url="docs/openenv.md",
        )

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

    # ------------------------------------------------------------------------------------
    @property
    def task_id(self) -> str:
        return self._task_id

    @property
    def last_obs(self) -> Any:
        return self._last_obs

    @property
    def last_info(self) -> dict[str, Any]:
        return self._last_info

    def episode_log(self):
        """The real env's :class:`EpisodeLog` of the current episode."""
        if not self._started or self._env is None:
            raise NotResetError("no episode yet: call reset first")
        return self._env.unwrapped.episode_log()

    def grade(self):
        """Grade the current episode so far (the full episode once it is over)."""
        return grade(self._task_id, self.episode_log())

    def _max_steps(self) -> int | None:
        try:
            return int(get_task(self._task_id).episode_windows)
        except Exception:
            return None

    def _observation(self, obs: Any, info: Any, *, reward: float | None, done: bool,
                     truncated: bool, action: dict | None) -> InferenceGymObservation:
        feats = _as_list(obs)
        if self._names is None or len(self._names) != len(feats):
            self._names = _feature_names(self._env, len(feats))
        raw, comps = split_info(info)
        g = breakdown = None
        if done:
            result = self.grade()
            g = float(result)
            breakdown = result.model_dump() if hasattr(result, "model_dump") else None
        return InferenceGymObservation(
            task_id=self._task_id, step=self._state.step_count, features=feats,
            feature_names=list(self._names), raw=raw, reward_components=comps, action=action,
            truncated=truncated, grade=g, grade_breakdown=breakdown, reward=reward, done=done)


__all__ = ["InferenceGymAction", "InferenceGymObservation", "InferenceGymState",
           "InferenceGymEnvironment", "InvalidActionError", "EpisodeOverError", "NotResetError",
           "to_serve_action", "split_info", "make_gym_env", "single_task_ids", "DEFAULT_TASK_ID",
           "ENV_NAME"]
