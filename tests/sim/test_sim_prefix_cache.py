"""Prefix caching (vLLM V1 automatic prefix caching): block accounting, LRU eviction, hit counting,
TTFT effect, identity with today's results when nothing is shared."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sim_util import (
    cfg,
    clone,
    clone_with_hashes,
    poisson_requests,
    prefix_requests,
    results_equal,
    run,
)

from inferencegym.sim import Cluster, ExecutionModel, Request, TenantSpec
from inferencegym.sim.kv_cache import KVCache, KVCacheError

_PREFIX_FIELDS = {"prefix_hit_rate", "prefix_cached_tokens", "prefix_cache_occupancy", "replica_prefix_hit_rate"}


# ----------------------------------------------------------------------------- the cache itself
def _req(i, hashes, blocks):
    r = Request(req_id=i, arrival_s=0.0, prompt_tokens=16 * blocks, output_tokens=1, block_hashes=hashes)
    return r


def test_lru_eviction_order_and_referenced_blocks_are_never_evicted():
    kv = KVCache(capacity_tokens=16 * 10, block_size=16)
    a = _req(0, (1, 2, 3), 3)
    b = _req(1, (4, 5, 6), 3)
    for r in (a, b):
        kv.admit(r, 3, 0)
        kv.commit(r, 3)
    assert kv.used_blocks == 6 and kv.cached_blocks == 6 and kv.empty_blocks == 4
    kv.release(a)  # a's blocks go to the queue tail first: 3, 2, 1
    kv.release(b)  # then b's: 6, 5, 4
    assert kv.used_blocks == 0 and kv.n_cached == 6 and kv.free_blocks == 10
    kv.check([])
    kv.allocate(5)  # the 4 empty blocks first (freed earliest), then the least recently freed: 3
    assert kv.n_cached == 5
    assert kv.match((1, 2, 3), 3) == (2, 2)  # block 3 evicted: the run stops there
    assert kv.match((4, 5, 6), 3) == (3, 3)
    kv.free(5)
    c = _req(2, (4, 5, 6), 3)  # a hit takes b's blocks off the queue: referenced now
    kv.admit(c, 4, 3)
    assert kv.used_blocks == 4 and kv.ref == {4: 1, 5: 1, 6: 1}
    kv.allocate(kv.free_blocks)  # everything else, evicting every other cached block
    assert kv.n_cached == 0 and kv.ref == {4: 1, 5: 1, 6: 1}
    kv.check([c, _anon(kv.used_blocks - 4)])
    with pytest.raises(KVCacheError):
        kv.allocate(1)


def _anon(blocks):
    r = Request(req_id=99, arrival_s=0.0, prompt_tokens=1, output_tokens=1)
    r.kv_blocks = blocks
    return r


def test_duplicate_blocks_are_deduplicated_on_commit():
    kv = KVCache(capacity_tokens=16 * 8, block_size=16)
    a, b = _req(0, (1, 2), 2), _req(1, (1, 2), 2)
    kv.admit(a, 2, 0)
    kv.admit(b, 2, 0)  # admitted before a's blocks were computed: no hit
    kv.commit(a, 2)
    kv.commit(b, 2)  # same hashes: b's copies are freed, the cached ones shared
    assert kv.used_blocks == 2 and kv.ref == {1: 2, 2: 2}
    kv.check([a, b])
    kv.release(a)
    kv.release(b)
    assert kv.used_blocks == 0 and kv.n_cached == 2
    kv.check([])


# ----------------------------------------------------------------------------- in the simulator
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), scheduler=st.sampled_from(["vllm", "sarathi", "static"]),
       replicas=st.integers(1, 3), kv_frac=st.sampled_from([0.005, 0.01, 0.03, 1.0]),
       batch_cap=st.sampled_from([2, 32, 128]), block_size=st.sampled_from([16, 32]),
       n_prefixes=st.integers(1, 6), rate=st.floats(2.0, 30.0), disagg=st.booleans(), prio=st.booleans(),
       spec=st.sampled_from([0, 0, 3]), router=st.sampled_from(["round_robin", "least_kv_load", "random"]))
def test_prefix_cache_invariants_at_every_event(seed, scheduler, replicas, kv_frac, batch_cap, block_size,
                                                n_prefixes, rate, disagg, prio, spec, router):
    """in use + cached evictable + empty = capacity, reference counts positive and equal to the
    running requests' shared blocks, no referenced block in the free queue (so no request reads an
    evicted block): ``check_invariants`` asserts all of it after every event."""
    rng = np.random.default_rng(seed)
    reqs = prefix_requests(rng, rate=rate, duration_s=4.0, block_size=block_size, n_prefixes=n_prefixes,
                           tenants=2, priority_tenant=1)
    c = cfg(scheduler=scheduler, router=router, num_replicas=replicas, kv_budget_fraction=kv_frac,
            batch_cap=batch_cap, block_size=block_size, disaggregate=disagg and replicas > 1,
            prefill_replicas=1, priority_routing=prio, speculation_depth=spec,
            tenants=(TenantSpec(name="be"), TenantSpec(name="p", priority=1)))
    cl = run(c, reqs, seed=seed, check_invariants=True)
    for rep in cl.replicas:
        assert rep.kv.used_blocks == 0 and not rep.kv.ref and not rep.running
        assert rep.kv.n_cached <= rep.kv.capacity_blocks
    ws = cl.run_stats()
    hit = 0
    for r in reqs:
        assert 0 <= r.cached_tokens <= r.prompt_tokens - 1 and r.cached_tokens % block_size == 0
        hit += r.cached_tokens
        if r.rejected_reason is None:
            assert r.done and r.generated_tokens == r.output_tokens
    # each request's hit is counted once, at its first admission (not again after a recompute)
    assert ws.prefix_cached_tokens == hit
    assert np.isnan(ws.prefix_hit_rate) or 0.0 <= ws.prefix_hit_rate < 1.0


def test_no_shared_prefixes_is_bit_identical_to_caching_off():
    rng = np.random.default_rng(3)
    reqs = poisson_requests(rng, rate=10.0, duration_s=20.0, prompt=(16, 1500), output=(1, 300), tenants=2,
                            priority_tenant=1)
    for sched in ("vllm", "sarathi"):
        kw = {"scheduler": sched, "num_replicas": 3, "kv_budget_fraction": 0.02, "priority_routing": True,
              "tenants": (TenantSpec(name="be"), TenantSpec(name="p", priority=1))}
        on = run(cfg(prefix_caching=True, **kw), clone(reqs), seed=1, windows=2.0)
        off = run(cfg(prefix_caching=False, **kw), clone(reqs), seed=1, windows=2.0)
        a, b = on.results(), off.results()
        assert a["preemptions"].sum() > 0
        assert results_equal(a, b)
        wa, wb = on.run_stats().to_dict(), off.run_stats().to_dict()
        for k in _PREFIX_FIELDS:
            wa.pop(k)
            wb.pop(k)
        assert repr(wa) == repr(wb)


def test_prefix_caching_off_ignores_hashes():
    rng = np.random.default_rng(4)
    reqs = prefix_requests(rng, rate=8.0, duration_s=10.0, n_prefixes=2)
    off = run(cfg(prefix_caching=False, num_replicas=2), clone_with_hashes(reqs), seed=0)
    plain = run(cfg(num_replicas=2), clone(reqs), seed=0)  # same requests without hashes
    assert results_equal(off.results(), plain.results())
    assert off.run_stats().prefix_hit_rate == 0.0
    on = run(cfg(num_replicas=2), clone_with_hashes(reqs), seed=0)
    ws = on.run_stats()
    assert ws.prefix_hit_rate > 0.3 and ws.prefix_cache_occupancy > 0
    assert np.nanmean(on.results()["ttft_s"]) < np.nanmean(off.results()["ttft_s"])


@pytest.mark.parametrize("scheduler", ["vllm", "sarathi"])
def test_second_request_ttft_drops_by_the_prefill_time_of_the_shared_blocks(scheduler):
    bs, shared_blocks, prompt = 16, 60, 1000
    h1 = tuple(range(1, shared_blocks + 1)) + tuple(range(1000, 1000 + prompt // bs - shared_blocks))
    h2 = tuple(range(1, shared_blocks + 1)) + tuple(range(2000, 2000 + prompt // bs - shared_blocks))

    def go(caching: bool) -> Cluster:
        c = cfg(scheduler=scheduler, prefix_caching=caching, chunk_size=2048)
        return run(c, [Request(req_id=0, arrival_s=0.0, prompt_tokens=prompt, output_tokens=4, block_hashes=h1),
                       Request(req_id=1, arrival_s=5.0, prompt_tokens=prompt, output_tokens=4, block_hashes=h2)])

    on, off = go(True), go(False)
    m = ExecutionModel.from_preset(model="llama-2-7b", gpu="a100-80gb", tensor_parallel=1)
    cached = shared_blocks * bs
    saved = m.iteration_time_s([(prompt, 0)]) - m.iteration_time_s([(prompt - cached, cached)])
    r_on, r_off = on.requests[1], off.requests[1]
    assert r_on.cached_tokens == cached and r_off.cached_tokens == 0
    assert on.requests[0].ttft_s == off.requests[0].ttft_s  # nothing cached for the first one
    assert r_off.ttft_s - r_on.ttft_s == pytest.approx(saved, rel=1e-9, abs=1e-12)
    assert saved > 0.3 * m.iteration_time_s([(prompt, 0)])
    assert on.run_stats().prefix_hit_rate == pytest.approx(cached / (2 * prompt))


def test_last_block_is_always_computed():
    """A prompt that is entirely cached still computes its last block (vLLM)."""
    bs, prompt = 16, 320  # exactly 20 full blocks
    h = tuple(range(1, 21))
    cl = run(cfg(), [Request(req_id=0, arrival_s=0.0, prompt_tokens=prompt, output_tokens=2, block_hashes=h),
                     Request(req_id=1, arrival_s=5.0, prompt_tokens=prompt, output_tokens=2, block_hashes=h)])
    assert cl.requests[1].cached_tokens == prompt - bs


@pytest.mark.python_internals
def test_preempted_request_reuses_its_cache_but_counts_its_hit_once(monkeypatch):
    reuse = []
    admit = KVCache.admit

    def spy(self, r, blocks, hit):
        if r.preemptions and hit:
            reuse.append(r.req_id)  # a recompute found its (or another's) prefix still cached
        admit(self, r, blocks, hit)

    monkeypatch.setattr(KVCache, "admit", spy)
    rng = np.random.default_rng(11)
    reqs = prefix_requests(rng, rate=25.0, duration_s=10.0, n_prefixes=2, prefix_blocks=(20, 40),
                           output=(50, 400))
    cl = Cluster(cfg(kv_budget_fraction=0.01, num_replicas=1), np.random.default_rng(0), check_invariants=True)
    cl.submit(reqs)
    hit_tokens = 0
    t = 0.0
    while cl.n_completed + cl.n_rejected < cl.n_submitted:
        t += 1.0
        cl.run_until(t)
        ws = cl.window_stats(reset=True)
        hit_tokens += ws.prefix_cached_tokens
    assert any(r.preemptions for r in reqs) and reuse, "the scenario must preempt and reuse on recompute"
    assert hit_tokens == sum(r.cached_tokens for r in reqs)  # once per request, not per admission
    for r in reqs:
        assert r.cached_tokens <= r.prompt_tokens - 1


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), scheduler=st.sampled_from(["vllm", "sarathi", "static"]),
       kv_frac=st.sampled_from([0.01, 0.05, 1.0]), disagg=st.booleans())
def test_fast_path_equals_step_by_step_with_prefix_sharing(seed, scheduler, kv_frac, disagg):
    rng = np.random.default_rng(seed)
    reqs = prefix_requests(rng, rate=10.0, duration_s=5.0, n_prefixes=3)
    c = cfg(scheduler=scheduler, num_replicas=3, kv_budget_fraction=kv_frac, disaggregate=disagg,
            prefill_replicas=1)
    a = run(c, clone_with_hashes(reqs), seed=seed).results()
    b = run(c, clone_with_hashes(reqs), seed=seed, max_run_iterations=1).results()
    assert np.array_equal(a["cached_tokens"], b["cached_tokens"])
    assert np.array_equal(a["preemptions"], b["preemptions"])
    for k in ("first_token_s", "completion_s", "tbt_max_s"):
        np.testing.assert_allclose(a[k], b[k], rtol=1e-9, atol=1e-9, err_msg=k)


def test_duplicate_hashes_in_one_request_are_refused():
    cl = Cluster(cfg())
    bad = Request(req_id=0, arrival_s=0.0, prompt_tokens=64, output_tokens=1, block_hashes=(1, 2, 1))
    with pytest.raises(ValueError, match="block_hashes"):
        cl.submit([bad])
    long = Request(req_id=1, arrival_s=0.0, prompt_tokens=20, output_tokens=1, block_hashes=(1, 2))
    with pytest.raises(ValueError, match="block_hashes"):
        cl.submit([long])
    assert cl.n_submitted == 0


def test_victim_of_a_priority_admission_is_not_prefilled_while_queued():
    """Regression: under chunked prefill a best-effort request whose chunk was already planned could
    be preempted by a priority admission in the same plan; the iteration then advanced it while it
    sat in the queue (and could emit its first token from there). ``check_invariants`` now asserts
    that a queued request holds no progress."""
    rng = np.random.default_rng(335444150)
    reqs = prefix_requests(rng, rate=29.735979745321128, duration_s=4.0, n_prefixes=2, tenants=2,
                           priority_tenant=1)
    c = cfg(scheduler="sarathi", router="least_kv_load", num_replicas=3, kv_budget_fraction=0.03, batch_cap=2,
            priority_routing=True, tenants=(TenantSpec(name="be"), TenantSpec(name="p", priority=1)))
    for with_hashes in (False, True):
        rs = clone_with_hashes(reqs) if with_hashes else clone(reqs)
        run(c, rs, seed=335444150, check_invariants=True)
        assert sum(r.preemptions for r in rs) > 0
        assert all(r.done for r in rs if r.rejected_reason is None)
