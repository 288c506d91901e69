"""Admission control at the gateway: priority tiers, per-request decisions, the hold queue.

Every arriving request belongs to a tier (its tenant's): ``critical``, ``standard`` or
``sheddable`` (the llm-d / Gateway API Inference Extension criticality levels). An admission
controller decides per request: ``ADMIT`` (route now), ``DEFER`` (hold at the gateway and ask
again at the next tick, until the deadline) or ``REJECT`` (never served). Rejected and expired
requests count against their tier. The controller sees a ``GatewayState`` refreshed every tick
(what a gateway scrapes from its pool: queue depth and KV-cache use per serving replica).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

TIERS = ("critical", "standard", "sheddable")
ADMIT, DEFER, REJECT = 0, 1, 2


@dataclass(slots=True)
class GatewayState:
    """What the gateway knows at a tick (refreshed every ``FleetConfig.tick_s``)."""

    now_s: float = 0.0
    routable: int = 0
    """Replicas serving (UP, not draining)."""
    starting: int = 0
    """Replicas provisioning, loading or warming."""
    queue: list[int] = field(default_factory=list)
    """Waiting requests per serving replica."""
    kv: list[float] = field(default_factory=list)
    """KV-cache occupancy per serving replica."""
    held: int = 0
    """Requests held at the gateway (deferred, or admitted with no replica to take them)."""
    arrivals_last_tick: int = 0

    def saturation(self, queue_threshold: float = 5.0, kv_threshold: float = 0.8) -> float:
        """Pool saturation as llm-d's saturation detector defines it: per replica the larger of
        queue / queue_threshold and kv / kv_threshold, averaged over serving replicas; inf when
        none serves."""
        if not self.routable:
            return math.inf
        return sum(max(q / queue_threshold, k / kv_threshold) for q, k in zip(self.queue, self.kv)) / self.routable


class AdmissionController(Protocol):
    def decide(self, tier: int, t_s: float, state: GatewayState) -> int:
        """ADMIT, DEFER or REJECT one request of ``tier`` (index into TIERS) at time ``t_s``."""
        ...


class AdmitAll:
    """Admit every request (no admission control)."""

    def decide(self, tier: int, t_s: float, state: GatewayState) -> int:
        return ADMIT


@dataclass(slots=True)
class Held:
    req: object
    tier: int
    deadline_s: float
    admitted: bool


ADMISSION_LEVELS = ((1.0, 1.0), (1.0, 0.5), (1.0, 0.0), (0.75, 0.0), (0.5, 0.0), (0.25, 0.0), (0.0, 0.0))
"""Admission level -> share of (standard, sheddable) requests admitted; critical ones always are.
The rest are rejected (a deferral longer than the 2 s TTFT SLO cannot meet it)."""


class LevelAdmission:
    # moved here from policies/admission.py (re-exported there) so the control multi-agent env
    # (envs/) can apply its admission agent's level without importing policies
    """Admission by level, chosen once per gateway tick by ``level_at(state)``: critical requests
    are admitted; standard and sheddable ones in the level's share, spread evenly (a per-tier
    credit grows by the share at each request and an admission spends one credit)."""

    def reset(self, capacity_rps: float) -> None:
        self.cap = capacity_rps
        self.t_level = -math.inf
        self.level = 0
        self.credit = [0.0, 0.0, 0.0]

    def level_at(self, state: GatewayState) -> int:
        raise NotImplementedError

    def decide(self, tier: int, t_s: float, state: GatewayState) -> int:
        if state.now_s > self.t_level:
            self.t_level = state.now_s
            self.level = int(self.level_at(state))
        if tier == 0:
            return ADMIT
        share = ADMISSION_LEVELS[self.level][tier - 1]
        c = self.credit[tier] + share  # < 2: after a rejection credit < 1, after an admission < share
        if c >= 1.0 - 1e-9:
            self.credit[tier] = c - 1.0
            return ADMIT
        self.credit[tier] = c
        return REJECT
