"""KV cache of one replica: PagedAttention blocks (vLLM) with automatic prefix caching (vLLM V1).

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

**Runs of blocks, not blocks.** Block hashes are chained (block ``k``'s hash names tokens
``0 .. (k+1)*block_size - 1``, as vLLM's do), so a hash names one position in a prefix tree of
prompts, and the cached blocks form a tree whose edges are *runs* (``_Run``: positions ``lo .. hi-1``
of one request's hash tuple, one reference count for the whole run, children keyed by their first
hash). Every request holding cached blocks holds a prefix of the tree and runs are split where a
holder's prefix ends, so one count per run is exact. The free queue holds whole runs (plus the
counted empty runs): a run whose last reference goes enters the tail as one entry, deepest run of
the request first, and eviction takes blocks from the deep end of the run at the front; a cache hit
takes a run (split at the hit's end) off the queue by invalidating its entry (lazy deletion). The
cached set is closed under prefixes (a parent is freed with or after its children, so it is evicted
after them; a hit on a block is a hit on its parents), which is what lets a lookup stop at the first
run that diverges. Matching, admission, commit and release cost per run (a binary search inside a
diverging run), not per block; only KV events and CPU-tier spills, when someone listens, touch
each block. ``tests/sim/test_kv_runs.py`` checks every observable against the per-block reference
(``tests/kv_reference.py``) on random operation sequences.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from itertools import chain, repeat
from typing import TYPE_CHECKING

from .interpreted import interpreted

if TYPE_CHECKING:
    from .request import Request


@interpreted  # a RuntimeError subclass: a Python class when compiled (see interpreted.py)
class KVCacheError(RuntimeError):
    """An allocation or free that would break the cache's invariants (a simulator bug)."""


class _Run:
    """Cached blocks ``hs[lo:hi]`` (positions ``lo .. hi-1`` of a hash chain), one node of the tree."""

    __slots__ = ("hs", "lo", "hi", "parent", "kids", "ref", "tok")

    def __init__(self, hs: tuple, lo: int, hi: int, parent: "_Run | None", ref: int) -> None:
        self.hs = hs
        self.lo = lo
        self.hi = hi
        self.parent = parent
        self.kids: dict = {}
        """Child runs (starting at position ``hi``) by their first hash."""
        self.ref = ref
        """Running requests holding the run (0: evictable, in the free queue)."""
        self.tok = 0
        """Token of the run's valid free-queue entry (0: not queued, -1: dropped from the tree)."""


def _matched(hashes, run: _Run, end: int) -> int:
    """Largest ``m <= end`` with ``hashes[:m]`` equal to the run's chain; ``hashes[run.lo]`` equal.
    Chained hashes: equality at a position implies equality before it (binary search)."""
    hs = run.hs
    if hashes[end - 1] == hs[end - 1]:
        return end
    a, b = run.lo + 1, end  # hashes[a-1] equal, hashes[b-1] not
    while b - a > 1:
        mid = (a + b) >> 1
        if hashes[mid - 1] == hs[mid - 1]:
            a = mid
        else:
            b = mid
    return a


