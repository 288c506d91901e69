"""The run-based KV cache (``sim/kv_cache.py``: a tree of runs of blocks, one free-queue entry per
run) behaves exactly like the per-block reference (``tests/kv_reference.py``: one free-queue entry
per block): same hits, counts, reference counts, cached hashes, KV events and CPU-tier spills after
every operation of random sequences (admissions with prefix hits, chunked commits with
deduplication, releases, anonymous allocations, capacity changes)."""

from __future__ import annotations

import numpy as np
import pytest
from kv_reference import ReferenceKVCache

from inferencegym.sim import Request
from inferencegym.sim.kv_cache import KVCache, KVCacheError


class _Chains:
    """Chained block hashes: each new chain continues a random prefix of a known one."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.chains: list[tuple] = []
        self.next = 1

    def new(self) -> tuple:
        rng = self.rng
        base: tuple = ()
        if self.chains and rng.random() < 0.8:
            c = self.chains[int(rng.integers(len(self.chains)))]
            base = c[:int(rng.integers(0, len(c) + 1))]
            if rng.random() < 0.15:
                return c  # the same prompt again
        ext = int(rng.integers(0 if base else 1, 12))
        hs = base + tuple(range(self.next, self.next + ext))
        self.next += ext
        self.chains.append(hs)
        return hs


def _state(kv) -> tuple:
    return (kv.used_blocks, kv.n_cached, kv.free_blocks, kv.empty_blocks, kv.cached_blocks, kv.capacity_blocks,
            kv.watermark_blocks, dict(kv.ref), kv.cached_hashes())


def _pair(rid, hs, extra):
    mk = lambda: Request(req_id=rid, arrival_s=0.0, prompt_tokens=16 * (len(hs) + extra) + 1,  # noqa: E731
                         output_tokens=1, block_hashes=hs)
    return mk(), mk()


def _drive(seed: int, steps: int, listen: bool) -> int:
    rng = np.random.default_rng(seed)
    cap = int(rng.integers(8, 60))
    new, ref = (KVCache(capacity_tokens=16 * cap, block_size=16),
                ReferenceKVCache(capacity_tokens=16 * cap, block_size=16))
    spills: tuple = ([], [])
    if listen:
        for kv, sp in zip((new, ref), spills):
            kv.publish_events()
            kv.spill = sp.append
    chains = _Chains(rng)
    running: list = []  # (new request, reference request, committed so far)
    anon = 0
    hits = 0
    for step in range(steps):
        op = rng.random()
        if op < 0.35:  # admit a request with its prefix hit
            hs = chains.new()
            a, b = _pair(step, hs, int(rng.integers(0, 3)))
            mx = int(rng.integers(0, len(hs) + 1))
            got = new.match(hs, mx)
            assert got == ref.match(hs, mx)
            hit, ev = got
            blocks = hit + int(rng.integers(0, len(hs) - hit + 3))
            free = new.capacity_blocks - new.used_blocks
            if blocks - hit + ev > free:
                continue
            new.admit(a, blocks, hit)
            ref.admit(b, blocks, hit)
            hits += hit
            running.append([a, b])
        elif op < 0.6 and running:  # commit some computed blocks
            a, b = running[int(rng.integers(len(running)))]
            top = min(len(a.block_hashes), a.kv_blocks)
            if top > a.shared_blocks:
                nf = int(rng.integers(a.shared_blocks + 1, top + 1))
                new.commit(a, nf)
                ref.commit(b, nf)
        elif op < 0.85 and running:  # completion or preemption
            a, b = running.pop(int(rng.integers(len(running))))
            new.release(a)
            ref.release(b)
        elif op < 0.93:  # anonymous blocks (decode growth, their release)
            if anon and rng.random() < 0.5:
                k = int(rng.integers(1, anon + 1))
                new.free(k)
                ref.free(k)
                anon -= k
            else:
                k = int(rng.integers(0, new.free_blocks + 1))
                new.allocate(k)
                ref.allocate(k)
                anon += k
        else:  # a knob change: same or new capacity (drops the evictable blocks)
            c = max(new.used_blocks, int(rng.integers(4, 60)), 1)
            if rng.random() < 0.4:
                c = new.capacity_blocks
            new.resize(16 * c, 0.01)
            ref.resize(16 * c, 0.01)
        assert _state(new) == _state(ref), f"seed {seed} step {step}"
        if listen:
            assert new.events == ref.events and spills[0] == spills[1], f"seed {seed} step {step}"
        holders = [x[0] for x in running] + ([_anon(anon)] if anon else [])
        new.check(holders)
    return hits


def _anon(blocks: int) -> Request:
    r = Request(req_id=-1, arrival_s=0.0, prompt_tokens=1, output_tokens=1)
    r.kv_blocks = blocks
    return r


@pytest.mark.parametrize("listen", [False, True])
def test_runs_equal_the_per_block_reference_on_random_operations(listen):
    hits = sum(_drive(seed, 250, listen) for seed in range(60))
    assert hits > 500  # the sequences do exercise prefix hits


def test_partial_hit_splits_a_run_and_keeps_the_rest_queued():
    kv = KVCache(capacity_tokens=16 * 12, block_size=16)
    a = Request(req_id=0, arrival_s=0.0, prompt_tokens=16 * 6, output_tokens=1, block_hashes=(1, 2, 3, 4, 5, 6))
    kv.admit(a, 6, 0)
    kv.commit(a, 6)
    kv.release(a)  # one run of 6 in the queue, 6 empty blocks before it
    b = Request(req_id=1, arrival_s=0.0, prompt_tokens=16 * 5, output_tokens=1, block_hashes=(1, 2, 3, 9))
    assert kv.match(b.block_hashes, 4) == (3, 3)
    kv.admit(b, 4, 3)  # blocks 1..3 referenced; 4..6 stay evictable, in place
    assert kv.ref == {1: 1, 2: 1, 3: 1} and kv.n_cached == 3 and kv.used_blocks == 4
    kv.allocate(5 + 2)  # the 5 empty blocks left (b took one), then the deep end: 6 and 5
    assert kv.match((1, 2, 3, 4, 5, 6), 6) == (4, 1)
    kv.check([b, _anon(7)])


def test_reading_an_evicted_block_is_refused():
    kv = KVCache(capacity_tokens=16 * 4, block_size=16)
    r = Request(req_id=0, arrival_s=0.0, prompt_tokens=64, output_tokens=1, block_hashes=(1, 2))
    with pytest.raises(KVCacheError):
        kv.admit(r, 2, 2)  # nothing is cached
