"""Admission controllers (baselines of ``cluster_admission``), sources in docs/control_plane.md.

* ``admit_all``: no admission control.
* ``gaie_shed``: the Gateway API Inference Extension (llm-d's gateway) rule: when the pool is
  saturated (saturation >= 1.0; per replica the larger of queue / 5 and KV / 0.8, the saturation
  detector's default thresholds, averaged over serving replicas) sheddable requests are rejected
  (HTTP 429); critical and standard ones are always admitted.
* ``token_bucket``: a gateway rate limit refilled at the measured capacity of the serving replicas
  with a 2 s burst; critical requests always pass (and take a token when there is one), standard
  ones wait (deferred, with the fleet's deadline) for a token, sheddable ones are rejected without one.
"""

from __future__ import annotations

from inferencegym.sim.gateway import ADMIT, DEFER, REJECT, AdmitAll, GatewayState


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


class _AdmitAll(AdmitAll):
    name = "admit_all"

    def reset(self, capacity_rps: float) -> None:
        pass


ADMISSION = {"admit_all": _AdmitAll, "gaie_shed": GaieShed, "token_bucket": TokenBucket}


def make_admission(name: str):
    if name not in ADMISSION:
        raise ValueError(f"unknown admission controller {name!r}; valid: {', '.join(ADMISSION)}")
    return ADMISSION[name]()
