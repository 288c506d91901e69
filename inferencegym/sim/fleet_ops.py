"""The narrow hook between the replica lifecycle and the cluster simulator.

Four operations on a ``Cluster`` the lifecycle needs and nothing else does: restrict routing to
serving replicas (``Cluster.routable``), evict a replica's requests (crash, drain deadline), put
requests back in as arrivals at the current time (retries, deferred admissions), replace a slot's
replica by a fresh one (a new node starts with an empty cache), and slow a replica down (straggler).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .replica import IDLE, Replica

if TYPE_CHECKING:
    from .cluster import Cluster
    from .request import Request

EV_ARRIVAL = 2  # the cluster's arrival event priority (sim/cluster.py)


class SlowModel:
    """An execution model whose iterations take ``factor`` times longer (a straggling replica)."""

    def __init__(self, base, factor: float) -> None:
        self.base = base
        self.factor = float(factor)

    def iteration_time_s(self, *args, **kw) -> float:
        return self.base.iteration_time_s(*args, **kw) * self.factor

    def decode_coeffs(self, *args, **kw) -> tuple[float, float]:
        a, b = self.base.decode_coeffs(*args, **kw)
        return a * self.factor, b * self.factor

    def __getattr__(self, name: str):
        return getattr(self.base, name)


def set_slowdown(cluster: "Cluster", rid: int, factor: float) -> None:
    """From the replica's next iteration on, its iterations take ``factor`` times the normal time."""
    rep = cluster.replicas[rid]
    base = rep.model.base if isinstance(rep.model, SlowModel) else rep.model
    rep.model = base if factor == 1.0 else SlowModel(base, factor)
    rep._coeffs = {}


def evict(cluster: "Cluster", rid: int) -> list["Request"]:
    """Take every request off replica ``rid`` (queued and running), as a crash or a drain deadline
    does. Running ones lose their KV cache: like a vLLM recompute preemption they keep the tokens
    already streamed and must prefill prompt + generated tokens again wherever they go next."""
    rep = cluster.replicas[rid]
    now = cluster.now_s
    rep.now = now
    rep.sync(now)
    out: list = []
    for r in rep.running:
        rep.kv.release(r)
        r.kv_tokens = 0
        r.kv_blocks = 0
        r.shared_blocks = 0
        r.prefilled_tokens = 0
        r.prefill_target = r.prompt_tokens + r.generated_tokens
        out.append(r)
    for q in (rep.prio_waiting, rep.waiting):
        for r in q:
            r.prefilled_tokens = 0
            r.prefill_target = r.prompt_tokens + r.generated_tokens
            out.append(r)
        q.clear()
    rep.running = []
    rep.seg_decodes = []
    rep.it_chunks = []
    rep.state = IDLE
    rep.version += 1  # its pending step event is now stale
    out.sort(key=lambda r: r.req_id)
    return out


def inject(cluster: "Cluster", reqs: list["Request"], *, fresh: bool) -> None:
    """Arrivals at the current time: ``fresh`` ones were never submitted (deferred by admission
    control: their ``arrival_s`` stays the original, so their wait counts in TTFT); the others are
    evicted requests coming back (already counted as submitted)."""
    now = cluster.now_s
    for r in reqs:
        if fresh:
            if r.prefill_target != 0 or r.replica_id != -1:
                raise ValueError(f"request {r.req_id} was already submitted")
            r.prefill_target = r.prompt_tokens
            cluster.requests.append(r)
            cluster.ledger.submitted += 1
        else:
            cluster.ledger.win_arrivals -= 1  # counted once, at its first arrival
        cluster.events.schedule(now, EV_ARRIVAL, r)


def fresh_replica(cluster: "Cluster", rid: int, rng: np.random.Generator) -> None:
    """Replace slot ``rid``'s replica by a new, empty one (a new node: empty KV and prefix cache).
    The old one must hold no request."""
    old = cluster.replicas[rid]
    assert not old.running and old.queued() == 0, "fresh_replica on a replica that holds requests"
    base = old.model.base if isinstance(old.model, SlowModel) else old.model
    new = Replica(replica_id=rid, config=old.cfg, model=base, rng=rng, tenant_alpha=old.tenant_alpha,
                  recent_window=old.recent_ttft.maxlen or 32, on_reject=cluster.ledger.reject)
    new.version = old.version + 1  # events of the old replica stay stale
    new.priority_on = old.priority_on
    new.max_run = old.max_run
    new.now = cluster.now_s
    new.reset_window(cluster.now_s)
    new.win.merge_tbt = old.win.merge_tbt  # (``percentiles_only_tbt`` and ``skip_tenant_tbt`` hold for the slot)
    if old.win.ttbt is None:
        new.win.ttbt = None
    cluster.replicas[rid] = new
