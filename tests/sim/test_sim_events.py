"""EventQueue ordering (arrivals kept apart, popped in the order of one heap) and the replica's
window counters object."""

from __future__ import annotations

import heapq
import math
import random

import numpy as np
import pytest
from sim_util import cfg, poisson_requests

from inferencegym.sim import Cluster
from inferencegym.sim.events import EV_ARRIVAL, EV_STEP, EV_TRANSFER, EventQueue
from inferencegym.sim.metrics import ReplicaWindow


def test_event_queue_orders_by_time_then_priority_then_scheduling_order():
    q = EventQueue()
    assert len(q) == 0 and q.peek() is None and not q
    q.schedule(2.0, 0, "late")
    q.schedule(1.0, 2, "arrival")
    q.schedule(1.0, 0, "step-a")
    q.schedule(1.0, 0, "step-b")
    q.schedule(1.0, 1, "transfer")
    assert len(q) == 5 and q.peek()[3] == "step-a"
    assert [e[3] for e in q.until(1.0)] == ["step-a", "step-b", "transfer", "arrival"]
    assert len(q) == 1 and q.pop()[3] == "late"


def test_event_queue_until_sees_events_scheduled_while_draining():
    q = EventQueue()
    q.schedule(0.0, 0, 0)
    seen = []
    for ev in q.until(3.0):
        seen.append(ev[0])
        if ev[0] < 5:
            q.schedule(ev[0] + 1.0, 0, 0)
    assert seen == [0.0, 1.0, 2.0, 3.0] and q.peek()[0] == 4.0


