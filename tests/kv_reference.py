"""Reference model of the KV cache (tests only): the per-block implementation that
``inferencegym.sim.kv_cache`` replaced (one ``OrderedDict`` entry per free block, one dict entry per
referenced hash). ``tests/sim/test_kv_runs.py`` drives both with the same random operations and
requires every observable (hits, counts, reference counts, cached hashes, KV events, spills) equal.

Original description: KV cache of one replica: PagedAttention blocks (vLLM) with automatic prefix caching (vLLM V1).

Which physical block holds what does not change any timing, so blocks are counted, except the blocks
that hold a prompt prefix, which are named by their chained hash (``Request.block_hashes``):

* a request holds ``Request.kv_blocks`` blocks: its first ``Request.shared_blocks`` are *cached*
  blocks named by hash and reference-counted (shared by every running request with that prefix),
  the rest are private;
* ``used_blocks`` counts blocks in use (private blocks plus distinct referenced hashes);
* a cached block whose last reference goes away stays cached and *evictable* in the free queue;
  allocation takes blocks from the front of the free queue (least recently freed first), evicting
  the cached ones it takes; a referenced block is never in the queue, so never evicted;
* ``in use + cached evictable + empty = capacity`` at all times.

The free queue follows vLLM V1's ``FreeKVCacheBlockQueue``: freed blocks go to its tail, a request's
blocks in reverse order (its last block is evicted first), a cache hit on an evictable block takes it
out of the queue. Empty (hashless) blocks are kept as counted runs; while no evictable cached block
exists the queue is not materialised at all, so a workload without block hashes pays nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .request import Request


from inferencegym.sim.kv_cache import KVCacheError


class ReferenceKVCache:
    """Block allocator with an LRU prefix cache (see the module docstring)."""

    __slots__ = ("block_size", "capacity_blocks", "used_blocks", "watermark_blocks", "prefix_caching",
                 "ref", "fq", "n_cached", "_anon", "events", "spill")

    def __init__(self, *, capacity_tokens: int, block_size: int = 16, watermark_fraction: float = 0.01,
                 prefix_caching: bool = True) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        if capacity_tokens < block_size:
            raise ValueError(f"KV capacity of {capacity_tokens} tokens is less than one block of "
                             f"{block_size}; raise kv_budget_fraction or use a larger GPU / lower quantization")
        self.block_size = int(block_size)
        self.capacity_blocks = int(capacity_tokens) // self.block_size
        self.used_blocks = 0
        self.watermark_blocks = int(watermark_fraction * self.capacity_blocks)
        self.prefix_caching = bool(prefix_caching)
        self.ref: dict[int, int] = {}
        """Referenced cached blocks: hash -> number of running requests holding it (> 0)."""
        self.fq: OrderedDict = OrderedDict()
        """Free queue while evictable cached blocks exist: hash -> None, or (k,) -> run of k empty blocks."""
        self.n_cached = 0
        """Evictable cached blocks (hashes in ``fq``)."""
        self._anon = 0
        self.events: list | None = None
        """KV events (vLLM's BlockStored / BlockRemoved) since the last read, ``(hash, stored)``;
        None (the default) records nothing. ``publish_events`` turns it on."""
        self.spill = None
        """Called with the hash of every evicted cached block (the CPU tier's ``offload``), or None."""

    # ------------------------------------------------------------------ counts
    @property
    def free_blocks(self) -> int:
        """Blocks available to allocate: empty plus evictable cached."""
        return self.capacity_blocks - self.used_blocks

    @property
    def empty_blocks(self) -> int:
        return self.capacity_blocks - self.used_blocks - self.n_cached

    @property
    def cached_blocks(self) -> int:
        """Blocks holding a cached prefix block (referenced or evictable)."""
        return len(self.ref) + self.n_cached

    def publish_events(self) -> list:
        """Start recording KV events (if not yet) and return the list they go to (the reader clears it)."""
        if self.events is None:
            self.events = []
        return self.events

    def cached_hashes(self) -> frozenset:
        """Hashes of every cached block (referenced or evictable): what KV events would publish."""
        return frozenset(self.ref).union(k for k in self.fq if type(k) is not tuple)

    def blocks_for(self, tokens: int) -> int:
        """Blocks needed to hold ``tokens`` tokens."""
        return -(-tokens // self.block_size)

    # ------------------------------------------------------------------ anonymous blocks
    def allocate(self, n: int) -> None:
        """Take ``n`` blocks from the front of the free queue (evicting the cached ones taken)."""
        if n < 0 or n > self.capacity_blocks - self.used_blocks:
            raise KVCacheError(f"cannot allocate {n} blocks: {self.free_blocks} free of {self.capacity_blocks}")
        if self.n_cached:
            self._take(n)
        self.used_blocks += n

    def free(self, n: int) -> None:
        """Return ``n`` private blocks to the tail of the free queue."""
        if n < 0 or n > self.used_blocks:
            raise KVCacheError(f"cannot free {n} blocks: {self.used_blocks} in use")
        self.used_blocks -= n
        if self.n_cached and n:
            self._anon += 1
            self.fq[(self._anon,)] = n

    def _take(self, n: int) -> None:
        fq = self.fq
        while n:
            key, v = fq.popitem(last=False)
            if v is None:  # evict a cached block
                self.n_cached -= 1
                n -= 1
                if self.events is not None:
                    self.events.append((key, False))
                if self.spill is not None:
                    self.spill(key)
            elif v > n:
                fq[key] = v - n
                fq.move_to_end(key, last=False)
                n = 0
            else:
                n -= v
        if not self.n_cached:
            fq.clear()  # only empty runs left: no order to keep

    # ------------------------------------------------------------------ requests
    def match(self, hashes: tuple, max_blocks: int) -> tuple[int, int]:
        """Longest cached run of ``hashes[:max_blocks]``: (blocks hit, of which evictable)."""
        ref = self.ref
        fq = self.fq
        n = ev = 0
        for h in hashes:
            if n >= max_blocks:
                break
            if h not in ref:
                if h in fq:
                    ev += 1
                else:
                    break
            n += 1
        return n, ev

    def admit(self, r: "Request", blocks: int, hit: int) -> None:
        """Give ``r`` ``blocks`` blocks, the first ``hit`` of them the cached blocks of its prefix."""
        if hit:
            ref = self.ref
            fq = self.fq
            get = ref.get
            taken = 0
            for h in r.block_hashes[:hit]:
                c = get(h)
                if c is None:
                    del fq[h]  # KeyError here would mean a read of an evicted block
                    taken += 1
                    ref[h] = 1
                else:
                    ref[h] = c + 1
            if taken:
                self.n_cached -= taken
                self.used_blocks += taken
                if not self.n_cached:
                    fq.clear()
        n = blocks - hit
        if n < 0 or n > self.capacity_blocks - self.used_blocks:
            raise KVCacheError(f"cannot allocate {n} blocks: {self.free_blocks} free of {self.capacity_blocks}")
        if self.n_cached:
            self._take(n)
        self.used_blocks += n
        r.kv_blocks = blocks
        r.shared_blocks = hit

    def commit(self, r: "Request", n_full: int) -> None:
        """The first ``n_full`` blocks of ``r``'s prompt are computed: name them by hash. A block
        whose hash is already cached is deduplicated (the request's copy is freed)."""
        s = r.shared_blocks
        if n_full <= s:
            return
        ref = self.ref
        fq = self.fq
        dup = 0
        for h in r.block_hashes[s:n_full]:
            c = ref.get(h)
            if c is not None:
                ref[h] = c + 1
                self.used_blocks -= 1
                dup += 1
            else:
                if h in fq:
                    del fq[h]
                    self.n_cached -= 1
                    dup += 1
                elif self.events is not None:
                    self.events.append((h, True))
                ref[h] = 1
        r.shared_blocks = n_full
        if self.n_cached:
            if dup:
                self._anon += 1
                fq[(self._anon,)] = dup
        else:
            fq.clear()

    def release(self, r: "Request") -> None:
        """Free ``r``'s blocks (completion, preemption, hand-off): private ones become empty, cached
        ones whose last reference goes become evictable, tail first."""
        s = r.shared_blocks
        priv = r.kv_blocks - s
        if priv < 0 or priv > self.used_blocks:
            raise KVCacheError(f"request {r.req_id}: cannot free {r.kv_blocks} blocks ({s} shared), "
                               f"{self.used_blocks} in use")
        r.kv_blocks = 0
        if not s:
            self.used_blocks -= priv
            if self.n_cached and priv:
                self._anon += 1
                self.fq[(self._anon,)] = priv
            return
        r.shared_blocks = 0
        fq = self.fq
        if not self.n_cached:  # materialise the queue: the empty blocks come first
            e = self.capacity_blocks - self.used_blocks
            if e:
                self._anon += 1
                fq[(self._anon,)] = e
        self.used_blocks -= priv
        if priv:
            self._anon += 1
            fq[(self._anon,)] = priv
        ref = self.ref
        freed = 0
        for h in reversed(r.block_hashes[:s]):
            c = ref[h]
            if c > 1:
                ref[h] = c - 1
            else:
                del ref[h]
                fq[h] = None
                freed += 1
        self.used_blocks -= freed
        self.n_cached += freed
        if not self.n_cached:
            fq.clear()

    # ------------------------------------------------------------------ capacity
    def resize(self, capacity_tokens: int, watermark_fraction: float) -> None:
        """New capacity (the caller preempts first so that ``used_blocks`` fits). A changed capacity
        re-allocates the cache (an engine restart): evictable cached blocks are dropped."""
        cap = int(capacity_tokens) // self.block_size
        if cap < 1:
            raise ValueError(f"KV capacity of {capacity_tokens} tokens is less than one block")
        if self.used_blocks > cap:
            raise KVCacheError(f"resize to {cap} blocks with {self.used_blocks} in use")
        if cap != self.capacity_blocks and self.n_cached:
            if self.events is not None:
                self.events.extend((k, False) for k in self.fq if type(k) is not tuple)
            self.fq.clear()
            self.n_cached = 0
        self.capacity_blocks = cap
        self.watermark_blocks = int(watermark_fraction * cap)

    def check(self, holders) -> None:
        """Full invariant check against the requests holding blocks (``holders``; tests and
        ``check_invariants`` only: O(blocks))."""
        empty = self.capacity_blocks - self.used_blocks - self.n_cached
        assert empty >= 0 and self.used_blocks >= 0 and self.n_cached >= 0, (
            f"negative count: used {self.used_blocks}, cached {self.n_cached}, empty {empty}")
        refs: dict = {}
        private = 0
        for r in holders:
            assert 0 <= r.shared_blocks <= r.kv_blocks, f"request {r.req_id}: shared {r.shared_blocks} of {r.kv_blocks}"
            private += r.kv_blocks - r.shared_blocks
            for h in r.block_hashes[:r.shared_blocks]:
                refs[h] = refs.get(h, 0) + 1
        assert refs == self.ref, "reference counts differ from the blocks the running requests hold"
        assert all(c > 0 for c in self.ref.values()), "a reference count is not positive"
        assert self.used_blocks == private + len(self.ref), (
            f"used {self.used_blocks} != private {private} + referenced {len(self.ref)}")
        if self.n_cached:
            hashed = [k for k, v in self.fq.items() if v is None]
            runs = sum(v for v in self.fq.values() if v is not None)
            assert len(hashed) == self.n_cached, f"{len(hashed)} cached hashes queued, counter {self.n_cached}"
            assert runs == empty, f"empty runs hold {runs} blocks, expected {empty}"
            assert not any(h in self.ref for h in hashed), "a referenced block is in the free queue"
        else:
            assert not self.fq, "free queue materialised without evictable cached blocks"
