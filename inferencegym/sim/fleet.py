"""The fleet: a cluster whose replicas come and go, behind an admission-controlled gateway.

``Fleet`` drives a ``Cluster`` built with ``LifecycleConfig.max_replicas`` slots in ticks of
``tick_s`` (1 s): at each tick it applies the lifecycle's due transitions (ready, crash, drain
deadline, straggler), releases drained replicas that are empty, refreshes the gateway state, lets
held requests in (or expires them), decides admission for the arrivals of the tick and runs the
cluster to the next tick. Lifecycle transitions therefore take effect on tick boundaries, and the
set of replicas a request may be routed to is fixed within a tick (a draining replica never gets
a new request). An autoscaler calls ``set_target`` between ``run_until`` calls.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .cluster import Cluster
from .config import ClusterConfig
from .fleet_ops import evict, fresh_replica, inject, set_slowdown
from .gateway import ADMIT, REJECT, TIERS, AdmitAll, GatewayState, Held
from .lifecycle import DRAINING, LOADING, PROVISIONING, UP, WARMING, LifecycleConfig, ReplicaLifecycle
from .request import Request
from .slo import meets_slo


@dataclass(frozen=True, kw_only=True)
class FleetConfig:
    """Gateway and lifecycle settings of a fleet."""

    lifecycle: LifecycleConfig = field(default_factory=LifecycleConfig)
    """Replica lifecycle (provisioning, loading, failures)."""
    tenant_tiers: tuple[int, ...] = ()
    """Tier index (0 critical, 1 standard, 2 sheddable) per tenant; empty: every tenant standard."""
    tick_s: float = 1.0
    """Gateway tick: state refresh, held-request release and lifecycle transitions happen on ticks."""
    defer_deadline_s: float = 10.0
    """A deferred request not admitted within this many seconds of its arrival expires."""
    hold_timeout_s: float = 120.0
    """An admitted request that found no serving replica waits at most this long, then expires."""

    def __post_init__(self) -> None:
        if not self.tick_s > 0:
            raise ValueError(f"tick_s must be > 0, got {self.tick_s}")
        if any(t not in (0, 1, 2) for t in self.tenant_tiers):
            raise ValueError(f"tenant_tiers must hold tier indices 0..2 ({', '.join(TIERS)}), got {self.tenant_tiers}")
        if self.defer_deadline_s < 0 or self.hold_timeout_s < 0:
            raise ValueError("defer_deadline_s and hold_timeout_s must be >= 0")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class ControlObs:
    """An autoscaler's view at a control step."""

    now_s: float
    ready: int
    """Serving replicas."""
    starting: int
    """Replicas provisioning, loading or warming."""
    draining: int
    target: int
    """The current target replica count."""
    queue: list
    """Waiting requests per serving replica (vllm:num_requests_waiting)."""
    running: list
    """Running requests per serving replica (vllm:num_requests_running)."""
    kv: list
    """KV-cache occupancy per serving replica (vllm:kv_cache_usage_perc)."""
    held: int
    """Requests held at the gateway."""
    history: dict
    """Per-tick series (``Fleet.history``; read only): t, ready, running, waiting, arrivals."""
    tick_s: float


