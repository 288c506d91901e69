"""What a router can see of the replicas' prefix caches and load: a published, slightly stale view.

Real cache-aware routers do not read engine memory. llm-d's precise scorer and Dynamo's KV router
consume KV events the engines publish; the Gateway API inference extension scrapes queue and KV
metrics every 50 ms. ``PublishedView`` models that: every ``interval_s`` of simulated time a
snapshot is published (each replica's set of cached block hashes, its queue length, KV usage and
outstanding requests); routers read the latest snapshot. The snapshot is taken lazily, at the first
routing decision after a publication tick, so what a router sees is between 0 and ``interval_s``
old (``interval_s = 0``: always current).
"""

from __future__ import annotations

from typing import Any

from .cpu_kv import ROUTER_CPU_WEIGHT


def leading_blocks(hashes, have, max_blocks: int = 1 << 30) -> int:
    """How many leading blocks of the chain ``hashes`` (at most ``max_blocks``) are in ``have``
    (any container of block hashes): the prefix a router expects to find cached."""
    n = 0
    for h in hashes:
        if n >= max_blocks or h not in have:
            break
        n += 1
    return n

class ReplicaSnapshot:
    """One replica as last published: cached hashes (kept current by applying the replica's KV
    events at each publication, so a publication costs the changes, not the cache size), waiting
    requests, KV usage fraction, outstanding requests."""

    __slots__ = ("hashes", "cpu_hashes", "waiting", "kv_usage", "outstanding", "_events", "_cpu_events")

    def __init__(self, rep: Any) -> None:
        self.hashes = set(rep.kv.cached_hashes())
        self._events = rep.kv.publish_events()
        self._events.clear()
        cpu = getattr(rep, "cpu", None)
        self.cpu_hashes = set(cpu.blocks) if cpu is not None else None
        """Hashes in the replica's CPU tier as published (LMCache KV events), None without one."""
        self._cpu_events = cpu.publish_events() if cpu is not None else None
        if self._cpu_events is not None:
            self._cpu_events.clear()
        self.refresh(rep)

    @staticmethod
    def _apply(hs: set, ev: list) -> None:
        for h, stored in ev:
            if stored:
                hs.add(h)
            else:
                hs.discard(h)
        ev.clear()

    def refresh(self, rep: Any) -> None:
        if self._events:
            self._apply(self.hashes, self._events)
        if self._cpu_events:
            self._apply(self.cpu_hashes, self._cpu_events)
        kv = rep.kv
        self.waiting = rep.queued()
        self.kv_usage = kv.used_blocks / kv.capacity_blocks
        self.outstanding = rep.outstanding()

    def prefix_blocks_by_tier(self, hashes: tuple, max_blocks: int = 1 << 30) -> tuple[int, int]:
        """Leading blocks of ``hashes`` found in the GPU cache, then the run after them found in
        the CPU tier (0 without one)."""
        g = leading_blocks(hashes, self.hashes, max_blocks)
        if self.cpu_hashes is None or g >= len(hashes):
            return g, 0
        return g, leading_blocks(hashes[g:], self.cpu_hashes, max_blocks - g)

    def prefix_blocks(self, hashes: tuple, max_blocks: int = 1 << 30):
        """Leading blocks of ``hashes`` found in this snapshot; CPU-tier blocks count
        ``ROUTER_CPU_WEIGHT`` each (llm-d's per-tier weights), so a tier makes this a float."""
        if self.cpu_hashes is None:
            return leading_blocks(hashes, self.hashes, max_blocks)
        g, c = self.prefix_blocks_by_tier(hashes, max_blocks)
        return g + ROUTER_CPU_WEIGHT * c if c else g


class PublishedView:
    """Snapshots of every replica, refreshed at most every ``interval_s`` simulated seconds."""

    __slots__ = ("interval_s", "_tick", "_snaps")

    def __init__(self, interval_s: float) -> None:
        if not interval_s >= 0:
            raise ValueError(f"cache_publish_interval_s must be >= 0, got {interval_s}")
        self.interval_s = float(interval_s)
        self._tick = None
        self._snaps: list[ReplicaSnapshot] = []

    def get(self, cluster: Any) -> list[ReplicaSnapshot]:
        iv = self.interval_s
        now = cluster.now_s
        tick = (now // iv) if iv > 0 else now
        if tick != self._tick or iv == 0:
            cluster.sync()
            if not self._snaps:
                self._snaps = [ReplicaSnapshot(rep) for rep in cluster.replicas]
            else:
                for snap, rep in zip(self._snaps, cluster.replicas):
                    snap.refresh(rep)
            self._tick = tick
        return self._snaps
