"""Speculative iterations applied several at a time (``sim/spec_ahead.py``) give bit for bit the
results of one event per iteration (``max_run_iterations=1`` never takes that path): per-request
table, window statistics (TBT percentiles and mean, KV occupancy, acceptance) and the replicas'
random streams, across schedulers, tenants with acceptance 0 / 0.6 / 1, priority preemption,
queues that fill and drain, tight KV (preemption at a boundary), windows and knob changes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from inferencegym.sim import Cluster, ClusterConfig, ReplicaConfig, TenantSpec
from inferencegym.sim.spec_ahead import advance_spec

from sim_util import clone, poisson_requests, results_equal

TENANTS = (TenantSpec(name="a", spec_acceptance=0.6), TenantSpec(name="b", priority=1, spec_acceptance=1.0),
           TenantSpec(name="c", spec_acceptance=0.0))


def _run(cfg: ClusterConfig, reqs, seed: int, reference: bool, knobs: bool):
    c = Cluster(cfg, np.random.default_rng(seed), max_run_iterations=1 if reference else None,
                check_invariants=True)
    c.submit(reqs)
    stats = []
    t = 0.0
    while c.n_completed + c.n_rejected < c.n_submitted:
        t += 0.7
        c.run_until(t)
        if knobs and round(t / 0.7) % 5 == 0:
            c.apply_replica_config(None, speculation_depth=int(1 + round(t / 0.7) % 4),
                                   batch_cap=24 + 8 * (round(t / 0.7) % 3))
        stats.append(dataclasses.asdict(c.window_stats(reset=True)))
    return c, stats


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float):
        return (a != a and b != b) or a.hex() == b.hex()
    return a == b


@pytest.mark.parametrize("scheduler,kv,replicas,router,knobs,seed", [
    ("vllm", 0.1, 2, "least_outstanding_requests", False, 1),
    ("vllm", 0.03, 1, "round_robin", False, 2),        # tight KV: preemptions at iteration boundaries
    ("sarathi", 0.08, 3, "power_of_two_choices", True, 3),
    ("static", 0.2, 2, "random", False, 4),
    ("vllm", 0.2, 2, "round_robin", True, 5),
    ("vllm-v0", 0.1, 2, "least_outstanding_requests", False, 6),  # API server in the engine process
])
def test_spec_ahead_is_bit_identical_to_one_event_per_iteration(scheduler, kv, replicas, router, knobs, seed):
    profile = "vllm-v0" if scheduler == "vllm-v0" else "vllm-v1"
    scheduler = "vllm" if scheduler == "vllm-v0" else scheduler
    cfg = ClusterConfig(replica=ReplicaConfig(scheduler=scheduler, kv_budget_fraction=kv, speculation_depth=3,
                                              batch_cap=32, engine_profile=profile),
                        num_replicas=replicas, router=router, tenants=TENANTS, priority_routing=True)
    reqs = poisson_requests(np.random.default_rng(seed), rate=14.0 * replicas, duration_s=6.0,
                            output=(1, 300), tenants=3)
    fast, fs = _run(cfg, clone(reqs), seed, False, knobs)
    ref, rs = _run(cfg, clone(reqs), seed, True, knobs)
    assert results_equal(fast.results(), ref.results())
    assert len(fs) == len(rs) and all(_same(a, b) for a, b in zip(fs, rs))
    for x, y in zip(fast.replicas, ref.replicas):  # the same uniforms consumed
        assert x.rng.bit_generator.state == y.rng.bit_generator.state
        assert x._ubuf[x._ui:x._ui + 50] == y._ubuf[y._ui:y._ui + 50]


@pytest.mark.python_internals
def test_spec_ahead_runs_many_iterations_per_event():
    """The fast path is taken: far fewer step events than speculative iterations."""
    cfg = ClusterConfig(replica=ReplicaConfig(kv_budget_fraction=0.2, speculation_depth=3), num_replicas=1,
                        tenants=TENANTS)
    reqs = poisson_requests(np.random.default_rng(0), rate=4.0, duration_s=5.0, output=(200, 400), tenants=3)
    c = Cluster(cfg, np.random.default_rng(0))
    calls = []
    import inferencegym.sim.cluster as cl
    orig = cl.advance_spec

    def counting(rep, lim):
        i0 = rep.iterations
        end = orig(rep, lim)
        calls.append(rep.iterations - i0)
        return end

    cl.advance_spec = counting
    try:
        c.submit(reqs)
        c.drain()
    finally:
        cl.advance_spec = orig
    assert sum(calls) > 5 * len(calls) > 0
    assert advance_spec is orig
