"""Curriculum hook: ``TaskSpec.scaled``, ``set_curriculum`` on both envs, the callback's use of it and
the stage's persistence through the Algorithm's MetricsLogger (unit level; the real RLlib
save/restore round trip is in tests/rl/test_rl_train.py)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from inferencegym.envs.cluster_env import ClusterEnv
from inferencegym.envs.serve_env import LLMServeEnv, nominal_rates
from inferencegym.tasks.spec import get_task

BAD_SCALES = [0.0, -1.0, math.nan, math.inf, -math.inf, "x", None, True]


# ------------------------------------------------------------------------------ TaskSpec.scaled
def test_scaled_task_maths():
    t = get_task("adversarial_multitenant")  # has rate, mega-prompts
    b = get_task("bursty_workload")          # has a burst rate
    s = t.scaled(load_scale=0.5, burst_scale=2.0)
    assert s.workload.rate_rps == pytest.approx(t.workload.rate_rps * 0.5)
    assert s.workload.mega_prompt_rate_per_s == pytest.approx(t.workload.mega_prompt_rate_per_s * 2.0)
    sb = b.scaled(load_scale=0.5, burst_scale=3.0)
    assert sb.workload.rate_rps == pytest.approx(b.workload.rate_rps * 0.5)
    assert sb.workload.burst_rate_rps == pytest.approx(b.workload.burst_rate_rps * 0.5 * 3.0)
    # nothing else changes
    assert s.tenants == t.tenants and s.grader == t.grader and s.task_id == t.task_id
    assert s.workload.amplitude == t.workload.amplitude and s.episode_windows == t.episode_windows
    assert t.scaled(load_scale=1.0, burst_scale=1.0) is t
    # stages do not compound: always from the base spec
    assert b.scaled(load_scale=0.5, burst_scale=1.0).workload.rate_rps == pytest.approx(0.5 * b.workload.rate_rps)


@pytest.mark.parametrize("bad", BAD_SCALES)
@pytest.mark.parametrize("arg", ["load_scale", "burst_scale"])
def test_scaled_rejects_bad_values(arg, bad):
    t = get_task("static_workload")
    kw = {"load_scale": 1.0, "burst_scale": 1.0, arg: bad}
    with pytest.raises(ValueError) as e:
        t.scaled(**kw)
    msg = str(e.value)  # names the argument, the value given and the valid range
    assert msg.startswith(f"{arg} must be a finite number > 0") and msg.endswith(f"got {bad!r}")
    assert f"0 < {arg} < inf" in msg


# ------------------------------------------------------------------------------ the single-agent env
def _serve(**kw) -> LLMServeEnv:
    return LLMServeEnv("static_workload", **kw)


def _serve_rollout(env: LLMServeEnv, seed: int, steps: int) -> list:
    obs, info = env.reset(seed=seed)
    out = [(obs.tobytes(), sorted((k, repr(v)) for k, v in info.items()))]
    for i in range(steps):
        action = {"batch_cap": 8 + 8 * (i % 4), "kv_budget_fraction": 0.9, "speculation_depth": i % 3,
                  "quantization_tier": "FP16", "prefill_decode_split": False, "priority_routing": False}
        obs, r, term, trunc, info = env.step(action)
        out.append((obs.tobytes(), r, term, trunc, sorted((k, repr(v)) for k, v in info.items())))
    return out


def test_serve_env_hook_scales_next_episode_only():
    env = _serve()
    assert env.curriculum == (1.0, 1.0)
    base_task = env.task
    env.reset(seed=3)
    n_base = env._wl.arrival_s.size  # the episode's generated workload (internal)
    env.set_curriculum(load_scale=0.5, burst_scale=1.0)
    assert env.curriculum == (0.5, 1.0)
    assert env._wl.arrival_s.size == n_base  # the running episode is untouched
    env.reset(seed=3)
    n_half = env._wl.arrival_s.size
    assert 0.4 < n_half / n_base < 0.6, (n_half, n_base)  # ~3 rps x 200 s = ~600 -> ~300
    # the base task stays: graders, SLOs and observation normalisation
    assert env.task is base_task
    assert (env._nominal_rate, env._nominal_tok) == nominal_rates(base_task)
    obs, _, _, _, info = env.step({"batch_cap": 32})
    i = 11  # arrival_rate feature = arrivals / the BASE nominal rate
    assert obs[i] == pytest.approx(info["sim/arrival_rate_rps"] / nominal_rates(base_task)[0], rel=1e-6)
    with pytest.raises(AttributeError):
        env.curriculum = (2.0, 2.0)  # read-only


def test_serve_env_hook_rejects_bad_values_state_unchanged():
    env = _serve(episode_windows=3)
    env.set_curriculum(load_scale=0.7, burst_scale=1.5)
    ref = _serve_rollout(env, 5, 3)
    for bad in BAD_SCALES:
        with pytest.raises(ValueError, match="load_scale"):
            env.set_curriculum(load_scale=bad)
        with pytest.raises(ValueError, match="burst_scale"):
            env.set_curriculum(load_scale=0.7, burst_scale=bad)
        assert env.curriculum == (0.7, 1.5)
    assert _serve_rollout(env, 5, 3) == ref


def test_serve_env_identity_scales_bit_identical_and_scaled_deterministic():
    plain = _serve(episode_windows=8)
    hooked = _serve(episode_windows=8)
    hooked.set_curriculum(load_scale=0.5, burst_scale=2.0)
    scaled_a = _serve_rollout(hooked, 11, 8)
    hooked.set_curriculum(load_scale=1.0, burst_scale=1.0)
    assert _serve_rollout(hooked, 11, 8) == _serve_rollout(plain, 11, 8)
    other = _serve(episode_windows=8)
    other.set_curriculum(load_scale=0.5, burst_scale=2.0)
    assert _serve_rollout(other, 11, 8) == scaled_a  # same seed + same scales -> same episode
    assert scaled_a != _serve_rollout(plain, 11, 8)


def _on_phase_rate(wl, window_s: float) -> float:
    """Arrivals per second in the windows whose hidden phase is ON."""
    counts = np.diff(wl.window_start_idx)
    on = np.asarray(wl.phase) == 1
    return float(counts[on].sum() / (on.sum() * window_s))


def test_serve_env_burst_scale_raises_on_phase_arrivals():
    env = LLMServeEnv("bursty_workload")
    env.reset(seed=2)
    base_on = _on_phase_rate(env._wl, env.task.window_s)  # ~6 req/s
    env.set_curriculum(load_scale=1.0, burst_scale=2.0)
    env.reset(seed=2)
    assert 1.6 < _on_phase_rate(env._wl, env.task.window_s) / base_on < 2.4


# ------------------------------------------------------------------------------ the cluster env
def _cluster(**kw) -> ClusterEnv:
    return ClusterEnv({"task_id": "cluster_routing", **kw})


def _cluster_rollout(env: ClusterEnv, seed: int, steps: int) -> list:
    obs, infos = env.reset(seed=seed)
    out = []

    def feed(obs, rew=None):
        for aid in sorted(obs):
            o = obs[aid]
            out.append((aid, tuple(np.asarray(o[k]).tobytes() for k in sorted(o)) if isinstance(o, dict)
                        else np.asarray(o).tobytes()))
        out.append(sorted((rew or {}).items()))

    feed(obs)
    for _ in range(steps):
        act = {}
        for aid, o in obs.items():
            if aid == "router" and env.pending_request is not None:
                act[aid] = int(np.flatnonzero(o["action_mask"] > 0.5)[0])
            elif aid != "router":
                act[aid] = np.array([1, 2, 0, 1])
        obs, rew, term, trunc, infos = env.step(act)
        feed(obs, rew)
        if trunc["__all__"]:
            break
    return out


def test_cluster_env_hook_scales_next_episode_requests():
    env = _cluster()
    base_task = env.task
    env.reset(seed=4)
    n_base = len(env.requests)
    env.set_curriculum(load_scale=0.5, burst_scale=1.0)
    assert env.curriculum == (0.5, 1.0) and len(env.requests) == n_base
    env.reset(seed=4)
    assert 0.4 < len(env.requests) / n_base < 0.6, (len(env.requests), n_base)
    assert env.task is base_task  # grader (episode_log) and normalisation keep the base task


def test_cluster_env_scales_the_workload_built_from_load_fraction(monkeypatch):
    import inferencegym.envs.cluster_env as ce

    env = ClusterEnv({"task_id": "cluster_bursty_multitenant", "num_replicas": 2})
    w = env.task.workload  # rates derived from load_fraction x the capacity of 2 replicas
    seen = []
    real = ce.build_requests
    monkeypatch.setattr(ce, "build_requests", lambda task, d, rng: seen.append(task) or real(task, d, rng))
    env.set_curriculum(load_scale=0.5, burst_scale=2.0)
    env.reset(seed=1)
    used = seen[-1].workload
    assert used.rate_rps == pytest.approx(w.rate_rps * 0.5)
    assert used.burst_rate_rps == pytest.approx(w.burst_rate_rps * 0.5 * 2.0)
    assert used.mega_prompt_rate_per_s == pytest.approx(w.mega_prompt_rate_per_s * 2.0)
    assert env.task.workload == w  # the env's task (grader, normalisation) keeps the base rates


def test_cluster_env_hook_bad_values_and_identity():
    plain = _cluster(episode_windows=2)
    hooked = _cluster(episode_windows=2)
    for bad in BAD_SCALES:
        with pytest.raises(ValueError, match="load_scale"):
            hooked.set_curriculum(load_scale=bad)
        assert hooked.curriculum == (1.0, 1.0)
    hooked.set_curriculum(load_scale=0.6, burst_scale=2.0)
    scaled = _cluster_rollout(hooked, 9, 60)
    other = _cluster(episode_windows=2)
    other.set_curriculum(load_scale=0.6, burst_scale=2.0)
    assert _cluster_rollout(other, 9, 60) == scaled
    hooked.set_curriculum(load_scale=1.0, burst_scale=1.0)
    ref = _cluster_rollout(plain, 9, 60)
    assert _cluster_rollout(hooked, 9, 60) == ref
    assert scaled != ref


# ------------------------------------------------------------------------------ callbacks
def test_set_env_curriculum_goes_through_wrappers_and_rejects_envs_without_hook():
    import gymnasium as gym

    from inferencegym.envs.actions import FlatActionWrapper
    from inferencegym.rl.callbacks import apply_curriculum, set_env_curriculum

    wrapped = gym.wrappers.TimeLimit(FlatActionWrapper(_serve(episode_windows=2)), 2)
    set_env_curriculum(wrapped, 0.5, 2.0)
    assert wrapped.unwrapped.curriculum == (0.5, 2.0)
    cl = _cluster(episode_windows=2)
    runner = SimpleNamespace(env=SimpleNamespace(envs=[wrapped, cl]))
    assert apply_curriculum(runner, 0.8, 1.5) == 2
    assert wrapped.unwrapped.curriculum == (0.8, 1.5) and cl.curriculum == (0.8, 1.5)
    assert apply_curriculum(SimpleNamespace(env=None), 1.0, 1.0) == 0  # driver runner without env
    with pytest.raises(AttributeError, match=r"object has no set_curriculum.*disable the curriculum"):
        set_env_curriculum(object(), 1.0, 1.0)
    # an env with only a task is no longer silently rescaled
    with pytest.raises(AttributeError, match="curriculum.enabled: false"):
        set_env_curriculum(SimpleNamespace(task=get_task("static_workload")), 0.5, 1.0)
    with pytest.raises(ValueError, match="load_scale"):
        set_env_curriculum(cl, 0.0, 1.0)


def _callbacks(**settings):
    from inferencegym.rl.callbacks import make_callbacks_class
    from inferencegym.rl.config import CurriculumSettings, SafetySettings

    cur = CurriculumSettings(**{"enabled": True, "thresholds": [0.0, 0.0], "min_episodes": 1,
                                "load_scale": [0.5, 0.75, 1.0], "burst_scale": [1.0, 1.5, 2.0], **settings})
    return make_callbacks_class(cur, SafetySettings())()


def _fake_algorithm(metrics, envs):
    runner = SimpleNamespace(env=SimpleNamespace(envs=envs))
    group = SimpleNamespace(foreach_env_runner=lambda fn, **kw: [fn(runner)])
    return SimpleNamespace(metrics=metrics, env_runner_group=group)


def test_stage_survives_metrics_logger_checkpoint():
    from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

    cb = _callbacks()
    loads, bursts = cb.curriculum.load_scale, cb.curriculum.burst_scale
    metrics = MetricsLogger(root=True)
    env = _cluster(episode_windows=2)
    algo = _fake_algorithm(metrics, [env])
    cb.on_algorithm_init(algorithm=algo, metrics_logger=metrics)
    assert env.curriculum == (loads[0], bursts[0])
    result = {"env_runners": {"num_episodes": 3, "grade/score": 0.5}}
    cb.on_train_result(algorithm=algo, metrics_logger=metrics, result=result)
    assert cb.stage == 1 and result["curriculum/stage"] == 1 and env.curriculum == (loads[1], bursts[1])
    cb.on_train_result(algorithm=algo, metrics_logger=metrics,
                       result={"env_runners": {"num_episodes": 0, "grade/score": float("nan")}})
    state = metrics.get_state()  # what Algorithm.get_state() checkpoints (COMPONENT_METRICS_LOGGER)

    # a fresh driver (resumed trial): new callback object, new envs, metrics restored by set_state
    cb2 = _callbacks()
    env2 = _cluster(episode_windows=2)
    metrics2 = MetricsLogger(root=True)
    algo2 = _fake_algorithm(metrics2, [env2])
    cb2.on_algorithm_init(algorithm=algo2, metrics_logger=metrics2)
    assert cb2.stage == 0 and env2.curriculum == (loads[0], bursts[0])
    metrics2.set_state(state)
    cb2.on_checkpoint_loaded(algorithm=algo2)
    assert cb2.stage == 1 and cb2.episodes_in_stage == 0
    assert env2.curriculum == (loads[1], bursts[1])
    # counting continues from the restored stage: next threshold passed -> stage 2
    cb2.on_train_result(algorithm=algo2, metrics_logger=metrics2,
                        result={"env_runners": {"num_episodes": 2, "grade/score": 0.1}})
    assert cb2.stage == 2 and env2.curriculum == (loads[2], bursts[2])

    # a checkpoint without a stage (curriculum was off) keeps stage 0
    cb3 = _callbacks()
    cb3.on_checkpoint_loaded(algorithm=_fake_algorithm(MetricsLogger(root=True), [_cluster()]))
    assert cb3.stage == 0


def test_restored_stage_is_clamped_to_the_configured_stages():
    from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

    from inferencegym.rl.callbacks import STAGE_KEY

    metrics = MetricsLogger(root=True)
    metrics.log_value(STAGE_KEY, 7, reduce="item")
    cb = _callbacks(load_scale=[0.5, 1.0], burst_scale=[1.0, 1.0], thresholds=[0.3])
    env = _cluster(episode_windows=2)
    cb.on_checkpoint_loaded(algorithm=_fake_algorithm(metrics, [env]))
    assert cb.stage == 1 and env.curriculum == (1.0, 1.0)


def test_iteration_without_finished_episodes_is_not_an_error():
    """Long cluster episodes: an iteration may end no episode, and RLlib then reports NaN counts."""
    from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

    cb = _callbacks(min_episodes=2)
    metrics = MetricsLogger(root=True)
    env = _cluster(episode_windows=2)
    algo = _fake_algorithm(metrics, [env])
    nan = float("nan")
    result = {"env_runners": {"num_episodes": nan, "grade/score": nan,
                              "safety/runaway_queue_count": nan, "safety/latency_over_slo_count": nan}}
    cb.on_train_result(algorithm=algo, metrics_logger=metrics, result=result)
    assert cb.stage == 0 and cb.episodes_in_stage == 0
    assert result["safety/runaway_queue_episodes"] == 0.0 and result["safety/latency_over_slo_episodes"] == 0.0
    cb.on_train_result(algorithm=algo, metrics_logger=metrics,
                       result={"env_runners": {"num_episodes": 2, "grade/score": 0.5,
                                               "safety/runaway_queue_count": 1.0}})
    assert cb.stage == 1 and cb.safety_totals["runaway_queue"] == 1.0
