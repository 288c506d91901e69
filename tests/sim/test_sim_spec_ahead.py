"""Speculative iterations applied several at a time (``sim/spec_ahead.py``) give bit for bit the
results of one event per iteration (``max_run_iterations=1`` never takes that path): per-request
table, window statistics (TBT percentiles and mean, KV occupancy, acceptance) and the replicas'
random streams, across schedulers, tenants with acceptance 0 / 0.6 / 1, priority preemption,
queues that fill and drain, tight KV (preemption at a boundary), windows and knob changes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferencegym.sim import Cluster, ClusterConfig, ReplicaConfig, TenantSpec
from inferencegym.sim.spec_ahead import advance_spec

from sim_util import clone, poisson_requests, results_equal, same_bits

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
    assert len(fs) == len(rs) and all(same_bits(a, b) for a, b in zip(fs, rs))
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

    def counting(rep, lim, *args):
        i0 = rep.iterations
        end = orig(rep, lim, *args)
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


def _chunked(seed: int, reference: bool, *, chunk: int, kv: float, prompt_max: int, prio: bool,
             depth: int = 3, windows: bool = True):
    cfg = ClusterConfig(replica=ReplicaConfig(scheduler="sarathi", kv_budget_fraction=kv, speculation_depth=depth,
                                              batch_cap=32, chunk_size=chunk),
                        num_replicas=1, router="round_robin", tenants=TENANTS, priority_routing=prio)
    reqs = poisson_requests(np.random.default_rng(seed), rate=6.0, duration_s=4.0, prompt=(16, prompt_max),
                            output=(1, 200), tenants=3)
    if windows:
        return _run(cfg, reqs, seed, reference, False)
    c = Cluster(cfg, np.random.default_rng(seed), max_run_iterations=1 if reference else None,
                check_invariants=True)
    c.submit(reqs)
    c.drain()
    return c, []


def _assert_same(fast, fs, ref, rs):
    assert results_equal(fast.results(), ref.results())
    assert len(fs) == len(rs) and all(same_bits(a, b) for a, b in zip(fs, rs))
    for x, y in zip(fast.replicas, ref.replicas):  # the same uniforms consumed, the same state left
        assert x.rng.bit_generator.state == y.rng.bit_generator.state
        assert x._ubuf[x._ui:x._ui + 50] == y._ubuf[y._ui:y._ui + 50]
        assert x.iterations == y.iterations and x.win.tbt.d0 == y.win.tbt.d0


@pytest.mark.parametrize("chunk,kv,prompt_max,prio,seed", [
    (256, 0.3, 3000, False, 5),     # prompts of up to 12 chunks beside the decodes
    (256, 0.3, 3000, True, 4),      # priority admissions that preempt mid-prompt
    (128, 0.06, 4000, True, 7),     # tight KV: preemptions at chunk boundaries
    (512, 0.3, 700, False, 8),      # short prompts: several chunks share an iteration
])
def test_spec_ahead_with_prompt_chunks_is_bit_identical(chunk, kv, prompt_max, prio, seed):
    """Chunked prefill (sarathi): iterations that carry a prompt chunk beside the speculating
    decodes are applied several at a time too (``sim/spec_chunks.py``), with the same results."""
    fast, fs = _chunked(seed, False, chunk=chunk, kv=kv, prompt_max=prompt_max, prio=prio)
    ref, rs = _chunked(seed, True, chunk=chunk, kv=kv, prompt_max=prompt_max, prio=prio)
    _assert_same(fast, fs, ref, rs)


@pytest.mark.python_internals  # patches the cluster module's advance_spec
def test_spec_ahead_carries_prompt_chunks():
    """The chunk iterations are taken by the fast path: a 20-chunk prompt beside decoding
    sequences costs a few events, not one per chunk."""
    import inferencegym.sim.cluster as cl
    cfg = ClusterConfig(replica=ReplicaConfig(scheduler="sarathi", speculation_depth=3, chunk_size=256),
                        num_replicas=1, tenants=TENANTS)
    reqs = poisson_requests(np.random.default_rng(0), rate=2.0, duration_s=1.0, prompt=64, output=(300, 400),
                            tenants=3)
    reqs += poisson_requests(np.random.default_rng(1), rate=1.0, duration_s=1.0, prompt=5120, output=20,
                             start_s=1.5, first_id=len(reqs))
    assert reqs[-1].prompt_tokens == 5120
    chunk_iters = []
    orig = cl.advance_spec

    def counting(rep, lim, *args):
        i0 = rep.iterations
        had = bool(rep.it_chunks)
        end = orig(rep, lim, *args)
        if had:
            chunk_iters.append(rep.iterations - i0)
        return end

    cl.advance_spec = counting
    try:
        c = Cluster(cfg, np.random.default_rng(0))
        c.submit(reqs)
        c.drain()
    finally:
        cl.advance_spec = orig
    assert sum(chunk_iters) >= 15 and max(chunk_iters) >= 5


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), chunk=st.sampled_from([64, 200, 512]), kv=st.sampled_from([0.05, 0.1, 0.3]),
       prompt_max=st.integers(100, 5000), prio=st.booleans(), depth=st.integers(1, 5), windows=st.booleans())
def test_spec_ahead_chunks_random_configs(seed, chunk, kv, prompt_max, prio, depth, windows):
    """Randomised: seeds, chunk sizes, KV budgets, prompt lengths, depths, priority, windows or a
    drain: the fast path gives the one-event-per-iteration results and random stream."""
    kw = dict(chunk=chunk, kv=kv, prompt_max=prompt_max, prio=prio, depth=depth, windows=windows)
    fast, fs = _chunked(seed, False, **kw)
    ref, rs = _chunked(seed, True, **kw)
    _assert_same(fast, fs, ref, rs)


def _step_events(cfg, reqs, seed):
    """Run with windows, counting the replicas' step events (queued or claimed)."""
    from inferencegym.sim.events import EV_STEP, EventQueue
    steps = [0]
    sched, claim = EventQueue.schedule, EventQueue.claim_first

    def counting_schedule(self, time, priority, a, b=None):
        steps[0] += priority == EV_STEP
        return sched(self, time, priority, a, b)

    def counting_claim(self, time):
        got = claim(self, time)
        steps[0] += got
        return got

    EventQueue.schedule, EventQueue.claim_first = counting_schedule, counting_claim
    try:
        c, stats = _run(cfg, clone(reqs), seed, False, False)
    finally:
        EventQueue.schedule, EventQueue.claim_first = sched, claim
    return c, stats, steps[0]


def test_spec_ahead_applies_completions_and_first_tokens():
    """Iterations in which a sequence finishes or a prompt completes are applied by the fast path
    too (the step event's code, then the ordinary plan): most speculative iterations of a
    one-replica run between windows need no step event, with the same results as one event per
    iteration."""
    cfg = ClusterConfig(replica=ReplicaConfig(scheduler="sarathi", speculation_depth=3, chunk_size=512,
                                              kv_budget_fraction=0.3),
                        num_replicas=1, tenants=TENANTS)
    reqs = poisson_requests(np.random.default_rng(3), rate=8.0, duration_s=6.0, prompt=(64, 400),
                            output=(20, 200), tenants=3)
    fast, fs, steps = _step_events(cfg, reqs, 3)
    ref, rs = _run(cfg, clone(reqs), 3, True, False)
    _assert_same(fast, fs, ref, rs)
    assert fast.n_completed == len(reqs) and steps < 0.15 * fast.replicas[0].iterations
