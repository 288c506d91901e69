"""The CPU tier of the prefix cache: evicted GPU prefix blocks kept in host memory, reloaded over
PCIe when cheaper than recompute, hits accounted per tier, routers aware of the tier."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sim_util import cfg, clone_with_hashes, prefix_requests, run

from inferencegym.sim import Request, TenantSpec
from inferencegym.sim.cpu_kv import (
    LMCACHE_CALL_S,
    LMCACHE_CHUNK_TOKENS,
    LMCACHE_RETRIEVE_GB_S,
    LMCACHE_STORE_GB_S,
    OFFLOAD_COPY_S,
    RELOAD_LATENCY_S,
    ROUTER_CPU_WEIGHT,
    CPUKVTier,
)
from inferencegym.sim.execution import ExecutionModel
from inferencegym.sim.presets import get_gpu


def _group_requests(n=300, groups=40, prefix_blocks=100, seed=0):
    """Many long shared prefixes (more than a small GPU cache holds), Poisson arrivals."""
    rng = np.random.default_rng(seed)
    out, t = [], 0.0
    for i in range(n):
        t += rng.exponential(0.25)
        g = int(rng.integers(groups))
        hs = tuple((g, j) for j in range(prefix_blocks)) + tuple((g, 10_000 + i, j) for j in range(10))
        out.append(Request(req_id=i, arrival_s=t, prompt_tokens=16 * (prefix_blocks + 10), output_tokens=32,
                           block_hashes=hs))
    return out


def test_tier_is_lru_and_bounded():
    tier = CPUKVTier(capacity_blocks=3, block_bytes_per_gpu=1e6, link_gb_s=25.0)
    ev = tier.publish_events()
    for h in (1, 2, 3):
        tier.offload(h)
    tier.reload((1,), 0, 1)  # 1 becomes most recently used
    tier.offload(4)  # evicts 2, the least recently used
    assert list(tier.blocks) == [3, 1, 4]
    assert (2, False) in ev and (4, True) in ev
    assert tier.match((3, 1, 4, 5), 0, 10) == 3 and tier.match((3, 1, 4), 1, 2) == 1
    assert abs(tier.reload_time_s(10) - (2e-5 + 10 * 1e6 / 25e9)) < 1e-12
    tier.check()


def test_cpu_tier_raises_hit_rate_and_cuts_ttft_when_the_gpu_cache_is_too_small():
    base = dict(model="llama-2-7b", gpu="a100-80gb", kv_budget_fraction=0.05, num_replicas=2)
    off = run(cfg(**base), _group_requests(), check_invariants=True)
    on = run(cfg(cpu_kv_gb=40.0, **base), _group_requests(), check_invariants=True)
    t_off, t_on = off.prefix_hit_rate_by_tier(), on.prefix_hit_rate_by_tier()
    assert t_off["cpu"] == 0.0 and t_on["cpu"] > 0.3
    assert abs(t_on["gpu"] + t_on["cpu"] - on.run_stats().prefix_hit_rate) < 1e-9
    assert on.run_stats().prefix_hit_rate > off.run_stats().prefix_hit_rate + 0.3
    assert on.run_stats().ttft_s["p50"] < 0.7 * off.run_stats().ttft_s["p50"]
    assert sum(rep.cpu.reloaded_blocks for rep in on.replicas) > 0


def test_reload_is_skipped_when_recompute_is_cheaper():
    """A host link so slow that reloading costs more than recomputing: the tier is never read."""
    base = dict(model="llama-2-7b", gpu="a100-80gb", kv_budget_fraction=0.05, num_replicas=1,
                cpu_kv_gb=40.0)
    slow = run(cfg(cpu_kv_link_gb_s=0.01, **base), _group_requests(n=120))
    assert slow.prefix_hit_rate_by_tier()["cpu"] == 0.0
    assert slow.replicas[0].cpu.offloaded > 0 and slow.replicas[0].cpu.reloaded_blocks == 0


def test_capacity_follows_host_memory_and_kv_bytes():
    m = ExecutionModel.from_preset(model="llama-3-70b", gpu="h100-80gb", tensor_parallel=4)
    tier = CPUKVTier.for_model(m, cpu_kv_gb=100.0, block_size=16, link_gb_s=25.0)
    # Llama-3-70B: 320 KiB of KV per token over 4 GPUs; a 16-token block is 5 MiB of host memory
    assert tier.capacity_blocks == int(100e9 // (16 * 320 * 1024))
    assert abs(tier.block_bytes_per_gpu - 16 * m.kv_bytes_per_token) < 1e-9


def test_offload_reload_pays_one_copy_per_block_and_layer_over_the_gpus_host_link():
    """vLLM's offload connector copies each block of each layer's KV tensor with its own
    cudaMemcpyAsync: a reload of n blocks costs the call + n x (layers x copy cost + bytes / link),
    over the GPU preset's measured host link unless the config names one."""
    m = ExecutionModel.from_preset(model="llama-3-8b", gpu="h100-80gb")
    tier = CPUKVTier.for_model(m, cpu_kv_gb=10.0, block_size=16)
    assert tier.link_bytes_per_s == get_gpu("h100-80gb").host_link_gb_s * 1e9
    assert get_gpu("h100-80gb").host_link_gb_s > 2 * get_gpu("a100-80gb").host_link_gb_s  # Gen5 vs Gen4 x16
    per_block = 32 * OFFLOAD_COPY_S + 16 * m.kv_bytes_per_token / tier.link_bytes_per_s
    assert abs(tier.reload_time_s(10) - (RELOAD_LATENCY_S + 10 * per_block)) < 1e-12
    # 64 KiB per layer and block: the copies cost more than the bytes (17-18 GB/s effective, measured 17.5)
    eff = 16 * m.kv_bytes_per_token / per_block / 1e9
    assert 15.0 < eff < 20.0
    pinned = CPUKVTier.for_model(m, cpu_kv_gb=10.0, block_size=16, link_gb_s=25.0)
    assert pinned.link_bytes_per_s == 25e9
    # pipeline stages reload their own layers in parallel: half the copies per GPU
    pp = ExecutionModel.from_preset(model="llama-3-8b", gpu="h100-80gb", pipeline_parallel=2)
    assert abs(CPUKVTier.for_model(pp, cpu_kv_gb=10.0, block_size=16).block_copy_s - 16 * OFFLOAD_COPY_S) < 1e-15
    # LMCache moves chunks with its own kernel at its logged rates: no per-copy term
    assert CPUKVTier.for_model(m, cpu_kv_gb=10.0, block_size=16, connector="lmcache").block_copy_s == 0.0


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), scheduler=st.sampled_from(["vllm", "sarathi", "static"]),
       replicas=st.integers(1, 3), kv_frac=st.sampled_from([0.005, 0.01, 0.03]),
       cpu_gb=st.sampled_from([0.05, 0.5, 20.0]), n_prefixes=st.integers(1, 8), rate=st.floats(2.0, 30.0),
       disagg=st.booleans(), prio=st.booleans(),
       router=st.sampled_from(["round_robin", "llmd_precise", "dynamo_kv", "least_kv_load"]),
       connector=st.sampled_from(["offload", "lmcache"]))
