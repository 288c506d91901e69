"""Observation features of a control-plane agent (the learned autoscaler; ``ControlEnv``).

Computed from what any controller may read (``ControlObs``: the fleet's scrape and its per-tick
history) and what it knows before the episode (``ControlContext``: the measured capacity, the
start-up delay, the training days' time-of-day profile). Nothing about future arrivals.

* ``BASE_NAMES`` (the ``base`` feature set): what the production controllers read, plus time of day.
* ``HISTORY_NAMES`` (appended by the ``history`` feature set): arrival rate per minute over the last
  five minutes, over the last source window and the last four; the training profile now, one
  start-up delay ahead and over the next two windows; and today's level against the profile (the
  ratio of the last four windows' arrivals to what the profile predicted for them).
* ``SCHEDULE_NAMES`` (appended by the ``schedule`` feature set, on top of ``history``): exactly what
  the best rule ``scheduled`` computes from the same training-day profile (its target replica count,
  a fraction of ``max_replicas``), and that profile corrected by today's level (the peak of the profile
  from now to one start-up delay ahead, times ``level_vs_profile``, over the capacity of the full
  fleet at 95 % utilisation): the learner gets every observable input the rule has, plus the
  level it does not use.
* ``transfer`` (the learned autoscaler trained on several load files): ``schedule`` without the clock
  (``tod_sin``, ``tod_cos``: a clock lets a module memorise one file's daily shape) plus
  ``RELATIVE_NAMES``, ratios to the file's own training-day profile (``ControlContext.profile_rps``),
  so the features mean the same on any windows file; its queue and running-load readings are
  bounded (``TRANSFER_CLIP``).
Rates are fractions of the full fleet's capacity (``max_replicas * capacity_rps``).
"""

from __future__ import annotations

import math

import numpy as np

from inferencegym.sim.fleet import ControlObs
from inferencegym.tasks.control import WINDOWS_PER_DAY, ControlContext

BASE_NAMES = ("ready_frac", "starting_frac", "draining_frac", "target_frac", "queue_mean_5", "queue_max_5",
              "kv_mean", "running_per_capacity", "rate_interval_frac", "rate_minute_frac", "tod_sin", "tod_cos")
HISTORY_NAMES = ("rate_m1", "rate_m2", "rate_m3", "rate_m4", "rate_m5", "rate_window", "rate_4_windows",
                 "profile_now", "profile_after_startup", "profile_next_2_windows", "level_vs_profile")
SCHEDULE_NAMES = ("scheduled_target_frac", "level_need_frac")
RELATIVE_NAMES = ("rate_window_vs_profile_now", "rate_minute_vs_profile_mean", "profile_now_vs_mean",
                  "profile_ahead_vs_now", "rate_trend")
"""Scale-free ratios of the ``transfer`` set: the last window's rate over the profile now, the last
minute's over the profile's mean, the profile now over its mean (where in the file's day we are,
instead of the clock), the profile's peak over the next two windows over the profile now, and the
last minute's rate over the last four windows' (each clipped to [0, 4]; 1 before any arrival)."""
TRANSFER_CLIP = {"queue_mean_5": 1.0, "queue_max_5": 1.0, "running_per_capacity": 1.5}
"""Upper bounds of the load readings in the ``transfer`` set: an overloaded fleet (a queue of hundreds)
reads as saturated (5 waiting per replica, 1.5x the concurrency at capacity) instead of as inputs far
outside anything the teacher's rollouts visited, where an MLP's output is arbitrary."""
RESIDUAL_NAMES = ("sched_target", "sched_peak", "profile_now", "profile_next_2_windows", "rate_m1", "rate_m2",
                  "rate_5m", "rate_max_minute_5m", "rate_window", "rate_4_windows", "level_vs_profile",
                  "rate_m1_vs_profile_now", "profile_now_vs_max", "history_fill")
"""The ``residual`` set (the residual autoscaler, ``rl/control_residual.py``): arrivals and the
training profile only, no fleet state, so the features of a day do not depend on the policy that
runs it (training by imitation has no covariate shift). Rates are in replicas (req/s over the
measured ``capacity_rps``): ``scheduled``'s target (``sched_target``, the base the learned correction
is added to) and its unrounded profile peak, the profile now and over the next two windows, the
last two minutes' rates, the last five minutes' mean and highest minute, the last window's and
four windows' rates; the four windows' level against the profile and the last minute's against
the profile now (clipped to [0, 4]), the profile now over its daily maximum (where in the file's
day we are, without a clock), and the fraction of four windows of history seen."""
_CLOCK = ("tod_sin", "tod_cos")
FEATURE_SETS = {"base": BASE_NAMES, "history": BASE_NAMES + HISTORY_NAMES,
                "schedule": BASE_NAMES + HISTORY_NAMES + SCHEDULE_NAMES,
                "transfer": tuple(n for n in BASE_NAMES + HISTORY_NAMES + SCHEDULE_NAMES if n not in _CLOCK)
                + RELATIVE_NAMES, "residual": RESIDUAL_NAMES}