@pytest.mark.parametrize("seed", range(20))
def test_event_queue_pops_in_the_order_of_one_heap(seed):
    # arrivals (kept in their own sorted list) mixed with steps and transfers, out-of-order
    # arrivals, ties on time, pops, peeks and drains: the order of one heap of (time, priority, seq)
    rnd = random.Random(seed)
    q, ref, seq = EventQueue(), [], 0

    def add(t, p):
        nonlocal seq
        seq += 1
        q.schedule(t, p, seq)
        heapq.heappush(ref, (t, p, seq))

    for i in range(rnd.choice([0, 5, 200])):  # a run's requests, submitted in arrival order
        add(float(i // 3), EV_ARRIVAL)
    now = 0.0
    for _ in range(300):
        op = rnd.random()
        if op < 0.5:
            add(now + rnd.choice([0.0, 0.5, 1.0, rnd.random() * 20]), rnd.choice([EV_STEP, EV_TRANSFER, EV_ARRIVAL]))
        elif op < 0.7 and ref:
            ev, want = q.pop(), heapq.heappop(ref)
            assert ev[:3] == want and ev[3] == want[2]
            now = ev[0]
        elif op < 0.8:
            t = now + rnd.random() * 3
            got = [ev[:3] for ev in q.until(t)]
            want = []
            while ref and ref[0][0] <= t:
                want.append(heapq.heappop(ref))
            assert got == want
            now = max(now, got[-1][0]) if got else now
        assert len(q) == len(ref) and bool(q) == bool(ref)
        assert (q.peek() or (None,) * 3)[:3] == (ref[0] if ref else (None,) * 3)
        others = [k[0] for k in ref if k[1] > 0]
        assert q.next_other() == (min(others) if others else math.inf)
        assert sorted(ev[:3] for ev in q) == sorted(ref)


def test_two_queues_do_not_share_counters():
    a, b = EventQueue(), EventQueue()
    a.schedule(1.0, 0, "x")
    b.schedule(1.0, 0, "y")
    assert a.pop()[2] == b.pop()[2] == 1


def test_replica_window_reset_starts_a_new_window():
    w = ReplicaWindow(3)
    w.add_tbt(0.1, 0.0, 1, 2.0, 1)
    w.add_run(0.02, 0.001, 5, 2, 3, {0.5: [1, 0, 0]}, [0, 2, 0], [1, 2, 0])
    w.tokens_out = 7
    w.prefix_query_tokens = 100
    # total: the gap, the stalled ones (1 sample), the back-to-back first gap and the rest of the run
    assert len(w.tbt) == 4 and len(w.ttbt[1]) == 2 and len(w.ttbt[0]) == 2 and len(w.ttbt[2]) == 0
    assert w.tbt.total_weight() == 2.0 + 1.0 + 2.0 + 3.0 * 4
    w.reset(4.0, 0.25)
    assert len(w.tbt) == 0 and all(len(t) == 0 for t in w.ttbt)
    assert w.tokens_out == 0 and w.prefix_query_tokens == 0 and w.kv_t == 4.0 and w.kv_max == 0.25


def test_cluster_window_reset_goes_through_the_replica():
    reqs = poisson_requests(np.random.default_rng(2), rate=5.0, duration_s=10.0)
    cl = Cluster(cfg(num_replicas=2), np.random.default_rng(0))
    cl.submit(reqs)
    cl.run_until(5.0)
    ws = cl.window_stats(reset=True)
    assert ws.output_tokens > 0
    for rep in cl.replicas:
        assert rep.win.tokens_out == 0 and len(rep.win.tbt) == 0 and rep.win.kv_t == 5.0
    assert cl.run_stats().output_tokens == 0  # the new window starts empty


@pytest.mark.python_internals  # reads class __annotations__ (none on a compiled class)
def test_replica_fulfils_the_declared_state_contract_of_its_bases():
    """``ReplicaAdvance`` and ``ReplicaAdmission`` declare the state they share with ``Replica``;
    a replica has all of it, and provides the methods they leave to it."""
    from inferencegym.sim.replica_admission import ReplicaAdmission
    from inferencegym.sim.replica_advance import ReplicaAdvance

    cl = Cluster(cfg(num_replicas=1), np.random.default_rng(0))
    rep = cl.replicas[0]
    declared = ReplicaAdvance.__annotations__
    assert len(declared) > 20
    missing = [a for a in declared if not hasattr(rep, a)]
    assert not missing, f"Replica does not set {missing}"
    assert type(rep)._kv_advance is not ReplicaAdvance._kv_advance
    admission = ReplicaAdmission.__annotations__
    assert len(admission) >= 10
    missing = [a for a in admission if not hasattr(rep, a)]
    assert not missing, f"Replica does not set {missing}"
    assert type(rep).max_kv_tokens is not ReplicaAdmission.max_kv_tokens
    assert type(rep).enqueue is not ReplicaAdmission.enqueue


@pytest.mark.python_internals  # reads class __annotations__ (none on a compiled class)
def test_cluster_fulfils_the_declared_state_contract_of_its_readout_base():
    """``ClusterReadout`` declares the state it reads from ``Cluster``; a cluster has all of it."""
    from inferencegym.sim.cluster_readout import ClusterReadout

    cl = Cluster(cfg(num_replicas=2), np.random.default_rng(0))
    declared = ClusterReadout.__annotations__
    assert len(declared) >= 8
    missing = [a for a in declared if not hasattr(cl, a)]
    assert not missing, f"Cluster does not set {missing}"


def test_event_queue_tracks_the_next_arrival_or_transfer_past_replica_steps():
    """``next_other`` is the earliest queued event of priority > 0, kept through pops."""
    import math

    from inferencegym.sim.events import EV_ARRIVAL, EV_STEP, EV_TRANSFER, EventQueue

    q = EventQueue()
    assert q.next_other() == math.inf
    q.schedule(1.0, EV_STEP, 0)
    q.schedule(3.0, EV_ARRIVAL, "a")
    q.schedule(2.0, EV_TRANSFER, "t")
    q.schedule(2.0, EV_STEP, 1)
    assert q.next_other() == 2.0
    assert [e[1] for e in q.until(2.0)] == [EV_STEP, EV_STEP, EV_TRANSFER]
    assert q.next_other() == 3.0
    assert q.pop()[3] == "a" and q.next_other() == math.inf