def test_cpu_tier_invariants_at_every_event(seed, scheduler, replicas, kv_frac, cpu_gb, n_prefixes, rate,
                                            disagg, prio, router, connector):
    """GPU invariants hold with the tier, the tier never exceeds its capacity, per-tier hits add up
    to each request's cached tokens (counted once), every request completes or is rejected."""
    rng = np.random.default_rng(seed)
    reqs = prefix_requests(rng, rate=rate, duration_s=4.0, n_prefixes=n_prefixes, tenants=2, priority_tenant=1)
    c = cfg(scheduler=scheduler, router=router, num_replicas=replicas, kv_budget_fraction=kv_frac,
            cpu_kv_gb=cpu_gb, disaggregate=disagg and replicas > 1, prefill_replicas=1, priority_routing=prio,
            tenants=(TenantSpec(name="be"), TenantSpec(name="p", priority=1)), cpu_kv_connector=connector)
    cl = run(c, reqs, seed=seed, check_invariants=True)
    q = g = cpu = 0
    for rep in cl.replicas:
        assert rep.kv.used_blocks == 0 and not rep.kv.ref and not rep.running
        assert len(rep.cpu.blocks) <= rep.cpu.capacity_blocks
        tq, tg, tc = rep.tier_tokens
        q, g, cpu = q + tq, g + tg, cpu + tc
    assert g + cpu == sum(r.cached_tokens for r in reqs) == cl.run_stats().prefix_cached_tokens
    for r in reqs:
        assert 0 <= r.cached_tokens <= r.prompt_tokens - 1
        if r.rejected_reason is None:
            assert r.done and r.generated_tokens == r.output_tokens


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), scheduler=st.sampled_from(["vllm", "sarathi"]))
def test_fast_path_equals_step_by_step_with_cpu_tier(seed, scheduler):
    rng = np.random.default_rng(seed)
    reqs = prefix_requests(rng, rate=10.0, duration_s=5.0, n_prefixes=6, prefix_blocks=(20, 60))
    c = cfg(scheduler=scheduler, num_replicas=2, kv_budget_fraction=0.01, cpu_kv_gb=5.0)
    a = run(c, clone_with_hashes(reqs), seed=seed).results()
    b = run(c, clone_with_hashes(reqs), seed=seed, max_run_iterations=1).results()
    assert np.array_equal(a["cached_tokens"], b["cached_tokens"])
    for k in ("first_token_s", "completion_s"):
        np.testing.assert_allclose(a[k], b[k], rtol=1e-9, atol=1e-9, err_msg=k)


