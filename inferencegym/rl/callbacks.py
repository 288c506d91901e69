"""RLlib callbacks for training: curriculum, tail metrics, safety monitors, grader score.

``InferenceGymCallbacks`` is configured through ``RLlibCallback`` subclassing by
:func:`make_callbacks_class` (RLlib instantiates the class itself, with no arguments, on every
EnvRunner and in the driver, so the settings are bound into the class).

Metrics (all per episode, windowed means in ``result["env_runners"]``):

- every numeric entry of an agent's final ``info`` whose key starts with ``grade/``, ``slo/``,
  ``cluster/``, ``episode/`` or ``tenant`` is logged under the same name;
- :func:`episode_summary`: the single-agent env's ``episode_metrics()`` (``episode/ttft_p99_s``,
  ``episode/tbt_p99_s``, ``episode/e2e_p99_s``, throughput, cost) or, for the cluster env, the grader
  on ``episode_log()`` (``grade/*``) and its ``cluster/*`` report (p50/p90/p99 TTFT, TBT, E2E,
  throughput, load imbalance, SLO attainment per tenant);
- ``grade/score``: the task grader on the episode;
- ``safety/runaway_queue`` and ``safety/latency_over_slo``: 1 when the episode ever had a queue above
  ``queue_limit`` or a latency above ``latency_factor`` x SLO (their mean is the share of episodes;
  ``safety/*_episodes`` adds them up over the run);
- ``curriculum/stage``, ``curriculum/load_scale``, ``curriculum/burst_scale``.

Curriculum: the driver keeps the stage; when the windowed mean of ``metric`` passes the stage's
threshold (after ``min_episodes`` episodes in the stage) it moves to the next stage and applies it
(:func:`set_env_curriculum`: the env's ``set_curriculum(load_scale=, burst_scale=)`` hook) to every
env of every EnvRunner through ``foreach_env_runner``; it re-applies the stage in
``on_env_runners_recreated`` (a restarted runner has lost it). The stage and the episodes counted in
it are also logged every iteration to the Algorithm's MetricsLogger (``STAGE_KEY``,
``EPISODES_KEY``, ``reduce="item"``), which RLlib checkpoints with the Algorithm; after a restore
(Tune resume -> ``Algorithm.load_checkpoint``) ``on_checkpoint_loaded`` reads them back and
re-applies the stage to every runner.
"""

from __future__ import annotations

import math
from numbers import Number
from typing import Any

from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.utils.annotations import override

from inferencegym.rl.config import CurriculumSettings, SafetySettings
from inferencegym.tasks.cluster_grading import grade_cluster

METRIC_PREFIXES = ("grade/", "slo/", "tenant", "cluster/", "episode/")
WINDOW = 50
STAGE_KEY = "curriculum/stage"
"""MetricsLogger key of the curriculum stage (checkpointed with the Algorithm's metrics)."""
EPISODES_KEY = "curriculum/episodes_in_stage"
"""MetricsLogger key of the episodes counted in the current stage."""


def iter_sub_envs(env_runner: Any) -> list[Any]:
    """The unwrapped sub-envs of an EnvRunner (single- or multi-agent, vectorised or not).

    The driver's local EnvRunner has no env when remote runners exist: returns []."""
    env = getattr(env_runner, "env", None)
    if env is None:
        return []
    for cand in (env, getattr(env, "unwrapped", None)):
        subs = getattr(cand, "envs", None)
        if subs is not None:
            return [getattr(e, "unwrapped", e) for e in subs]
    return [getattr(env, "unwrapped", env)]


def _find_hook(env: Any, name: str) -> Any:
    """``env.<name>`` searched through wrapper chains (``.env``) and the unwrapped env."""
    seen = 0
    cur = env
    while cur is not None and seen < 20:
        fn = getattr(cur, name, None)
        if callable(fn):
            return fn
        cur = getattr(cur, "env", None)
        seen += 1
    fn = getattr(getattr(env, "unwrapped", None), name, None)
    return fn if callable(fn) else None


