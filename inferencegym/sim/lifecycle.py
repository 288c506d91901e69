"""Replica lifecycle: provisioning, model loading, warm-up, serving, draining, release, failures.

A pure state machine over replica *slots* (no simulator objects): the fleet (``sim/fleet.py``)
asks it which slots may receive requests, tells it the target replica count, and applies what it
reports (a slot became ready, crashed, must be evicted at its drain deadline, slowed down).

States of a slot::

    OFF --request--> PROVISIONING --(provision_s)--> LOADING --(weights / bandwidth)-->
    WARMING --(warmup_s)--> UP --scale down--> DRAINING --(empty, or deadline: evict)--> OFF
    UP / DRAINING --crash--> OFF (in-flight requests evicted, retried elsewhere)

GPU cost accrues from the request of a slot until its release (a cancelled provisioning included),
as a cloud bill does. Every draw comes from the ``rng`` given at construction (deterministic).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

OFF, PROVISIONING, LOADING, WARMING, UP, DRAINING = range(6)
STATE_NAMES = ("off", "provisioning", "loading", "warming", "up", "draining")

STORAGE_BANDWIDTH_GB_S: dict[str, float] = {
    "host_cache": 20.0,   # weights already in host page cache: PCIe Gen4/5 x16 host-to-device copy
    "local_nvme": 5.0,    # one datacenter NVMe SSD (PCIe Gen4 x4, ~5-7 GB/s sequential read)
    "network": 1.25,      # object store / network file system over a 10 Gbit/s link
}
"""Model-loading bandwidth per storage class (GB/s, 1e9 bytes), engineering assumptions stated in
docs/control_plane.md (no single published figure; override with ``load_bandwidth_gb_s``)."""


@dataclass(frozen=True, kw_only=True)
class LifecycleConfig:
    """How replicas come and go, and how they fail."""

    max_replicas: int = 16
    """Slots available (the cluster is built with this many replicas; OFF ones cost nothing)."""
    initial_replicas: int = 2
    """Replicas UP at time 0 (already provisioned and loaded)."""
    provision_mean_s: float = 30.0
    """Mean node provisioning delay (BLIS's default 30 s; cloud GPU nodes take minutes)."""
    provision_std_s: float = 5.0
    """Standard deviation of the provisioning delay (normal, truncated at 0; BLIS: +- 5 s)."""
    storage_class: str = "local_nvme"
    """Where weights are loaded from: a key of ``STORAGE_BANDWIDTH_GB_S``."""
    load_bandwidth_gb_s: float | None = None
    """Override of the storage class's loading bandwidth (GB/s)."""
    warmup_s: float = 10.0
    """Engine warm-up after loading (CUDA-graph capture, profiling run)."""
    drain_deadline_s: float = 60.0
    """A draining replica's requests still in flight at this deadline are evicted and retried elsewhere."""
    mtbf_s: float | None = None
    """Mean time between crashes of one serving replica (exponential); None: no random crashes."""
    crash_times_s: tuple[float, ...] = ()
    """Scripted crashes: at each time the serving replica with the lowest slot index crashes."""
    straggler_interval_s: float | None = None
    """Mean time between straggler episodes of one serving replica (exponential); None: none."""
    straggler_duration_s: float = 120.0
    """How long a straggler episode lasts."""
    straggler_slowdown: float = 2.0
    """Iteration-time multiplier of a straggling replica."""

    def __post_init__(self) -> None:
        def check(ok: bool, msg: str) -> None:
            if not ok:
                raise ValueError(msg)
        check(self.max_replicas >= 1, f"max_replicas must be >= 1, got {self.max_replicas}")
        check(0 <= self.initial_replicas <= self.max_replicas,
              f"initial_replicas must be in 0..max_replicas={self.max_replicas}, got {self.initial_replicas}")
        check(self.provision_mean_s >= 0 and self.provision_std_s >= 0 and self.warmup_s >= 0,
              "provision_mean_s, provision_std_s and warmup_s must be >= 0")
        check(self.storage_class in STORAGE_BANDWIDTH_GB_S,
              f"unknown storage_class {self.storage_class!r}; valid: {', '.join(STORAGE_BANDWIDTH_GB_S)}")
        check(self.load_bandwidth_gb_s is None or self.load_bandwidth_gb_s > 0,
              f"load_bandwidth_gb_s must be > 0 or None, got {self.load_bandwidth_gb_s}")
        check(self.drain_deadline_s >= 0, f"drain_deadline_s must be >= 0, got {self.drain_deadline_s}")
        check(self.mtbf_s is None or self.mtbf_s > 0, f"mtbf_s must be > 0 or None, got {self.mtbf_s}")
        check(self.straggler_interval_s is None or self.straggler_interval_s > 0,
              f"straggler_interval_s must be > 0 or None, got {self.straggler_interval_s}")
        check(self.straggler_duration_s > 0 and self.straggler_slowdown >= 1.0,
              "straggler_duration_s must be > 0 and straggler_slowdown >= 1")
        check(all(t >= 0 for t in self.crash_times_s), "crash_times_s must be >= 0")

    @property
    def bandwidth_gb_s(self) -> float:
        return self.load_bandwidth_gb_s or STORAGE_BANDWIDTH_GB_S[self.storage_class]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# event kinds (heap entries: time, seq, kind, slot, token)
_READY_STAGE, _DRAIN_DEADLINE, _CRASH, _STRAGGLE_ON, _STRAGGLE_OFF, _SCRIPTED_CRASH = range(6)


class ReplicaLifecycle:
    """Slot states, transitions and the GPU-cost ledger. ``weight_bytes`` is one replica's total
    weight bytes (all its GPUs), ``gpus_per_replica`` the GPUs billed per replica."""

    def __init__(self, config: LifecycleConfig, *, weight_bytes: float, gpus_per_replica: int,
                 rng: np.random.Generator) -> None:
        self.cfg = config
        self.rng = rng
        self.load_s = float(weight_bytes) / (config.bandwidth_gb_s * 1e9)
        self.gpus = int(gpus_per_replica)
        n = config.max_replicas
        self.state = [OFF] * n
        self.token = [0] * n          # bumps on every (re)start: stale events are skipped
        self.since = [0.0] * n        # time of the slot's last request (cost start)
        self.ready_at = [math.nan] * n
        self.slow = [1.0] * n
        self.target = config.initial_replicas
        self.billed_s = 0.0           # GPU-seconds of released slots
        self.now = 0.0
        self._heap: list = []
        self._seq = 0
        self.crashes = 0
        self.log: list[tuple[float, int, str]] = []  # (time, slot, new state name)
        for i in range(config.initial_replicas):
            self._start(i, 0.0, ready=True)
        for t in config.crash_times_s:
            self._push(float(t), _SCRIPTED_CRASH, -1, 0)

    # ------------------------------------------------------------------ queries
    def routable(self) -> list[int]:
        """Slots that may receive new requests (UP; never DRAINING)."""
        return [i for i, s in enumerate(self.state) if s == UP]

    def count(self, *states: int) -> int:
        return sum(1 for s in self.state if s in states)

    def active(self) -> int:
        """Replicas that count toward the target: provisioning, loading, warming or up."""
        return self.count(PROVISIONING, LOADING, WARMING, UP)

    def gpu_seconds(self, now: float) -> float:
        """GPU-seconds billed up to ``now`` (requested-to-released, every slot)."""
        live = sum(now - self.since[i] for i, s in enumerate(self.state) if s != OFF)
        return self.billed_s + self.gpus * live

    def next_event_s(self) -> float:
        return self._heap[0][0] if self._heap else math.inf

    def startup_s(self) -> float:
        """Expected delay from a scale-up request to serving (mean provisioning + loading + warm-up)."""
        return self.cfg.provision_mean_s + self.load_s + self.cfg.warmup_s

    # ------------------------------------------------------------------ commands
    def set_target(self, n: int, now: float) -> list[int]:
        """Reconcile toward ``n`` replicas: request new slots, or cancel provisioning ones first
        (youngest first), then drain serving ones (``drain_order``: caller-preferred slots).
        Returns the slots that start draining (the fleet stops routing to them)."""
        n = int(n)
        if not 0 <= n <= self.cfg.max_replicas:
            raise ValueError(f"target replicas must be in 0..{self.cfg.max_replicas}, got {n}")
        self.now = now
        self.target = n
        return self.reconcile(now)

    def reconcile(self, now: float, drain_order: list[int] | None = None) -> list[int]:
        drained: list[int] = []
        act = self.active()
        while act < self.target:
            free = self.state.index(OFF) if OFF in self.state else -1
            if free < 0:
                break
            self._start(free, now, ready=False)
            act += 1
        if act > self.target:
            pending = sorted((i for i, s in enumerate(self.state) if s in (PROVISIONING, LOADING, WARMING)),
                             key=lambda i: (-self.since[i], -i))
            for i in pending:
                if act <= self.target:
                    break
                self.release(i, now)
                act -= 1
            ups = drain_order if drain_order is not None else [i for i in reversed(range(len(self.state)))]
            for i in ups:
                if act <= self.target:
                    break
                if self.state[i] == UP:
                    self.state[i] = DRAINING
                    self.log.append((now, i, "draining"))
                    self._push(now + self.cfg.drain_deadline_s, _DRAIN_DEADLINE, i, self.token[i])
                    drained.append(i)
                    act -= 1
        return drained

    def release(self, i: int, now: float) -> None:
        """Give slot ``i`` back (cost stops)."""
        if self.state[i] == OFF:
            return
        self.billed_s += self.gpus * (now - self.since[i])
        self.state[i] = OFF
        self.slow[i] = 1.0
        self.token[i] += 1
        self.log.append((now, i, "off"))

    # ------------------------------------------------------------------ time
    def pop_due(self, now: float) -> list[tuple[str, int]]:
        """Apply every transition due by ``now``; returns what the fleet must act on:
        ``("ready", i)``, ``("crash", i)`` (evict, then the slot is OFF and a replacement is
        requested), ``("deadline", i)`` (evict the rest of a drain), ``("slow", i)`` (slowdown
        changed: read ``self.slow[i]``)."""
        out: list[tuple[str, int]] = []
        h = self._heap
        cfg = self.cfg
        while h and h[0][0] <= now:
            t, _, kind, i, tok = heapq.heappop(h)
            if kind == _SCRIPTED_CRASH:
                ups = [j for j, s in enumerate(self.state) if s in (UP, DRAINING)]
                if ups:
                    out.append(("crash", ups[0]))
                    self._crash(ups[0], t)
                continue
            if tok != self.token[i]:
                continue
            s = self.state[i]
            if kind == _READY_STAGE:
                if s == PROVISIONING:
                    self._enter(i, LOADING, t, t + self.load_s)
                elif s == LOADING:
                    self._enter(i, WARMING, t, t + cfg.warmup_s)
                elif s == WARMING:
                    self._up(i, t)
                    out.append(("ready", i))
            elif kind == _DRAIN_DEADLINE and s == DRAINING:
                out.append(("deadline", i))
            elif kind == _CRASH and s in (UP, DRAINING):
                out.append(("crash", i))
                self._crash(i, t)
            elif kind == _STRAGGLE_ON and s in (UP, DRAINING):
                self.slow[i] = cfg.straggler_slowdown
                self._push(t + cfg.straggler_duration_s, _STRAGGLE_OFF, i, tok)
                out.append(("slow", i))
            elif kind == _STRAGGLE_OFF and s in (UP, DRAINING):
                self.slow[i] = 1.0
                self._push(t + float(self.rng.exponential(cfg.straggler_interval_s)), _STRAGGLE_ON, i, tok)
                out.append(("slow", i))
        self.now = now
        if any(k == "crash" for k, _ in out):
            self.reconcile(now)  # a Deployment replaces a failed pod
        return out

    # ------------------------------------------------------------------ internals
    def _push(self, t: float, kind: int, i: int, tok: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, i, tok))

    def _start(self, i: int, now: float, *, ready: bool) -> None:
        self.token[i] += 1
        self.since[i] = now
        if ready:
            self._up(i, now)
            return
        cfg = self.cfg
        prov = max(0.0, float(self.rng.normal(cfg.provision_mean_s, cfg.provision_std_s))) \
            if cfg.provision_std_s > 0 else cfg.provision_mean_s
        self._enter(i, PROVISIONING, now, now + prov)

    def _enter(self, i: int, state: int, now: float, until: float) -> None:
        self.state[i] = state
        self.log.append((now, i, STATE_NAMES[state]))
        self._push(until, _READY_STAGE, i, self.token[i])

    def _up(self, i: int, now: float) -> None:
        self.state[i] = UP
        self.ready_at[i] = now
        self.log.append((now, i, "up"))
        cfg = self.cfg
        tok = self.token[i]
        if cfg.mtbf_s is not None:
            self._push(now + float(self.rng.exponential(cfg.mtbf_s)), _CRASH, i, tok)
        if cfg.straggler_interval_s is not None:
            self._push(now + float(self.rng.exponential(cfg.straggler_interval_s)), _STRAGGLE_ON, i, tok)

    def _crash(self, i: int, now: float) -> None:
        self.crashes += 1
        self.release(i, now)
        self.log.append((now, i, "crashed"))
