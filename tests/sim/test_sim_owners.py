"""One owner per decision inside the simulator (issue 24): rejection, decode placement, completion,
priority queue membership each decided in one place."""

from __future__ import annotations

import numpy as np
import pytest

from inferencegym.sim import Cluster, ClusterConfig, ReplicaConfig, Request, TenantSpec

SMALL = ReplicaConfig(model="llama-2-7b", gpu="a100-80gb", kv_budget_fraction=0.02)


def test_a_request_that_can_never_fit_is_rejected_once_with_the_one_message():
    cl = Cluster(ClusterConfig(replica=SMALL, num_replicas=2, router="round_robin"), np.random.default_rng(0))
    cap = cl.replicas[0].kv.capacity_blocks * 16
    big = Request(req_id=0, arrival_s=0.0, prompt_tokens=cap, output_tokens=10)
    ok = Request(req_id=1, arrival_s=0.1, prompt_tokens=100, output_tokens=5)
    cl.submit([big, ok])
    cl.drain()
    assert cl.n_rejected == 1 and cl.n_completed == 1
    assert big.rejected_reason.startswith(f"needs {-(-(cap + 9) // 16)} KV blocks at full length")
    assert cl.run_stats().rejections == 1
    assert not hasattr(cl.replicas[0], "rejected")  # no mailbox to drain


def test_shrinking_the_cache_rejects_through_the_same_rule():
    cl = Cluster(ClusterConfig(replica=ReplicaConfig(kv_budget_fraction=0.05)), np.random.default_rng(0))
    cap = cl.replicas[0].kv.capacity_blocks * 16
    reqs = [Request(req_id=i, arrival_s=0.0, prompt_tokens=cap // 2, output_tokens=50) for i in range(3)]
    cl.submit(reqs)
    cl.run_until(0.001)
    cl.apply_replica_config(kv_budget_fraction=0.01)
    cl.drain()
    rejected = [r for r in reqs if r.rejected_reason is not None]
    assert rejected and all("KV blocks at full length" in r.rejected_reason for r in rejected)
    assert cl.n_rejected == len(rejected) and cl.n_completed + cl.n_rejected == 3


def test_decode_placement_goes_through_a_registered_router_and_ties_rotate():
    cfg = ClusterConfig(replica=ReplicaConfig(kv_budget_fraction=0.3), num_replicas=4, router="round_robin",
                        disaggregate=True, prefill_replicas=1)
    cl = Cluster(cfg, np.random.default_rng(0))
    # one request at a time: every decode replica is idle at each handoff (a tie)
    reqs = [Request(req_id=i, arrival_s=10.0 * i, prompt_tokens=64, output_tokens=4) for i in range(6)]
    cl.submit(reqs)
    cl.drain()
    assert [r.replica_id for r in reqs] == [1, 2, 3, 1, 2, 3]  # not always replica 1
    assert all(r.prefill_replica_id == 0 for r in reqs)
    with pytest.raises(ValueError, match="unknown decode_router 'nope'"):
        Cluster(ClusterConfig(num_replicas=2, disaggregate=True, decode_router="nope"))


def test_a_one_token_request_completes_at_its_kv_arrival_once():
    cfg = ClusterConfig(num_replicas=2, disaggregate=True, prefill_replicas=1)
    cl = Cluster(cfg, np.random.default_rng(0))
    r = Request(req_id=0, arrival_s=0.0, prompt_tokens=64, output_tokens=1)
    cl.submit([r])
    cl.drain()
    assert cl.n_completed == 1 and r.completion_s == r.first_token_s and r.replica_id == 1


def test_priority_queue_membership_is_decided_by_the_replica():
    two = (TenantSpec(name="be"), TenantSpec(name="gold", priority=1))
    cl = Cluster(ClusterConfig(replica=ReplicaConfig(batch_cap=1), tenants=two), np.random.default_rng(0))
    reqs = [Request(req_id=i, arrival_s=0.0, prompt_tokens=32, output_tokens=50, tenant=i % 2,
                    priority=i % 2) for i in range(5)]
    cl.submit(reqs)
    cl.run_until(0.0)
    rep = cl.replicas[0]
    assert not rep.prio_waiting and len(rep.waiting) == 4
    cl.set_priority_routing(True)
    assert [r.req_id for r in rep.prio_waiting] == [1, 3] and [r.req_id for r in rep.waiting] == [2, 4]
    late = Request(req_id=9, arrival_s=1.0, prompt_tokens=32, output_tokens=5, tenant=1, priority=1)
    cl.submit([late])
    cl.run_until(1.0)
    assert rep.prio_waiting[-1] is late