class KVCache:
    """Block allocator with an LRU prefix cache (see the module docstring)."""

    __slots__ = ("block_size", "capacity_blocks", "used_blocks", "watermark_blocks", "prefix_caching",
                 "root", "fq", "n_cached", "n_ref", "_tok", "events", "spill", "window_blocks")

    def __init__(self, *, capacity_tokens: int, block_size: int = 16, watermark_fraction: float = 0.01,
                 prefix_caching: bool = True) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        if capacity_tokens < block_size:
            raise ValueError(f"KV capacity of {capacity_tokens} tokens is less than one block of "
                             f"{block_size}; raise kv_budget_fraction, lower batch_cap (the profiling run's "
                             f"sampler buffers grow with it, sim/gpu_memory.py) or use a larger GPU / lower "
                             f"quantization")
        self.block_size = int(block_size)
        self.capacity_blocks = int(capacity_tokens) // self.block_size
        self.used_blocks = 0
        self.watermark_blocks = int(watermark_fraction * self.capacity_blocks)
        self.prefix_caching = bool(prefix_caching)
        self.root = _Run((), 0, 0, None, 1 << 62)
        """The tree of cached runs (the root holds no block and is never evicted)."""
        self.fq: deque = deque()
        """Free queue while evictable cached blocks exist: ``[k]`` (a run of k empty blocks) or
        ``(run, token)`` (valid while ``run.tok == token``)."""
        self.n_cached = 0
        """Evictable cached blocks."""
        self.n_ref = 0
        """Referenced cached blocks (distinct hashes held by running requests)."""
        self._tok = 0
        self.events: list | None = None
        """KV events (vLLM's BlockStored / BlockRemoved) since the last read, ``(hash, stored)``;
        None (the default) records nothing. ``publish_events`` turns it on."""
        self.spill: Callable[[int], None] | None = None
        """Called with the hash of every evicted cached block (the CPU tier's ``offload``), or None."""
        self.window_blocks = 0
        """Blocks a running sequence holds for its model's sliding-window layers (0: none). vLLM's
        hybrid KV-cache manager draws the sliding-window layers' blocks from the same pool as the
        full-attention ones and keeps a sequence's last window of them (gpt-oss: 128 tokens span at
        most 9 blocks of 16); :meth:`window_extra` gives a request's share, held from admission to
        release beside its ``kv_blocks`` (``sim/sliding_window.py``)."""

    def window_extra(self, r: "Request") -> int:
        """Sliding-window blocks ``r`` holds while admitted: its window's blocks, at most as many as
        its full length spans (0 without sliding-window layers)."""
        w = self.window_blocks
        if not w:
            return 0
        n = -(-(r.prompt_tokens + r.output_tokens - 1) // self.block_size)
        return n if n < w else w

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
        return self.n_ref + self.n_cached

    @property
    def ref(self) -> dict:
        """Referenced cached blocks: hash -> number of running requests holding it (O(blocks);
        tests and checks)."""
        return {h: run.ref for run in self._runs() if run.ref for h in run.hs[run.lo:run.hi]}

    def publish_events(self) -> list:
        """Start recording KV events (if not yet) and return the list they go to (the reader clears it)."""
        if self.events is None:
            self.events = []
        return self.events

    def cached_hashes(self) -> frozenset:
        """Hashes of every cached block (referenced or evictable): what KV events would publish."""
        return frozenset(chain.from_iterable(run.hs[run.lo:run.hi] for run in self._runs()))

    def blocks_for(self, tokens: int) -> int:
        """Blocks needed to hold ``tokens`` tokens."""
        return -(-tokens // self.block_size)

    def _runs(self):
        stack = list(self.root.kids.values())
        while stack:
            run = stack.pop()
            yield run
            stack.extend(run.kids.values())

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
            self.fq.append([n])

    def _take(self, n: int) -> None:
        fq = self.fq
        while n:
            e = fq[0]
            if type(e) is list:  # empty blocks
                k = e[0]
                if k > n:
                    e[0] = k - n
                    break
                n -= k
                fq.popleft()
                continue
            run, tok = e
            if run.tok != tok:  # taken off the queue by a hit since (lazy deletion)
                fq.popleft()
                continue
            hi = run.hi
            k = hi - run.lo
            if k > n:
                k = n
            lo = hi - k  # evict the deep end: the request's last blocks first
            if self.events is not None or self.spill is not None:
                gone = run.hs[lo:hi][::-1]
                if self.events is not None:
                    self.events.extend(zip(gone, repeat(False)))
                if self.spill is not None:
                    for h in gone:
                        self.spill(h)
            run.hi = lo
            self.n_cached -= k
            n -= k
            if lo == run.lo:  # the whole run is gone (its children went before it)
                del run.parent.kids[run.hs[lo]]
                run.tok = -1
                fq.popleft()
        if not self.n_cached:
            fq.clear()  # only empty runs left: no order to keep

    # ------------------------------------------------------------------ the tree
    def _split(self, run: _Run, d: int) -> _Run:
        """Cut ``run`` at position ``d`` (lo < d < hi); returns the new upper part. The lower part
        keeps the object, so its free-queue entry and children stay valid."""
        hs = run.hs
        top = _Run(hs, run.lo, d, run.parent, run.ref)
        top.kids[hs[d]] = run
        run.parent.kids[hs[run.lo]] = top  # type: ignore[union-attr]  # a cut run has a parent
        run.lo = d
        run.parent = top
        return top

    def _path(self, hashes, depth: int) -> list[_Run]:
        """The runs holding ``hashes[:depth]``, root first, the last one split to end at ``depth``."""
        path: list[_Run] = []
        run = self.root
        pos = 0
        while pos < depth:
            nxt = run.kids.get(hashes[pos])
            if nxt is None or hashes[min(nxt.hi, depth) - 1] != nxt.hs[min(nxt.hi, depth) - 1]:
                raise KVCacheError(f"block {pos} of the chain is not cached (a read of an evicted block)")
            if nxt.hi > depth:
                nxt = self._split(nxt, depth)
            path.append(nxt)
            pos = nxt.hi
            run = nxt
        return path

    # ------------------------------------------------------------------ requests
    def match(self, hashes, max_blocks: int) -> tuple[int, int]:
        """Longest cached run of ``hashes[:max_blocks]``: (blocks hit, of which evictable)."""
        lim = len(hashes)
        if max_blocks < lim:
            lim = max_blocks
        if lim <= 0:
            return 0, 0
        run = self.root.kids.get(hashes[0])
        n = ev = 0
        while run is not None:
            hi = run.hi
            m = _matched(hashes, run, hi if hi < lim else lim)
            if not run.ref:
                ev += m - run.lo
            n = m
            if m < hi or m >= lim:
                break
            run = run.kids.get(hashes[m])
        return n, ev

    def admit(self, r: "Request", blocks: int, hit: int) -> None:
        """Give ``r`` ``blocks`` blocks, the first ``hit`` of them the cached blocks of its prefix."""
        if hit:
            taken = 0
            for run in self._path(r.block_hashes, hit):
                if run.ref:
                    run.ref += 1
                else:  # off the free queue
                    taken += run.hi - run.lo
                    run.ref = 1
                    run.tok = 0
            if taken:
                self.n_cached -= taken
                self.n_ref += taken
                self.used_blocks += taken
                if not self.n_cached:
                    self.fq.clear()
        n = blocks - hit
        if self.window_blocks:
            n += self.window_extra(r)
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
        hs = r.block_hashes
        end = self._path(hs, s)[-1] if s else self.root
        parent = end
        pos = s
        dup_ref = dup_fq = 0
        while pos < n_full:  # blocks another request computed meanwhile: deduplicated
            nxt = parent.kids.get(hs[pos])
            if nxt is None:
                break
            hi = nxt.hi
            m = _matched(hs, nxt, hi if hi < n_full else n_full)
            if m < hi:
                nxt = self._split(nxt, m)
            if nxt.ref:
                nxt.ref += 1
                dup_ref += m - pos
            else:
                nxt.ref = 1
                nxt.tok = 0
                dup_fq += m - pos
            pos = m
            parent = nxt
            if m < hi:
                break
        if pos < n_full:  # new blocks, named now
            if (parent is end and end.hs is hs and end.ref == 1 and not end.kids and end.hi == pos
                    and end is not self.root):
                end.hi = n_full  # the request's own run grows
            else:
                parent.kids[hs[pos]] = _Run(hs, pos, n_full, parent, 1)
            if self.events is not None:
                self.events.extend(zip(hs[pos:n_full], repeat(True)))
            self.n_ref += n_full - pos
        if dup_ref:
            self.used_blocks -= dup_ref
        if dup_fq:
            self.n_cached -= dup_fq
            self.n_ref += dup_fq
        r.shared_blocks = n_full
        if self.n_cached:
            dup = dup_ref + dup_fq
            if dup:
                self.fq.append([dup])
        else:
            self.fq.clear()

    def release(self, r: "Request") -> None:
        """Free ``r``'s blocks (completion, preemption, hand-off): private ones become empty, cached
        ones whose last reference goes become evictable, tail first."""
        s = r.shared_blocks
        priv = r.kv_blocks - s
        if self.window_blocks and r.kv_blocks:
            priv += self.window_extra(r)
        if priv < 0 or priv > self.used_blocks:
            raise KVCacheError(f"request {r.req_id}: cannot free {r.kv_blocks} blocks ({s} shared), "
                               f"{self.used_blocks} in use")
        r.kv_blocks = 0
        fq = self.fq
        if not s:
            self.used_blocks -= priv
            if self.n_cached and priv:
                fq.append([priv])
            return
        r.shared_blocks = 0
        if not self.n_cached:  # materialise the queue: the empty blocks come first
            e = self.capacity_blocks - self.used_blocks
            if e:
                fq.append([e])
        self.used_blocks -= priv
        if priv:
            fq.append([priv])
        freed = 0
        tok = self._tok
        for run in reversed(self._path(r.block_hashes, s)):
            c = run.ref
            if c > 1:
                run.ref = c - 1
            else:
                run.ref = 0
                tok += 1
                run.tok = tok
                fq.append((run, tok))
                freed += run.hi - run.lo
        self._tok = tok
        self.used_blocks -= freed
        self.n_ref -= freed
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
            for e in self.fq:
                if type(e) is list or e[0].tok != e[1]:
                    continue
                run = e[0]
                if self.events is not None:
                    self.events.extend(zip(run.hs[run.lo:run.hi][::-1], repeat(False)))
                run.parent.kids.pop(run.hs[run.lo], None)
                run.tok = -1
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
            private += r.kv_blocks - r.shared_blocks + (self.window_extra(r) if r.kv_blocks else 0)
            for h in r.block_hashes[:r.shared_blocks]:
                refs[h] = refs.get(h, 0) + 1
        ref = self.ref
        assert refs == ref, "reference counts differ from the blocks the running requests hold"
        assert len(ref) == self.n_ref, f"{len(ref)} referenced hashes, counter {self.n_ref}"
        assert self.used_blocks == private + self.n_ref, (
            f"used {self.used_blocks} != private {private} + referenced {self.n_ref}")
        # the tree: linked both ways, children start where their parent ends, counts fall with depth,
        # an evictable run has evictable children only, every hash once
        evictable = 0
        seen = 0
        hashes: set = set()
        for run in self._runs():
            assert run.lo < run.hi, "an empty run left in the tree"
            assert run.parent.kids.get(run.hs[run.lo]) is run, "a run is not its parent's child"
            assert run.parent is self.root or run.lo == run.parent.hi, "a run does not start where its parent ends"
            assert run.ref <= run.parent.ref, "a run is held by more requests than its parent"
            if not run.ref:
                evictable += run.hi - run.lo
                assert run.tok > 0, "an evictable run without a free-queue entry"
            hashes.update(run.hs[run.lo:run.hi])
            seen += run.hi - run.lo
        assert len(hashes) == seen, "a hash cached at two places (block hashes must be chained)"
        assert evictable == self.n_cached, f"{evictable} evictable cached blocks, counter {self.n_cached}"
        if self.n_cached:
            runs = sum(e[0] for e in self.fq if type(e) is list)
            queued = [e[0] for e in self.fq if type(e) is not list and e[0].tok == e[1]]
            assert runs == empty, f"empty runs hold {runs} blocks, expected {empty}"
            assert len(set(map(id, queued))) == len(queued), "a run queued twice"
            assert sum(x.hi - x.lo for x in queued) == self.n_cached, "queued runs differ from the evictable count"
            assert all(not x.ref for x in queued), "a referenced block is in the free queue"
        else:
            assert not self.fq, "free queue materialised without evictable cached blocks"
