"""Production cache-aware routers (llm-d precise / approximate, SGLang cache-aware, Dynamo KV) and
what they can see (published cache state with staleness, or their own index)."""

from __future__ import annotations

import numpy as np
import pytest
from sim_util import cfg, clone_with_hashes, prefix_requests, results_equal, run

from inferencegym.sim import ROUTERS, Cluster, Request
from inferencegym.sim.cache_routers import SGLangCacheAwareRouter
from inferencegym.sim.estimates import first_token_iterations

CACHE_ROUTERS = ["llmd_precise", "llmd_approx", "sglang_cache_aware", "dynamo_kv"]


@pytest.fixture(scope="module")
def prefix_runs():
    reqs = prefix_requests(np.random.default_rng(0), rate=12.0, duration_s=30.0, n_prefixes=16,
                           prefix_blocks=(100, 300), suffix=(16, 200), output=(16, 200))
    out = {}
    for router in ["round_robin", "least_outstanding_requests", *CACHE_ROUTERS]:
        cl = run(cfg(num_replicas=4, router=router, kv_budget_fraction=0.3), clone_with_hashes(reqs), seed=0)
        out[router] = cl
    return reqs, out


def test_routers_are_registered():
    for name in CACHE_ROUTERS:
        assert name in ROUTERS


@pytest.mark.parametrize("router", CACHE_ROUTERS)
def test_prefix_aware_routers_beat_load_only_ones_on_hit_rate_and_ttft(prefix_runs, router):
    _, runs = prefix_runs
    ws = runs[router].run_stats()
    for base in ("round_robin", "least_outstanding_requests"):
        b = runs[base].run_stats()
        assert ws.prefix_hit_rate > b.prefix_hit_rate + 0.15, (router, base)
        assert ws.ttft_s["p90"] < b.ttft_s["p90"], (router, base)
    assert runs[router].n_completed == runs["round_robin"].n_completed


@pytest.mark.parametrize("router", CACHE_ROUTERS)
def test_cache_routers_are_deterministic_and_keep_invariants(router):
    reqs = prefix_requests(np.random.default_rng(5), rate=15.0, duration_s=5.0, n_prefixes=4)
    c = cfg(num_replicas=3, router=router, kv_budget_fraction=0.02, scheduler="sarathi")
    a = run(c, clone_with_hashes(reqs), seed=3, check_invariants=True).results()
    b = run(c, clone_with_hashes(reqs), seed=3).results()
    assert results_equal(a, b)
    assert a["cached_tokens"].sum() > 0


def test_routers_see_the_cache_only_as_published():
    h = tuple(range(1, 41))
    for interval, expect_hit in ((10.0, False), (0.0, True)):
        cl = Cluster(cfg(num_replicas=2, router="llmd_precise", cache_publish_interval_s=interval),
                     np.random.default_rng(0))
        cl.submit([Request(req_id=9, arrival_s=0.0, prompt_tokens=8, output_tokens=1),
                   Request(req_id=0, arrival_s=0.01, prompt_tokens=640, output_tokens=2, block_hashes=h)])
        cl.run_until(5.0)  # request 0 cached its 40 blocks on some replica
        where = cl.requests[1].replica_id
        probe = Request(req_id=1, arrival_s=5.0, prompt_tokens=641, output_tokens=2, block_hashes=h)
        got = cl.published_cached_tokens(where, probe)
        assert (got == 640) is expect_hit, (interval, got)


class _Rep:
    def __init__(self, load):
        self._load = load
        self.kv = type("KV", (), {"block_size": 16})()

    def outstanding(self):
        return self._load


class _Cl:
    """A stand-in satisfying the part of ``sim.views.RouterClusterView`` these routers read."""

    def __init__(self, loads):
        self.replicas = [_Rep(x) for x in loads]
        self.now_s = 1.0
        self.cache_view = None

    def published(self):
        return self.cache_view.get(self)


def test_sglang_rule_balance_then_prefix_then_smallest_tree():
    h = tuple(range(100, 120))
    req = Request(req_id=0, arrival_s=0.0, prompt_tokens=20 * 16 + 5, output_tokens=1, block_hashes=h)
    r = SGLangCacheAwareRouter()
    r.trees.of(2).add(h)  # replica 2 was sent this prefix before
    # imbalanced (spread 70 > 64 and 80 > 1.5 * 10): least loaded wins, the prefix does not matter
    assert r.choose(_Cl([10, 80, 40]), req, [0, 1, 2]) == 0
    # balanced: the best match (rate 20*16/325 > 0.3)
    assert r.choose(_Cl([10, 12, 40]), req, [0, 1, 2]) in (0, 2)
    r2 = SGLangCacheAwareRouter()
    r2.trees.of(1).add(h)
    assert r2.choose(_Cl([5, 5, 5]), req, [0, 1, 2]) == 1
    # no good match: the smallest tree (replica 0 and 2 are empty; 1 holds 20 blocks)
    other = Request(req_id=1, arrival_s=0.0, prompt_tokens=400, output_tokens=1, block_hashes=tuple(range(500, 525)))
    assert r2.choose(_Cl([5, 5, 5]), other, [0, 1, 2]) in (0, 2)


