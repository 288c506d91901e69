"""Chunked-prefill iterations without speculation applied several at a time
(``sim/chunk_ahead.py``) give bit for bit the results of one event per chunk iteration (the
same cluster with ``advance_chunks`` replaced by "leave it to the event"; the closed-form decode
runs stay, so ``max_run_iterations=1`` is no reference here): per-request table, window
statistics, KV occupancy and the replicas' state, with one or several tenants, priority
preemption, tight KV, queues, windows or a drain, knob changes; and the path is taken."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferencegym.sim import Cluster, ClusterConfig, ReplicaConfig, TenantSpec

from sim_util import clone, poisson_requests, results_equal, same_bits

TENANTS = (TenantSpec(name="a"), TenantSpec(name="b", priority=1))


def _cfg(chunk: int, kv: float, prio: bool, tenants: int, replicas: int = 1) -> ClusterConfig:
    return ClusterConfig(replica=ReplicaConfig(scheduler="sarathi", kv_budget_fraction=kv, batch_cap=48,
                                               chunk_size=chunk),
                         num_replicas=replicas, router="round_robin", tenants=TENANTS[:tenants],
                         priority_routing=prio)


def _leave_to_event(rep, lim, *args):
    return rep.seg_end


def _run(cfg: ClusterConfig, reqs, seed: int, reference: bool, windows: bool, knobs: bool = False):
    import inferencegym.sim.cluster as cl
    orig = cl.advance_chunks
    if reference:
        cl.advance_chunks = _leave_to_event
    try:
        return _simulate(cfg, reqs, seed, windows, knobs)
    finally:
        cl.advance_chunks = orig


def _simulate(cfg: ClusterConfig, reqs, seed: int, windows: bool, knobs: bool):
    c = Cluster(cfg, np.random.default_rng(seed), check_invariants=True)
    c.submit(clone(reqs))
    stats = []
    if not windows:
        c.drain()
        return c, stats
    t = 0.0
    while c.n_completed + c.n_rejected < c.n_submitted:
        t += 0.7
        c.run_until(t)
        if knobs and round(t / 0.7) % 4 == 0:
            c.apply_replica_config(None, chunk_size=128 + 128 * (round(t / 0.7) % 3))
        stats.append(dataclasses.asdict(c.window_stats(reset=True)))
    return c, stats


def _check(cfg, reqs, seed, windows, knobs=False):
    fast, fs = _run(cfg, reqs, seed, False, windows, knobs)
    ref, rs = _run(cfg, reqs, seed, True, windows, knobs)
    assert results_equal(fast.results(), ref.results())
    assert len(fs) == len(rs) and all(same_bits(a, b) for a, b in zip(fs, rs))
    for x, y in zip(fast.replicas, ref.replicas):
        assert x.iterations == y.iterations and x.win.tbt.d0 == y.win.tbt.d0 and x.win.tbt.w == y.win.tbt.w
        assert x.win.kv_area.hex() == y.win.kv_area.hex() and x.kv.used_blocks == y.kv.used_blocks
        assert x.prompt_tokens_done == y.prompt_tokens_done


@pytest.mark.parametrize("chunk,kv,prio,tenants,replicas,windows,knobs,seed", [
    (256, 0.3, False, 1, 1, True, False, 1),    # long prompts in chunks beside the decodes
    (256, 0.3, True, 2, 1, True, False, 2),     # two tenants (per-tenant TBT), priority preemption
    (128, 0.05, True, 2, 1, True, False, 3),    # tight KV: preemption at chunk boundaries
    (512, 0.3, False, 2, 2, True, True, 4),     # two replicas, chunk-size changes between windows
    (256, 0.2, False, 1, 1, False, False, 5),   # a drain (completions left to the events)
])
def test_chunk_ahead_is_bit_identical_to_one_event_per_iteration(chunk, kv, prio, tenants, replicas, windows,
                                                                  knobs, seed):
    reqs = poisson_requests(np.random.default_rng(seed), rate=5.0 * replicas, duration_s=5.0,
                            prompt=(16, 3000), output=(1, 200), tenants=tenants,
                            priority_tenant=1 if tenants > 1 else None)
    _check(_cfg(chunk, kv, prio, tenants, replicas), reqs, seed, windows, knobs)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), chunk=st.sampled_from([64, 200, 512]), kv=st.sampled_from([0.05, 0.1, 0.3]),
       prompt_max=st.integers(100, 5000), prio=st.booleans(), tenants=st.sampled_from([1, 2]),
       windows=st.booleans())
def test_chunk_ahead_random_configs(seed, chunk, kv, prompt_max, prio, tenants, windows):
    reqs = poisson_requests(np.random.default_rng(seed), rate=6.0, duration_s=4.0, prompt=(16, prompt_max),
                            output=(1, 150), tenants=tenants, priority_tenant=1 if tenants > 1 else None)
    _check(_cfg(chunk, kv, prio, tenants), reqs, seed, windows)


def test_chunk_ahead_carries_long_prompts():
    """A 20-chunk prompt beside decoding sequences: its chunk iterations avoid the event queue."""
    import inferencegym.sim.replica_advance as ra
    reqs = poisson_requests(np.random.default_rng(0), rate=3.0, duration_s=1.0, prompt=64, output=(300, 400))
    reqs += poisson_requests(np.random.default_rng(1), rate=2.0, duration_s=1.0, prompt=5120, output=20,
                             start_s=1.5, first_id=len(reqs))
    assert any(r.prompt_tokens == 5120 for r in reqs)
    events = []
    orig = ra.ReplicaAdvance._apply_iter

    def counting(self, now):
        events.append(now)
        return orig(self, now)

    ra.ReplicaAdvance._apply_iter = counting
    try:
        fast, _ = _run(_cfg(256, 0.3, False, 1), reqs, 0, False, True)
    finally:
        ra.ReplicaAdvance._apply_iter = orig
    chunked = sum(-(-r.prompt_tokens // 256) for r in reqs if r.prompt_tokens > 256)
    assert chunked >= 20 and len(events) < 0.5 * chunked


@pytest.mark.python_internals  # patches the cluster module's advance_spec (the event-path reference)
@pytest.mark.parametrize("depth", [0, 3])
def test_disaggregated_chunks_are_bit_identical(depth):
    """Prefill / decode disaggregation (prompts handed off with a KV transfer: their last chunk is
    left to the step event), with and without speculation on the decode replicas."""
    import inferencegym.sim.cluster as cl
    cfg = ClusterConfig(replica=ReplicaConfig(scheduler="sarathi", kv_budget_fraction=0.3, chunk_size=256,
                                              speculation_depth=depth),
                        num_replicas=3, tenants=TENANTS, disaggregate=True, prefill_replicas=1)
    reqs = poisson_requests(np.random.default_rng(9), rate=6.0, duration_s=4.0, prompt=(16, 3000), output=(1, 150),
                            tenants=2, priority_tenant=1)
    fast, fs = _run(cfg, reqs, 9, False, True)
    orig = cl.advance_spec
    cl.advance_spec = _leave_to_event  # the reference: every chunk and speculative iteration an event
    try:
        ref, rs = _run(cfg, reqs, 9, True, True)
    finally:
        cl.advance_spec = orig
    assert results_equal(fast.results(), ref.results())
    assert len(fs) == len(rs) and all(same_bits(a, b) for a, b in zip(fs, rs))
    assert fast.n_completed == ref.n_completed > 0