SCHEDULED_HEADROOM = 0.10
"""``scheduled``'s headroom over the profile (``policies/autoscalers.py`` uses the same default)."""


def feature_set_of_size(n: int) -> str:
    """The feature set with ``n`` values (the sets' sizes differ: a served module's observation size
    names its set)."""
    sets = [k for k, v in FEATURE_SETS.items() if len(v) == n]
    if not sets:
        raise ValueError(f"no autoscaler feature set has {n} values; sizes: "
                         + ", ".join(f"{k} {len(v)}" for k, v in FEATURE_SETS.items()))
    return sets[0]


def feature_names(features: str) -> tuple[str, ...]:
    if features not in FEATURE_SETS:
        raise ValueError(f"unknown feature set {features!r}; valid: {', '.join(FEATURE_SETS)}")
    return FEATURE_SETS[features]


def _rate(arrivals: list, ticks: int, tick_s: float, skip: int = 0) -> float:
    """Mean arrival rate (req/s) over ``ticks`` ticks ending ``skip`` ticks ago (0 before any tick)."""
    end = len(arrivals) - skip
    seg = arrivals[max(0, end - ticks):max(0, end)]
    return sum(seg) / (len(seg) * tick_s) if seg else 0.0


def _profile_at(ctx: ControlContext, t_s: float) -> float:
    p = ctx.profile_rps
    if not p:
        return 0.0
    return float(p[min(len(p) - 1, max(0, int(t_s // ctx.window_s)))])


def _profile_peak(ctx: ControlContext, now_s: float) -> float:
    """The profile's highest window rate from ``now_s`` to one start-up delay ahead (``scheduled``'s rate)."""
    p = ctx.profile_rps
    if not p:
        return 0.0
    k0, k1 = int(now_s // ctx.window_s), int((now_s + ctx.startup_s) // ctx.window_s)
    return float(max(p[min(k, len(p) - 1)] for k in range(k0, k1 + 1)))


def control_features(obs: ControlObs, ctx: ControlContext, features: str = "base") -> np.ndarray:
    """The feature vector (float32, ``feature_names(features)``) of one control step."""
    names = feature_names(features)
    if features == "residual":
        return residual_features(obs.history["arrivals"], obs.now_s, obs.tick_s, ctx)
    n = ctx.max_replicas
    full = n * ctx.capacity_rps
    h = obs.history
    arr = h["arrivals"]
    tick = obs.tick_s
    k_int = max(1, int(round(ctx.interval_s / tick)))
    k_min = max(1, int(round(60.0 / tick)))
    phase = 2 * math.pi * ((ctx.start_window + obs.now_s / ctx.window_s) / WINDOWS_PER_DAY)
    q = obs.queue or [0]
    x = [obs.ready / n, obs.starting / n, obs.draining / n, obs.target / n, float(np.mean(q)) / 5.0,
         float(max(q)) / 5.0, float(np.mean(obs.kv)) if obs.kv else 0.0,
         (sum(obs.running) + sum(obs.queue)) / max(1, obs.ready) / ctx.concurrency_at_capacity,
         _rate(arr, k_int, tick) / full, _rate(arr, k_min, tick) / full, math.sin(phase), math.cos(phase)]
    if len(names) > len(BASE_NAMES):
        k_win = max(1, int(round(ctx.window_s / tick)))
        x += [_rate(arr, k_min, tick, skip=i * k_min) / full for i in range(5)]
        r4 = _rate(arr, 4 * k_win, tick)
        x += [_rate(arr, k_win, tick) / full, r4 / full]
        now = obs.now_s
        x += [_profile_at(ctx, now) / full, _profile_at(ctx, now + ctx.startup_s) / full,
              max(_profile_at(ctx, now + ctx.window_s), _profile_at(ctx, now + 2 * ctx.window_s)) / full]
        seen = min(len(arr), 4 * k_win)
        if seen > 0:
            expect = float(np.mean([_profile_at(ctx, now - j * tick) for j in range(1, seen + 1, max(1, seen // 16))]))
            level = r4 / expect if expect > 0 else 1.0
        else:
            level = 1.0
        x.append(min(4.0, level))
    if len(names) > len(BASE_NAMES) + len(HISTORY_NAMES):
        peak = _profile_peak(ctx, obs.now_s)
        sched = math.ceil(peak * (1 + SCHEDULED_HEADROOM) / ctx.capacity_rps)
        x += [ctx.clamp(sched) / n, min(4.0, peak * x[-1] / (0.95 * full))]
    if features == "transfer":
        x = _transfer(dict(zip(FEATURE_SETS["schedule"], x)), ctx, obs.now_s, full, bool(arr))
    return np.asarray(x, dtype=np.float32)


def residual_features(arrivals, now_s: float, tick_s: float, ctx: ControlContext) -> np.ndarray:
    """The ``residual`` vector (``RESIDUAL_NAMES``) at ``now_s`` from the per-tick arrival counts so far
    (``Fleet.history["arrivals"]``, or the same counts computed from an episode's arrival times)."""
    cap = ctx.capacity_rps
    arr = arrivals
    k_min = max(1, int(round(60.0 / tick_s)))
    k_win = max(1, int(round(ctx.window_s / tick_s)))
    mins = [_rate(arr, k_min, tick_s, skip=i * k_min) / cap for i in range(5)]
    r4 = _rate(arr, 4 * k_win, tick_s)
    p_now = _profile_at(ctx, now_s)
    peak = _profile_peak(ctx, now_s)
    sched = ctx.clamp(math.ceil(peak * (1 + SCHEDULED_HEADROOM) / cap))
    nxt = max(_profile_at(ctx, now_s + ctx.window_s), _profile_at(ctx, now_s + 2 * ctx.window_s))
    seen = min(len(arr), 4 * k_win)
    if seen > 0:
        expect = float(np.mean([_profile_at(ctx, now_s - j * tick_s) for j in range(1, seen + 1, max(1, seen // 16))]))
        level = min(4.0, r4 / expect) if expect > 0 else 1.0
    else:
        level = 1.0
    p_max = max(ctx.profile_rps) if ctx.profile_rps else 0.0
    x = [float(sched), peak / cap, p_now / cap, nxt / cap, mins[0], mins[1], float(np.mean(mins)), float(max(mins)),
         _rate(arr, k_win, tick_s) / cap, r4 / cap, level, _ratio(mins[0] * cap, p_now, seen == 0),
         p_now / p_max if p_max > 0 else 1.0, seen / (4 * k_win)]
    return np.asarray(x, dtype=np.float32)


def _ratio(a: float, b: float, empty: bool) -> float:
    return 1.0 if empty or b <= 0 else min(4.0, a / b)


def _transfer(v: dict[str, float], ctx: ControlContext, now_s: float, full: float, seen: bool) -> list[float]:
    """The ``transfer`` vector from the ``schedule`` values ``v`` (rates there are fractions of ``full``)."""
    mean = float(np.mean(ctx.profile_rps)) / full if ctx.profile_rps else 0.0
    ahead = max(_profile_at(ctx, now_s + ctx.window_s), _profile_at(ctx, now_s + 2 * ctx.window_s)) / full
    v["rate_window_vs_profile_now"] = _ratio(v["rate_window"], v["profile_now"], not seen)
    v["rate_minute_vs_profile_mean"] = _ratio(v["rate_minute_frac"], mean, not seen)
    v["profile_now_vs_mean"] = _ratio(v["profile_now"], mean, False)
    v["profile_ahead_vs_now"] = _ratio(ahead, v["profile_now"], False)
    v["rate_trend"] = _ratio(v["rate_m1"], v["rate_4_windows"], not seen)
    for k, hi in TRANSFER_CLIP.items():
        v[k] = min(hi, v[k])
    return [v[k] for k in FEATURE_SETS["transfer"]]


ADMISSION_NAMES = ("routable_frac", "starting_frac", "queue_mean_5", "queue_max_5", "kv_mean", "saturation",
                   "held_per_replica", "arrivals_per_capacity", "arrivals_5s_per_capacity",
                   "arrivals_30s_per_capacity")
"""Observation of the admission controller (``gateway_features``): the learned one and the
``admission`` agent of ``ControlClusterEnv``."""


def gateway_features(state, capacity_rps: float, recent: list[int]) -> np.ndarray:
    """The admission controller's observation (``ADMISSION_NAMES``) from the gateway state
    (``sim.gateway.GatewayState``) and the per-tick arrival counts it has seen (``recent``, newest last)."""
    n = max(1, state.routable)
    cap = max(1e-9, capacity_rps * n)
    q = state.queue or [0]
    kv = state.kv or [0.0]
    sat = state.saturation()
    r1 = recent[-1] if recent else 0
    r5 = sum(recent[-5:]) / max(1, min(5, len(recent)))
    r30 = sum(recent[-30:]) / max(1, min(30, len(recent)))
    return np.asarray([state.routable / 6.0, state.starting / 6.0, float(np.mean(q)) / 5.0, float(max(q)) / 5.0,
                       float(np.mean(kv)), min(sat, 10.0) if math.isfinite(sat) else 10.0, state.held / n,
                       r1 / cap, r5 / cap, r30 / cap], dtype=np.float32)