def set_env_curriculum(env: Any, load_scale: float, burst_scale: float) -> None:
    """Curriculum on one env: calls its ``set_curriculum(load_scale=, burst_scale=)`` hook (found
    through wrapper chains); the new intensity applies from the env's next ``reset()``.

    An env without the hook raises AttributeError (InferenceGym's ``LLMServeEnv`` and ``ClusterEnv``
    have it; for another env, implement it or set ``curriculum.enabled: false``)."""
    fn = _find_hook(env, "set_curriculum")
    if fn is None:
        raise AttributeError(
            f"curriculum is enabled but env {type(env).__name__} has no "
            "set_curriculum(load_scale=, burst_scale=) method (InferenceGym's LLMServeEnv and ClusterEnv "
            "have one); implement it on the env or disable the curriculum "
            "(curriculum.enabled: false in the config, or --set curriculum.enabled=false)")
    fn(load_scale=float(load_scale), burst_scale=float(burst_scale))


def apply_curriculum(env_runner: Any, load_scale: float, burst_scale: float) -> int:
    """Set the curriculum on every env of ``env_runner``; returns how many envs took it."""
    n = 0
    for env in iter_sub_envs(env_runner):
        set_env_curriculum(env, load_scale, burst_scale)
        n += 1
    return n


def episode_summary(env: Any) -> dict[str, float]:
    """Whole-episode figures of a finished sub-env (unwrapped):

    - single-agent env: ``env.episode_metrics()`` as ``episode/<name>`` (p99 TTFT/TBT/E2E over the
      episode, throughput, cost); the grade comes from the final info;
    - cluster env: ``env.episode_log()`` (drains in-flight requests) graded by
      ``grade_cluster``: ``grade/*`` plus the log's ``cluster/*`` metrics (p50/p90/p99 TTFT, TBT,
      E2E, throughput, load imbalance, SLO attainment per tenant)."""
    out: dict[str, float] = {}
    em = getattr(env, "episode_metrics", None)
    if callable(em):
        for k, v in em().items():
            f = _numeric(v)
            if f is not None:
                out[f"episode/{k}"] = f
    elif callable(getattr(env, "episode_log", None)) and hasattr(env, "possible_agents"):
        log = env.episode_log()
        out.update({k: f for k, v in grade_cluster(env.task, log).breakdown().items()
                    if (f := _numeric(v)) is not None})
        out.update({k: f for k, v in (log.metrics or {}).items() if (f := _numeric(v)) is not None})
    return out


def _last_infos(episode: Any) -> list[dict]:
    """The final info dict of each agent of a Single- or MultiAgentEpisode."""
    agent_eps = getattr(episode, "agent_episodes", None)
    eps = list(agent_eps.values()) if agent_eps else [episode]
    out = []
    for ep in eps:
        try:
            info = ep.get_infos(-1)
        except (IndexError, KeyError, ValueError):
            continue
        if isinstance(info, dict):
            out.append(info)
    return out


def _step_infos(episode: Any) -> list[dict]:
    """Infos of the latest step (the agents that acted in it)."""
    return _last_infos(episode)


def _numeric(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, Number):
        f = float(v)
        return f if math.isfinite(f) else None
    try:  # numpy scalars / 0-d arrays
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def episode_metrics(infos: list[dict]) -> dict[str, float]:
    """Namespaced numeric metrics from the agents' final infos (first agent that has a key wins)."""
    out: dict[str, float] = {}
    for info in infos:
        for k, v in info.items():
            if k in out or not isinstance(k, str) or not k.startswith(METRIC_PREFIXES):
                continue
            f = _numeric(v)
            if f is not None:
                out[k] = f
    return out


def task_ttft_slo_s(env: Any) -> float | None:
    """The tightest TTFT SLO of an (unwrapped) env's task, if it has one."""
    task = getattr(getattr(env, "unwrapped", env), "task", None)
    tenants = getattr(task, "tenants", None)
    if not tenants:
        return None
    return float(min(t.ttft_slo_s for t in tenants))


