"""Production autoscalers as baselines of ``cluster_autoscaling``, and the hindsight ceiling.

Each reads a ``ControlObs`` (``sim/fleet.py``) every control interval and returns a target replica
count. Defaults are the documented ones (sources in docs/control_plane.md):

* ``hpa``: Kubernetes HPA (with KEDA's Prometheus scaler) on ``vllm:num_requests_waiting``, target
  5 per replica, tolerance 0.1, scale-up limit max(100 %, 4 pods) per 15 s, scale-down
  stabilization window 300 s (the highest recommendation of the last 300 s wins).
* ``kpa``: Knative Pod Autoscaler on concurrency, stable window 60 s, panic window 6 s (10 %),
  panic when the panic-window desire reaches 200 % of the ready pods, no scale-down while
  panicking, max scale-down rate 2; target = 70 % utilisation of the replica's container
  concurrency (set to the measured concurrency at capacity).
* ``wva``: llm-d Workload Variant Autoscaler's saturation analyzer: KV 0.80, queue 5, spare-KV
  trigger 0.10, spare-queue trigger 3; scale-up blocked while replicas are pending; scale-down by
  one only when the load redistributed over one replica fewer keeps the spare triggers.
* ``dynamo_planner``: NVIDIA Dynamo planner, throughput mode: every adjustment interval predict the
  next interval's request rate (a linear trend over the last three intervals) and provision
  ``ceil(rate / per-replica capacity at the SLO)``.
* ``scheduled``: time-of-day schedule from the training days (p90 rate of each 10-min window,
  provisioned one start-up delay ahead, 10 % headroom).
* ``hindsight`` (privileged): knows the realized arrivals; dynamic programme over the serving
  count per control interval (GPU time + start-up cost of each added replica, subject to the
  measured capacity), each increase requested one start-up delay ahead.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from inferencegym.sim.fleet import ControlObs
from inferencegym.tasks.control import ControlContext

__all__ = ["ControlContext", "AUTOSCALERS", "PRIVILEGED", "make_autoscaler"]


class HPA:
    name = "hpa"

    def __init__(self, target_waiting: float = 5.0, tolerance: float = 0.1, down_window_s: float = 300.0,
                 up_percent: float = 100.0, up_pods: int = 4) -> None:
        self.target_waiting, self.tol, self.down_window_s = target_waiting, tolerance, down_window_s
        self.up_percent, self.up_pods = up_percent, up_pods

    def reset(self, ctx: ControlContext) -> None:
        self.ctx = ctx
        self.recs: deque = deque()

    def act(self, obs: ControlObs) -> int:
        cur = obs.target
        if obs.ready == 0:
            desired = cur
        else:
            ratio = (sum(obs.queue) / obs.ready) / self.target_waiting
            desired = cur if abs(ratio - 1.0) <= self.tol else math.ceil(obs.ready * ratio)
        desired = self.ctx.clamp(desired)
        self.recs.append((obs.now_s, desired))
        while self.recs and self.recs[0][0] < obs.now_s - self.down_window_s:
            self.recs.popleft()
        if desired < cur:  # scale-down stabilization: the highest recent recommendation
            desired = min(cur, max(r for _, r in self.recs))
        limit = max(cur * (1 + self.up_percent / 100.0), cur + self.up_pods)
        return self.ctx.clamp(min(desired, limit))


class KPA:
    name = "kpa"

    def __init__(self, stable_window_s: float = 60.0, panic_window_percent: float = 10.0,
                 panic_threshold_percent: float = 200.0, target_utilization: float = 0.7,
                 max_scale_down_rate: float = 2.0) -> None:
        self.stable_s = stable_window_s
        self.panic_s = stable_window_s * panic_window_percent / 100.0
        self.panic_threshold = panic_threshold_percent / 100.0
        self.util = target_utilization
        self.down_rate = max_scale_down_rate

    def reset(self, ctx: ControlContext) -> None:
        self.ctx = ctx
        self.target = max(1e-9, self.util * ctx.concurrency_at_capacity)
        self.panic_until = -math.inf
        self.panic_max = 0

    def act(self, obs: ControlObs) -> int:
        h = obs.history
        ns = max(1, int(round(self.stable_s / obs.tick_s)))
        npn = max(1, int(round(self.panic_s / obs.tick_s)))
        conc = [r + w for r, w in zip(h["running"][-ns:], h["waiting"][-ns:])]
        stable = sum(conc) / len(conc) if conc else 0.0
        panic = sum(conc[-npn:]) / len(conc[-npn:]) if conc else 0.0
        want_stable = math.ceil(stable / self.target)
        want_panic = math.ceil(panic / self.target)
        ready = max(1, obs.ready)
        if want_panic / ready >= self.panic_threshold:
            self.panic_until = obs.now_s + self.stable_s
        if obs.now_s < self.panic_until:
            self.panic_max = max(self.panic_max, want_panic, obs.target)
            desired = self.panic_max  # never scale down while panicking
        else:
            self.panic_max = 0
            desired = max(want_stable, math.ceil(ready / self.down_rate))
        return self.ctx.clamp(desired)


class WVA:
    """The saturation analyzer's recommendation, actuated as llm-d deploys it: WVA publishes the
    desired count and an HPA (or KEDA) scales the deployment, with HPA's default 300 s scale-down
    stabilization (the highest recommendation of the last 300 s) and immediate scale-up."""

    name = "wva"

    def __init__(self, kv_threshold: float = 0.80, queue_threshold: float = 5.0,
                 kv_spare_trigger: float = 0.10, queue_spare_trigger: float = 3.0,
                 down_window_s: float = 300.0) -> None:
        self.kv_t, self.q_t = kv_threshold, queue_threshold
        self.kv_s, self.q_s = kv_spare_trigger, queue_spare_trigger
        self.down_window_s = down_window_s

    def reset(self, ctx: ControlContext) -> None:
        self.ctx = ctx
        self.recs: deque = deque()

    def act(self, obs: ControlObs) -> int:
        want = self.recommend(obs)
        self.recs.append((obs.now_s, want))
        while self.recs and self.recs[0][0] < obs.now_s - self.down_window_s:
            self.recs.popleft()
        if want < obs.target:
            want = min(obs.target, max(r for _, r in self.recs))
        return want

    def recommend(self, obs: ControlObs) -> int:
        """The saturation analyzer alone (no actuator)."""
        cur = obs.target
        if obs.ready == 0:
            return self.ctx.clamp(max(cur, 1))
        ok = [(q, k) for q, k in zip(obs.queue, obs.kv) if k < self.kv_t and q < self.q_t]
        pending = obs.starting > 0
        if not ok:
            return self.ctx.clamp(cur if pending else cur + 1)
        spare_kv = sum(self.kv_t - k for _, k in ok) / len(ok)
        spare_q = sum(self.q_t - q for q, _ in ok) / len(ok)
        if spare_kv < self.kv_s or spare_q < self.q_s:
            return self.ctx.clamp(cur if pending else cur + 1)
        if len(ok) >= 2 and not pending and obs.ready >= cur:
            n = len(ok) - 1
            kv_after = sum(k for _, k in ok) / n
            q_after = sum(q for q, _ in ok) / n
            if self.kv_t - kv_after >= self.kv_s and self.q_t - q_after >= self.q_s:
                return self.ctx.clamp(cur - 1)
        return self.ctx.clamp(cur)


class DynamoPlanner:
    name = "dynamo_planner"

    def __init__(self, adjustment_interval_s: float = 180.0) -> None:
        self.adj_s = adjustment_interval_s

    def reset(self, ctx: ControlContext) -> None:
        self.ctx = ctx
        self.rates: list[float] = []
        self.next_s = 0.0
        self.desired = None

    def act(self, obs: ControlObs) -> int:
        if obs.now_s + 1e-9 < self.next_s and self.desired is not None:
            return self.desired
        n = max(1, int(round(self.adj_s / obs.tick_s)))
        arr = obs.history["arrivals"][-n:]
        if arr:
            self.rates.append(sum(arr) / (len(arr) * obs.tick_s))
        r = self.rates[-3:]
        if len(r) >= 2:
            slope = (r[-1] - r[0]) / (len(r) - 1)
            pred = max(0.0, r[-1] + slope)
        else:
            pred = r[-1] if r else 0.0
        self.next_s = obs.now_s + self.adj_s
        self.desired = self.ctx.clamp(math.ceil(pred / self.ctx.capacity_rps)) if r else self.ctx.clamp(obs.target)
        return self.desired


class Scheduled:
    name = "scheduled"

    def __init__(self, headroom: float = 0.10) -> None:
        self.headroom = headroom

    def reset(self, ctx: ControlContext) -> None:
        if not ctx.profile_rps:
            raise ValueError("the scheduled policy needs the task's training-day profile (profile_rps)")
        self.ctx = ctx

    def act(self, obs: ControlObs) -> int:
        ctx = self.ctx
        w = len(ctx.profile_rps)
        t = obs.now_s + ctx.startup_s
        k0 = int(obs.now_s // ctx.window_s)
        k1 = int(t // ctx.window_s)
        rate = max(ctx.profile_rps[min(k, w - 1)] for k in range(k0, k1 + 1))
        return ctx.clamp(math.ceil(rate * (1 + self.headroom) / ctx.capacity_rps))


class Hindsight:
    name = "hindsight"

    def __init__(self, utilization: float = 0.95) -> None:
        self.util = utilization

    def reset(self, ctx: ControlContext) -> None:
        if ctx.future_arrivals_s is None:
            raise ValueError("hindsight is privileged: it needs the episode's realized arrivals")
        self.ctx = ctx
        iv = ctx.interval_s
        t = np.asarray(ctx.future_arrivals_s)
        k = int(math.ceil((t[-1] if len(t) else 0.0) / iv)) + 2
        counts = np.bincount((t // iv).astype(int), minlength=k)[:k]
        need = np.ceil(counts / iv / (self.util * ctx.capacity_rps)).astype(int)
        need = np.clip(need, ctx.min_replicas, ctx.max_replicas)
        self.plan = _dp_schedule(need, ctx.max_replicas, up_cost=ctx.startup_s / iv)
        self.lead = int(math.ceil(ctx.startup_s / iv)) + 1

    def act(self, obs: ControlObs) -> int:
        k = int(round(obs.now_s / self.ctx.interval_s))
        seg = self.plan[k:k + self.lead + 1]
        return self.ctx.clamp(int(seg.max()) if len(seg) else self.ctx.min_replicas)


def _dp_schedule(need: np.ndarray, n_max: int, *, up_cost: float) -> np.ndarray:
    """Serving counts n_k >= need_k minimising sum n_k + up_cost * sum max(0, n_k - n_{k-1})."""
    K = len(need)
    ns = np.arange(n_max + 1)
    INF = 1e18
    cost = np.where(ns >= need[0], ns + up_cost * ns, INF)
    back = np.zeros((K, n_max + 1), dtype=np.int32)
    for k in range(1, K):
        # trans[p, n] = cost[p] + up_cost * max(0, n - p)
        trans = cost[:, None] + up_cost * np.maximum(0, ns[None, :] - ns[:, None])
        back[k] = trans.argmin(axis=0)
        cost = trans.min(axis=0) + np.where(ns >= need[k], ns, INF)
    out = np.zeros(K, dtype=int)
    out[-1] = int(cost.argmin())
    for k in range(K - 1, 0, -1):
        out[k - 1] = back[k, out[k]]
    return out


AUTOSCALERS = {"hpa": HPA, "kpa": KPA, "wva": WVA, "dynamo_planner": DynamoPlanner,
               "scheduled": Scheduled, "hindsight": Hindsight}
PRIVILEGED = ("hindsight",)


def make_autoscaler(name: str):
    if name not in AUTOSCALERS:
        raise ValueError(f"unknown autoscaler {name!r}; valid: {', '.join(AUTOSCALERS)}")
    return AUTOSCALERS[name]()