def test_estimated_ttft_credits_cached_tokens():
    cl = Cluster(cfg(num_replicas=1, chunk_size=512), np.random.default_rng(0))
    rep = cl.replicas[0]
    full = first_token_iterations(rep, 2048, expected_output_tokens=100.0)
    part = first_token_iterations(rep, 2048, expected_output_tokens=100.0, cached_tokens=1536)
    assert full - part == pytest.approx(1536 / 512)


def test_bad_publish_interval_is_refused():
    with pytest.raises(ValueError, match="cache_publish_interval_s"):
        cfg(cache_publish_interval_s=-1.0)


def test_published_hashes_follow_the_kv_events_exactly():
    reqs = prefix_requests(np.random.default_rng(8), rate=20.0, duration_s=8.0, n_prefixes=6)
    cl = Cluster(cfg(num_replicas=2, router="llmd_precise", kv_budget_fraction=0.01,
                     cache_publish_interval_s=0.0), np.random.default_rng(0))
    cl.submit(reqs)
    seen: set = set()
    gone = 0
    for t in np.arange(0.25, 60.0, 0.25):
        cl.run_until(float(t))
        for rep, snap in zip(cl.replicas, cl.cache_view.get(cl)):
            assert snap.hashes == set(rep.kv.cached_hashes())
            gone += len(seen - snap.hashes)
            seen |= snap.hashes
    assert gone > 0  # evictions happened and were published
    cl.drain()


class _Snap:
    def __init__(self, hashes=(), waiting=0):
        self.hashes = set(hashes)
        self.waiting = waiting

    def prefix_blocks(self, hashes, max_blocks=1 << 30):
        n = 0
        for h in hashes:
            if n >= max_blocks or h not in self.hashes:
                break
            n += 1
        return n


class _View:
    def __init__(self, snaps):
        self.snaps = snaps

    def get(self, cluster):
        return self.snaps


class _KVRep:
    def __init__(self, used):
        self.kv = type("KV", (), {"block_size": 16, "used_blocks": used})()
        self.waiting, self.prio_waiting, self.running = [], [], []


def test_llmd_approx_scores_its_own_index_and_the_load_aware_term():
    from inferencegym.sim.cache_routers import LLMDApproxRouter

    h = tuple(range(1, 17))  # 16 blocks
    req = Request(req_id=0, arrival_s=0.0, prompt_tokens=16 * 16 + 3, output_tokens=1, block_hashes=h)
    cl = _Cl([0, 0])
    r = LLMDApproxRouter()
    r.index.of(0).add(h[:2])  # 2 of 16 blocks sent to replica 0 before: prefix score 1/8
    # replica 0: 2 * 0.125 + 0.5 * (1 - 128/128) = 0.25; replica 1: 0 + 0.5 * (1 - 20/128) = 0.42
    cl.cache_view = _View([_Snap(waiting=128), _Snap(waiting=20)])
    assert r.choose(cl, req, [0, 1]) == 1
    assert r.index.of(1).prefix_blocks(h, 256) == 16  # the chosen replica's index took the prompt
    r2 = LLMDApproxRouter()
    r2.index.of(0).add(h[:4])  # 1/4: 0.5 + 0.5 * (1 - 64/128) = 0.75 > 0.5 (empty queue on 1)
    cl.cache_view = _View([_Snap(waiting=64), _Snap(waiting=0)])
    assert r2.choose(cl, req, [0, 1]) == 0


def test_dynamo_cost_is_prefill_blocks_plus_decode_blocks():
    from inferencegym.sim.cache_routers import DynamoKVRouter

    h = tuple(range(1, 21))  # 20 blocks
    req = Request(req_id=0, arrival_s=0.0, prompt_tokens=320, output_tokens=1, block_hashes=h)
    cl = _Cl([0, 0])
    cl.replicas = [_KVRep(100), _KVRep(95)]
    cl.cache_view = _View([_Snap(hashes=h[:10]), _Snap()])
    # replica 0: (320 - 160) / 16 + 100 + 20 = 130; replica 1: 320 / 16 + 95 + 20 = 135
    assert DynamoKVRouter().choose(cl, req, [0, 1]) == 0
    cl.replicas = [_KVRep(100), _KVRep(80)]  # replica 1: 20 + 80 + 20 = 120 < 130
    assert DynamoKVRouter().choose(cl, req, [0, 1]) == 1


def test_llmd_precise_normalises_hits_like_llmd():
    from inferencegym.sim.cache_routers import _minmax_hits

    assert _minmax_hits({0: 0, 1: 0}) == {0: 0.0, 1: 0.0}  # no hit anywhere: nobody scores
    assert _minmax_hits({0: 5, 1: 0, 2: 5}) == {0: 1.0, 1: 0.0, 2: 1.0}  # equal hits: 1
    assert _minmax_hits({0: 2, 1: 6, 2: 4, 3: 0}) == {0: 0.0, 1: 1.0, 2: 0.5, 3: 0.0}