def test_published_view_and_routers_see_the_cpu_tier():
    c = cfg(num_replicas=2, kv_budget_fraction=0.05, cpu_kv_gb=40.0, router="llmd_precise",
            cache_publish_interval_s=0.0)
    cl = run(c, _group_requests(n=150))
    snaps = cl.cache_view.get(cl)
    # the prefix group whose chain continues furthest in some replica's CPU tier
    rep_id, g0 = max(((i, g) for i in range(2) for g in range(40)),
                     key=lambda x: snaps[x[0]].prefix_blocks_by_tier(tuple((x[1], j) for j in range(100)))[1])
    chain = tuple((g0, j) for j in range(100))
    snap = snaps[rep_id]
    gpu, cpu = snap.prefix_blocks_by_tier(chain)
    assert cpu > 0
    rep = cl.replicas[rep_id]
    assert abs(snap.prefix_blocks(chain) - (gpu + ROUTER_CPU_WEIGHT * cpu)) < 1e-9
    req = Request(req_id=10_000, arrival_s=cl.now_s, prompt_tokens=16 * 101, output_tokens=1,
                  block_hashes=chain + ((g0, "new"),))
    assert cl.published_cached_tokens(rep.id, req) == (gpu + cpu) * 16


def test_lmcache_connector_hits_whole_chunks_and_stores_synchronously():
    """LMCache's connector: hits count whole 256-token chunks from the prompt's start, reloads and
    stores run at LMCache's logged rates (capped by the link) plus a per-call cost."""
    m = ExecutionModel.from_preset(model="llama-3-8b", gpu="h100-80gb")
    lm = CPUKVTier.for_model(m, cpu_kv_gb=50.0, block_size=16, link_gb_s=25.0, connector="lmcache")
    off = CPUKVTier.for_model(m, cpu_kv_gb=50.0, block_size=16, link_gb_s=25.0)
    cb = LMCACHE_CHUNK_TOKENS // 16
    assert lm.chunk_blocks == cb == 16 and off.chunk_blocks == 1
    hs = tuple(range(40))
    for t in (lm, off):
        for h in hs[:37]:
            t.offload(h)
    # GPU hit of 5 blocks: 37 held blocks reach 32 = two whole chunks from the start -> 27 to reload
    assert off.match(hs, 5, 40) == 32 and lm.match(hs, 5, 40) == 2 * cb - 5
    assert lm.match(hs, 20, 40) == 2 * cb - 20 and lm.match(hs, 33, 40) == 0
    b = 16 * m.kv_bytes_per_token
    assert abs(lm.reload_time_s(10) - (LMCACHE_CALL_S + 10 * b / (LMCACHE_RETRIEVE_GB_S * 1e9))) < 1e-12
    assert abs(lm.store_time_s(160, 16) - (LMCACHE_CALL_S + 10 * b / (LMCACHE_STORE_GB_S * 1e9))) < 1e-12
    assert off.store_time_s(160, 16) == 0.0 and lm.stored_tokens == 160
    slow = CPUKVTier.for_model(m, cpu_kv_gb=50.0, block_size=16, link_gb_s=5.0, connector="lmcache")
    assert abs(slow.link_bytes_per_s - 5e9) < 1 and abs(slow.store_bytes_per_s - 5e9) < 1


def test_lmcache_connector_pays_its_store_on_the_critical_path():
    base = dict(model="llama-2-7b", gpu="a100-80gb", kv_budget_fraction=0.05, num_replicas=1, cpu_kv_gb=40.0)
    off = run(cfg(**base), _group_requests(n=150), check_invariants=True)
    lm = run(cfg(cpu_kv_connector="lmcache", **base), _group_requests(n=150), check_invariants=True)
    assert lm.replicas[0].cpu.stored_tokens > 0 and off.replicas[0].cpu.stored_tokens == 0
    assert np.mean(lm.results()["ttft_s"]) > np.mean(off.results()["ttft_s"])
    assert lm.prefix_hit_rate_by_tier()["cpu"] > 0.2


def test_unknown_connector_is_refused_with_the_valid_names():
    import pytest

    with pytest.raises(ValueError, match="cpu_kv_connector must be 'offload' or 'lmcache', got 'lmc'"):
        cfg(cpu_kv_gb=1.0, cpu_kv_connector="lmc")
