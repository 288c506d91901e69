"""Admission controllers (baselines of ``cluster_admission``), sources in docs/control_plane.md.

* ``admit_all``: no admission control.
* ``gaie_shed``: the Gateway API Inference Extension (llm-d's gateway) rule: when the pool is
  saturated (saturation >= 1.0; per replica the larger of queue / 5 and KV / 0.8, the saturation
  detector's default thresholds, averaged over serving replicas) sheddable requests are rejected
  (HTTP 429); critical and standard ones are always admitted.
* ``token_bucket``: a gateway rate limit refilled at the measured capacity of the serving replicas
  with a 2 s burst; critical requests always pass (and take a token when there is one), standard
  ones wait (deferred, with the fleet's deadline) for a token, sheddable ones are rejected without one.
* ``hindsight_admission`` (privileged reference): knows the episode's realized arrivals and tiers.
  Once per gateway tick it picks the mildest admission level (``ADMISSION_LEVELS``: the shares of
  standard and sheddable requests admitted) under which the requests arriving in the next
  ``horizon_s`` seconds, plus the waiting and held ones, fit the serving replicas' measured
  capacity over the horizon plus ``backlog_s`` seconds of work.
  A look-ahead reference (the teacher of the learned admission controller), not a proven bound.
"""

from __future__ import annotations

import numpy as np

from inferencegym.sim.gateway import ADMISSION_LEVELS, ADMIT, DEFER, REJECT, AdmitAll, GatewayState, LevelAdmission


class GaieShed:
    name = "gaie_shed"

    def __init__(self, queue_threshold: float = 5.0, kv_threshold: float = 0.8, saturation: float = 1.0) -> None:
        self.q, self.kv, self.sat = queue_threshold, kv_threshold, saturation

    def reset(self, capacity_rps: float) -> None:
        pass

    def decide(self, tier: int, t_s: float, state: GatewayState) -> int:
        if tier == 2 and state.saturation(self.q, self.kv) >= self.sat:
            return REJECT
        return ADMIT


class TokenBucket:
    name = "token_bucket"

    def __init__(self, burst_s: float = 2.0) -> None:
        self.burst_s = burst_s

    def reset(self, capacity_rps: float) -> None:
        self.cap = capacity_rps
        self.tokens = 0.0
        self.t = 0.0

    def decide(self, tier: int, t_s: float, state: GatewayState) -> int:
        rate = self.cap * state.routable
        if t_s > self.t:
            self.tokens = min(rate * self.burst_s, self.tokens + rate * (t_s - self.t))
            self.t = t_s
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return ADMIT
        if tier == 0:
            return ADMIT
        return DEFER if tier == 1 else REJECT


class HindsightAdmission(LevelAdmission):
    name = "hindsight_admission"
    privileged = True

    def __init__(self, horizon_s: float = 10.0, backlog_s: float = 1.0) -> None:
        self.horizon_s, self.backlog_s = horizon_s, backlog_s
        self.t: np.ndarray | None = None

    def set_future(self, arrival_s: np.ndarray, tiers: np.ndarray) -> None:
        """Privileged: the episode's arrival times and tiers."""
        self.t = np.asarray(arrival_s, dtype=float)
        tiers = np.asarray(tiers)
        self.cum = [np.concatenate([[0], np.cumsum(tiers == k)]) for k in range(3)]

    def level_at(self, state: GatewayState) -> int:
        if self.t is None:
            raise ValueError("hindsight_admission is privileged: it needs the episode's arrivals (set_future)")
        i0, i1 = np.searchsorted(self.t, [state.now_s, state.now_s + self.horizon_s])
        c = [int(self.cum[k][i1] - self.cum[k][i0]) for k in range(3)]
        budget = self.cap * max(1, state.routable) * (self.horizon_s + self.backlog_s) - sum(state.queue) - state.held
        for lvl, (f1, f2) in enumerate(ADMISSION_LEVELS):
            if c[0] + f1 * c[1] + f2 * c[2] <= budget:
                return lvl
        return len(ADMISSION_LEVELS) - 1


class _AdmitAll(AdmitAll):
    name = "admit_all"

    def reset(self, capacity_rps: float) -> None:
        pass


ADMISSION = {"admit_all": _AdmitAll, "gaie_shed": GaieShed, "token_bucket": TokenBucket,
             "hindsight_admission": HindsightAdmission}
PRIVILEGED_ADMISSION = ("hindsight_admission",)


def make_admission(name: str):
    if name not in ADMISSION:
        raise ValueError(f"unknown admission controller {name!r}; valid: {', '.join(ADMISSION)}")
    return ADMISSION[name]()