def safety_flags(info: dict, s: SafetySettings, slo_s: float | None = None) -> tuple[bool, bool]:
    """(runaway queue, latency beyond latency_factor x SLO) for one step's info.

    The SLO is ``info[s.slo_key]`` if present, else ``slo_s`` (the task's tightest TTFT SLO)."""
    q = _numeric(info.get(s.queue_key))
    lat = _numeric(info.get(s.latency_key))
    slo = _numeric(info.get(s.slo_key))
    if slo is None:
        slo = slo_s
    runaway = q is not None and q > s.queue_limit
    late = lat is not None and slo is not None and slo > 0 and lat > s.latency_factor * slo
    return runaway, late


def _sub_env(env: Any, env_index: int | None) -> Any:
    subs = getattr(env, "envs", None)
    if subs is None:
        subs = getattr(getattr(env, "unwrapped", None), "envs", None)
    target = subs[env_index] if subs is not None and env_index is not None and env_index < len(subs) else env
    return getattr(target, "unwrapped", target)


class InferenceGymCallbacks(RLlibCallback):
    """Curriculum + tail metrics + safety monitors + grade (see module docstring)."""

    curriculum: CurriculumSettings = CurriculumSettings()
    safety: SafetySettings = SafetySettings()

    def __init__(self) -> None:
        super().__init__()
        self.stage = 0
        self.episodes_in_stage = 0
        self.safety_totals = {"runaway_queue": 0.0, "latency_over_slo": 0.0}

    # -- curriculum (driver side) ------------------------------------------------------------
    def _scales(self) -> tuple[float, float]:
        c = self.curriculum
        return c.load_scale[self.stage], c.burst_scale[self.stage]

    def _apply_all(self, algorithm: Any, remote_ids: list[int] | None = None) -> list:
        load, burst = self._scales()
        group = algorithm.env_runner_group
        if group is None:
            return []
        kwargs: dict[str, Any] = {"local_env_runner": remote_ids is None}
        if remote_ids is not None:
            kwargs["remote_worker_ids"] = remote_ids
        return group.foreach_env_runner(lambda er: apply_curriculum(er, load, burst), **kwargs)

    @override(RLlibCallback)
    def on_algorithm_init(self, *, algorithm: Any, metrics_logger: Any = None, **kwargs: Any) -> None:
        if self.curriculum.enabled:
            self._apply_all(algorithm)

    def _save_stage(self, metrics_logger: Any) -> None:
        """Log the stage to the Algorithm's MetricsLogger, which RLlib checkpoints (``"item"``: the
        last value, kept until the next iteration's reduce, i.e. across the checkpoint Tune takes
        after ``train()``)."""
        if metrics_logger is None:
            return
        metrics_logger.log_value(STAGE_KEY, int(self.stage), reduce="item")
        metrics_logger.log_value(EPISODES_KEY, int(self.episodes_in_stage), reduce="item")

    @override(RLlibCallback)
    def on_checkpoint_loaded(self, *, algorithm: Any, **kwargs: Any) -> None:
        """After a restore through ``Algorithm.load_checkpoint`` (what Tune's resume and
        ``Trainable.restore`` call; RLlib 2.60 does not fire this hook from ``restore_from_path`` or
        ``from_checkpoint``): read the stage back from the restored MetricsLogger and re-apply it to
        every env runner. A checkpoint without a stage (curriculum off when saved) gives stage 0; a
        stage beyond this config's stages is clamped to the last one."""
        if not self.curriculum.enabled:
            return
        metrics = getattr(algorithm, "metrics", None)
        stage = _numeric(metrics.peek(STAGE_KEY, default=0)) if metrics is not None else None
        if stage is None:
            return
        episodes = _numeric(metrics.peek(EPISODES_KEY, default=0)) or 0.0
        self.stage = min(max(int(stage), 0), len(self.curriculum.load_scale) - 1)
        self.episodes_in_stage = max(int(episodes), 0)
        self._save_stage(metrics)
        self._apply_all(algorithm)

    @override(RLlibCallback)
    def on_env_runners_recreated(self, *, algorithm: Any, env_runner_group: Any,
                                 env_runner_indices: list[int], is_evaluation: bool, **kwargs: Any) -> None:
        if self.curriculum.enabled and not is_evaluation:
            self._apply_all(algorithm, remote_ids=list(env_runner_indices))

    @override(RLlibCallback)
    def on_train_result(self, *, algorithm: Any, metrics_logger: Any = None, result: dict, **kwargs: Any) -> None:
        er = result.get("env_runners", {}) or {}
        for k in self.safety_totals:
            # NaN when no episode ended in this iteration (long cluster episodes): counts as 0
            self.safety_totals[k] += _numeric(er.get(f"safety/{k}_count")) or 0.0
            result[f"safety/{k}_episodes"] = self.safety_totals[k]
        c = self.curriculum
        if c.enabled:
            self.episodes_in_stage += int(_numeric(er.get("num_episodes")) or 0)
            value = _numeric(er.get(c.metric))
            if (self.stage < len(c.thresholds) and value is not None
                    and self.episodes_in_stage >= c.min_episodes and value >= c.thresholds[self.stage]):
                self.stage += 1
                self.episodes_in_stage = 0
                self._apply_all(algorithm)
        load, burst = self._scales() if c.enabled else (1.0, 1.0)
        if c.enabled:
            ml = metrics_logger if metrics_logger is not None else getattr(algorithm, "metrics", None)
            self._save_stage(ml)
            result[EPISODES_KEY] = self.episodes_in_stage
        result["curriculum/stage"] = self.stage
        result["curriculum/load_scale"] = load
        result["curriculum/burst_scale"] = burst

    # -- per-episode metrics (EnvRunner side) ---------------------------------------------------
    @override(RLlibCallback)
    def on_episode_step(self, *, episode: Any, env: Any = None, env_index: int | None = None,
                        **kwargs: Any) -> None:
        if not self.safety.enabled:
            return
        flags = episode.custom_data.setdefault("safety", [False, False])
        if "slo_s" not in episode.custom_data:
            episode.custom_data["slo_s"] = task_ttft_slo_s(_sub_env(env, env_index)) if env is not None else None
        for info in _step_infos(episode):
            r, l_ = safety_flags(info, self.safety, episode.custom_data["slo_s"])
            flags[0] = flags[0] or r
            flags[1] = flags[1] or l_

    @override(RLlibCallback)
    def on_episode_end(self, *, episode: Any, metrics_logger: Any = None, env: Any = None,
                       env_index: int | None = None, **kwargs: Any) -> None:
        if metrics_logger is None:
            return
        metrics = episode_metrics(_last_infos(episode))
        if env is not None:
            for k, v in episode_summary(_sub_env(env, env_index)).items():
                metrics.setdefault(k, v)
        for k, v in metrics.items():
            metrics_logger.log_value(k, v, reduce="mean", window=WINDOW)
        if self.safety.enabled:
            runaway, late = episode.custom_data.get("safety", [False, False])
            # the cluster env reports latency per episode: p99 TTFT over the episode vs the SLO
            slo = episode.custom_data.get("slo_s")
            p99 = metrics.get("cluster/ttft_p99_s")
            if p99 is not None and slo:
                late = late or p99 > self.safety.latency_factor * slo
            metrics_logger.log_value("safety/runaway_queue", float(runaway), reduce="mean", window=WINDOW)
            metrics_logger.log_value("safety/latency_over_slo", float(late), reduce="mean", window=WINDOW)
            metrics_logger.log_value("safety/runaway_queue_count", float(runaway), reduce="sum")
            metrics_logger.log_value("safety/latency_over_slo_count", float(late), reduce="sum")


def make_callbacks_class(curriculum: CurriculumSettings, safety: SafetySettings) -> type[InferenceGymCallbacks]:
    """A subclass of :class:`InferenceGymCallbacks` with the given settings bound (picklable by value
    through Ray's cloudpickle, since it is created at runtime)."""
    return type("BoundInferenceGymCallbacks", (InferenceGymCallbacks,),
                {"curriculum": curriculum, "safety": safety, "__module__": __name__})