class Fleet:
    """A cluster with a replica lifecycle and a gateway. ``arrivals``: dict of equal-length arrays
    ``arrival_s`` (sorted), ``prompt_tokens``, ``output_tokens``, ``tenant``."""

    def __init__(self, cluster_config: ClusterConfig, config: FleetConfig, arrivals: dict[str, np.ndarray],
                 *, rng: np.random.Generator, admission=None, check: bool = False) -> None:
        lc = config.lifecycle
        c_rng, l_rng, self._rep_rng = rng.spawn(3)
        self.cluster = Cluster(dataclasses.replace(cluster_config, num_replicas=lc.max_replicas,
                                                   replica_configs=()), rng=c_rng)
        m = self.cluster.base_model
        self.lifecycle = ReplicaLifecycle(lc, weight_bytes=m.weight_bytes_per_gpu * m.gpu_count,
                                          gpus_per_replica=m.gpu_count, rng=l_rng)
        self.config = config
        self.admission = admission if admission is not None else AdmitAll()
        nt = len(cluster_config.tenants)
        self.tiers = list(config.tenant_tiers) if config.tenant_tiers else [1] * nt
        if len(self.tiers) != nt:
            raise ValueError(f"tenant_tiers has {len(self.tiers)} entries for {nt} tenants")
        a = arrivals
        self._t = np.asarray(a["arrival_s"], dtype=float)
        if len(self._t) and np.any(np.diff(self._t) < 0):
            raise ValueError("arrivals must be sorted by arrival_s")
        self._p = np.asarray(a["prompt_tokens"], dtype=np.int64)
        self._o = np.asarray(a["output_tokens"], dtype=np.int64)
        self._ten = np.asarray(a.get("tenant", np.zeros(len(self._t))), dtype=np.int64)
        self._next = 0
        self.now_s = 0.0
        self.held: deque[Held] = deque()
        self.retry: list[Request] = []
        self.requests: list[Request] = []          # every arrival so far, in arrival order
        self.outcome: dict[int, str] = {}          # req_id -> "rejected" / "expired" (gateway)
        self.tier_of: list[int] = []
        self.state = GatewayState()
        self.check = check
        self.retries = 0
        self.history: dict[str, list] = {"t": [], "ready": [], "running": [], "waiting": [], "arrivals": []}
        """Per tick: time, serving replicas, running and waiting requests on them, arrivals."""
        self.cluster.routable = self.lifecycle.routable()

    # ------------------------------------------------------------------ control
    def set_target(self, n: int) -> None:
        """Target replica count from now on (scale up: new slots start provisioning; scale down:
        provisioning slots are cancelled first, then the least-loaded serving replicas drain)."""
        lc = self.lifecycle
        if not 0 <= int(n) <= lc.cfg.max_replicas:
            raise ValueError(f"target replicas must be in 0..{lc.cfg.max_replicas}, got {n}")
        reps = self.cluster.replicas
        order = sorted(lc.routable(), key=lambda i: (reps[i].outstanding(), -i))
        lc.target = int(n)
        lc.reconcile(self.now_s, order)
        self.cluster.routable = lc.routable()

    def run_until(self, t_end_s: float) -> None:
        tick = self.config.tick_s
        while self.now_s < t_end_s - 1e-9:
            t1 = min(self.now_s + tick, t_end_s)
            self._tick(t1)
            self.now_s = t1

    # ------------------------------------------------------------------ one tick
    def _tick(self, t1: float) -> None:
        self.tick_begin()
        self.tick_admit(t1)
        self.run_cluster(t1)
        if self.check:
            self.check_invariants()

    def tick_begin(self) -> None:
        """First phase of a tick at ``now_s``: the lifecycle's due transitions, drained replicas
        released, the routable set and the gateway state refreshed (a multi-agent env lets its
        admission agent act after this phase)."""
        c, lc, now = self.cluster, self.lifecycle, self.now_s
        for kind, i in lc.pop_due(now):
            if kind in ("crash", "deadline"):
                back = evict(c, i)
                self.retries += len(back)
                self.retry.extend(back)
                if kind == "deadline":
                    lc.release(i, now)  # a crashed slot is already released (maybe restarted)
                fresh_replica(c, i, self._rep_rng.spawn(1)[0])
            elif kind == "slow":
                set_slowdown(c, i, lc.slow[i])
        for i, s in enumerate(lc.state):
            if s == DRAINING:
                rep = c.replicas[i]
                if not rep.running and rep.queued() == 0 and rep.inbound == 0:
                    lc.release(i, now)
                    fresh_replica(c, i, self._rep_rng.spawn(1)[0])
        routable = lc.routable()
        c.routable = routable
        st = self.state
        st.now_s, st.routable = now, len(routable)
        st.starting = lc.count(PROVISIONING, LOADING, WARMING)
        st.queue = [c.replicas[i].queued() for i in routable]
        st.kv = [c.replicas[i].kv_occupancy() for i in routable]
        st.held = len(self.held)

    def tick_admit(self, t1: float) -> None:
        """Second phase of the tick ending at ``t1``: retries re-enter, held requests are admitted
        or expire, the tick's arrivals get their admission decision; the history records the tick."""
        c, now, st = self.cluster, self.now_s, self.state
        routable = c.routable
        adm = self.admission
        if routable and self.retry:
            inject(c, self.retry, fresh=False)
            self.retry = []
        if self.held:
            keep: deque[Held] = deque()
            for h in self.held:
                if now >= h.deadline_s:
                    self.outcome[h.req.req_id] = "expired"
                    continue
                if not h.admitted:
                    d = adm.decide(h.tier, now, st)
                    if d == REJECT:
                        self.outcome[h.req.req_id] = "rejected"
                        continue
                    if d == ADMIT:
                        h.admitted = True
                        h.deadline_s = h.req.arrival_s + self.config.hold_timeout_s
                if h.admitted and routable:
                    inject(c, [h.req], fresh=True)
                else:
                    keep.append(h)
            self.held = keep
        # this tick's arrivals
        j0 = self._next
        j1 = int(np.searchsorted(self._t, t1, side="left"))
        self._next = j1
        st.arrivals_last_tick = j1 - j0
        go: list[Request] = []
        cfg = self.config
        for j in range(j0, j1):
            ten = int(self._ten[j])
            r = Request(req_id=j, arrival_s=float(self._t[j]), prompt_tokens=int(self._p[j]),
                        output_tokens=int(self._o[j]), tenant=ten)
            tier = self.tiers[ten]
            self.requests.append(r)
            self.tier_of.append(tier)
            d = adm.decide(tier, r.arrival_s, st)
            if d == REJECT:
                self.outcome[j] = "rejected"
            elif d == ADMIT and routable:
                go.append(r)
            elif d == ADMIT:
                self.held.append(Held(r, tier, r.arrival_s + cfg.hold_timeout_s, True))
            else:
                self.held.append(Held(r, tier, r.arrival_s + cfg.defer_deadline_s, False))
        if go:
            c.submit(go)
        h = self.history
        h["t"].append(now)
        h["ready"].append(len(routable))
        h["running"].append(sum(len(c.replicas[i].running) for i in routable))
        h["waiting"].append(sum(st.queue))
        h["arrivals"].append(j1 - j0)

    def arrivals_due(self, t1: float) -> int:
        """Arrivals of the tick ending at ``t1`` that ``tick_admit`` will decide (before it runs)."""
        return int(np.searchsorted(self._t, t1, side="left")) - self._next

    def run_cluster(self, t1: float) -> None:
        """Last phase: run the cluster to ``t1``. Under an external router (a multi-agent env routes
        inside its own loop) the requests still arriving here (after the episode end) go to the
        least-outstanding serving replica."""
        c = self.cluster
        if not c.external:
            c.run_until(t1)
            return
        while (req := c.run_until_decision(t1)) is not None:
            cands = c.routable or range(len(c.replicas))
            c.dispatch(req, min(cands, key=lambda i: (c.replicas[i].outstanding(), i)))

    def observe(self) -> "ControlObs":
        """What an autoscaler sees now (observable state only; no future arrivals)."""
        lc, c = self.lifecycle, self.cluster
        ready = lc.routable()
        return ControlObs(now_s=self.now_s, ready=len(ready), starting=lc.count(PROVISIONING, LOADING, WARMING),
                          draining=lc.count(DRAINING), target=lc.target,
                          queue=[c.replicas[i].queued() for i in ready],
                          running=[len(c.replicas[i].running) for i in ready],
                          kv=[c.replicas[i].kv_occupancy() for i in ready],
                          held=len(self.held), history=self.history, tick_s=self.config.tick_s)

    # ------------------------------------------------------------------ results
    def finish(self, grace_s: float = 300.0) -> None:
        """Stop arrivals and let in-flight requests finish for up to ``grace_s`` (no cost counted
        after the episode end: ``gpu_hours`` reads the ledger at the end time)."""
        self._end_s = self.now_s
        self._gpu_s_end = self.lifecycle.gpu_seconds(self.now_s)
        self._next = len(self._t)
        end = self.now_s + grace_s
        while self.now_s < end - 1e-9 and (self.held or self.retry or
                                          c_busy(self.cluster)):
            t1 = min(self.now_s + self.config.tick_s, end)
            self._tick(t1)
            self.now_s = t1

    def gpu_hours(self) -> float:
        gs = getattr(self, "_gpu_s_end", None)
        return (gs if gs is not None else self.lifecycle.gpu_seconds(self.now_s)) / 3600.0

    def check_invariants(self) -> None:
        """Every arrival is in exactly one place; no draining replica holds a request routed after
        it started draining; the cost ledger never decreases (checked by callers over time)."""
        c = self.cluster
        in_cluster = {id(r) for r in c.requests}
        held = {id(h.req) for h in self.held}
        gw = {rid for rid in self.outcome}
        for r in self.requests:
            where = (id(r) in in_cluster) + (id(r) in held) + (r.req_id in gw)
            assert where == 1, f"request {r.req_id} is in {where} places"
        n_retry = len(self.retry)
        queued = sum(rep.queued() + len(rep.running) for rep in c.replicas)
        in_heap = sum(1 for e in c.events if e[1] == 2)
        assert c.n_completed + c.n_rejected + queued + in_heap + n_retry == c.n_submitted, "conservation"

    def summary(self) -> dict[str, Any]:
        """Episode metrics: GPU-hours, SLO attainment over every arrival (rejected, expired and
        unfinished requests fail), per tier the attainment, p90 TTFT, rejected and expired counts."""
        tenants = self.cluster.config.tenants
        n_t = [0, 0, 0]
        ok_t = [0, 0, 0]
        rej_t = [0, 0, 0]
        exp_t = [0, 0, 0]
        ttft_t: list[list[float]] = [[], [], []]
        for r, tier in zip(self.requests, self.tier_of):
            n_t[tier] += 1
            o = self.outcome.get(r.req_id)
            if o == "rejected" or (o is None and r.rejected_reason is not None):
                rej_t[tier] += 1
                continue
            if o == "expired":
                exp_t[tier] += 1
                continue
            if not math.isnan(r.first_token_s):
                ttft_t[tier].append(r.first_token_s - r.arrival_s)
            if r.done and meets_slo(r, tenants[r.tenant]):
                ok_t[tier] += 1
        n = sum(n_t)
        out: dict[str, Any] = {
            "gpu_hours": self.gpu_hours(),
            "arrivals": n,
            "slo_attainment": sum(ok_t) / n if n else math.nan,
            "goodput_requests": sum(ok_t),
            "rejected": sum(rej_t), "expired": sum(exp_t),
            "retried": self.retries, "crashes": self.lifecycle.crashes,
            "tier_slo_attainment": {}, "tier_ttft_p90_s": {}, "tier_rejected": {}, "tier_expired": {},
        }
        for k, name in enumerate(TIERS):
            if n_t[k] == 0:
                continue
            out["tier_slo_attainment"][name] = ok_t[k] / n_t[k]
            out["tier_ttft_p90_s"][name] = float(np.percentile(ttft_t[k], 90)) if ttft_t[k] else math.nan
            out["tier_rejected"][name] = rej_t[k]
            out["tier_expired"][name] = exp_t[k]
        return out


def c_busy(c: Cluster) -> bool:
    return c.n_completed + c.n_rejected < c.n_submitted
