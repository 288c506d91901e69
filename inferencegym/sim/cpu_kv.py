"""The CPU tier of a replica's prefix cache: evicted prefix blocks kept in host memory.

As vLLM's CPU offloading and LMCache's local CPU backend do, a prefix block the GPU cache evicts
(``KVCache`` calls ``offload`` through its ``spill`` hook) is copied to host memory instead of being
lost. The host tier is an LRU set of block hashes with a capacity in blocks
(``ReplicaConfig.cpu_kv_gb`` over the bytes of one block of the whole replica). When a request is
admitted, the blocks of its prompt that follow the GPU hit and are found here (a consecutive run)
are **reloaded** over PCIe instead of recomputed when that is cheaper: each GPU loads its own
shard over its own host link in parallel, ``latency + blocks x block bytes per GPU / link``; the
reload time is added to the iteration that carries the request's first prefill chunk (the forward
pass waits for its KV, as LMCache's synchronous retrieval does). Reloaded blocks take new GPU blocks
and are named by hash at once (they stay in the host tier too, moved to its most-recent end).

Assumptions: offloads are asynchronous copies that never delay an iteration (vLLM and LMCache store
in the background); only prompt prefix blocks (named by hash) are offloaded; the tier survives a KV
capacity change (it is host memory).

Invariants (``check``): at most ``capacity_blocks`` blocks held, the event log describes the held
set (``published`` view), counts never negative.
"""

from __future__ import annotations

from collections import OrderedDict

RELOAD_LATENCY_S = 2.0e-5
"""Fixed cost of one host-to-GPU reload (a DMA launch and its synchronisation), seconds."""
ROUTER_CPU_WEIGHT = 0.8
"""Weight of a CPU-tier block against a GPU block in the cache-aware routers' prefix score (llm-d
KV-cache manager's default ``kvCacheBackendConfigs``: gpu 1.0, cpu 0.8)."""


class CPUKVTier:
    """LRU host-memory tier of block hashes (see the module docstring)."""

    __slots__ = ("capacity_blocks", "blocks", "events", "block_bytes_per_gpu", "link_bytes_per_s",
                 "offloaded", "reloaded_blocks")

    def __init__(self, *, capacity_blocks: int, block_bytes_per_gpu: float, link_gb_s: float) -> None:
        if capacity_blocks < 0:
            raise ValueError(f"CPU tier capacity must be >= 0 blocks, got {capacity_blocks}")
        if not link_gb_s > 0:
            raise ValueError(f"host link bandwidth must be > 0 GB/s, got {link_gb_s}")
        self.capacity_blocks = int(capacity_blocks)
        self.blocks: OrderedDict = OrderedDict()
        """Held block hashes, least recently used first."""
        self.events: list | None = None
        """(hash, stored) changes since the router's view last read them (None: not published)."""
        self.block_bytes_per_gpu = float(block_bytes_per_gpu)
        self.link_bytes_per_s = float(link_gb_s) * 1e9
        self.offloaded = 0
        """Blocks copied to host memory so far."""
        self.reloaded_blocks = 0
        """Blocks reloaded from host memory so far."""

    @classmethod
    def for_model(cls, model, *, cpu_kv_gb: float, block_size: int, link_gb_s: float) -> CPUKVTier:
        """The tier of one replica running ``model`` (an ``ExecutionModel``) with ``cpu_kv_gb`` GB
        of host memory: every GPU's shard of a block is held (MLA's latent once per rank)."""
        shards = 1 if getattr(model.model, "is_mla", False) else model.tensor_parallel
        host_block = block_size * model.kv_bytes_per_token * shards
        return cls(capacity_blocks=int(cpu_kv_gb * 1e9 // host_block),
                   block_bytes_per_gpu=block_size * model.kv_bytes_per_token, link_gb_s=link_gb_s)

    def publish_events(self) -> list:
        """Start recording changes (if not yet) and return the list (the reader clears it)."""
        if self.events is None:
            self.events = []
        return self.events

    def offload(self, h) -> None:
        """The GPU cache evicts block ``h``: keep it here (LRU: the oldest block goes if full)."""
        blocks = self.blocks
        if h in blocks:
            blocks.move_to_end(h)
            return
        if not self.capacity_blocks:
            return
        ev = self.events
        if len(blocks) >= self.capacity_blocks:
            old, _ = blocks.popitem(last=False)
            if ev is not None:
                ev.append((old, False))
        blocks[h] = None
        self.offloaded += 1
        if ev is not None:
            ev.append((h, True))

    def match(self, hashes: tuple, start: int, max_blocks: int) -> int:
        """Consecutive blocks of ``hashes[start:max_blocks]`` held here."""
        blocks = self.blocks
        n = 0
        for i in range(start, min(max_blocks, len(hashes))):
            if hashes[i] not in blocks:
                break
            n += 1
        return n

    def reload(self, hashes: tuple, start: int, n: int) -> float:
        """Reload ``hashes[start:start+n]`` (marks them recently used); returns the time, s."""
        if n <= 0:
            return 0.0
        blocks = self.blocks
        for h in hashes[start:start + n]:
            if h in blocks:
                blocks.move_to_end(h)
        self.reloaded_blocks += n
        return self.reload_time_s(n)

    def reload_time_s(self, n_blocks: int) -> float:
        """Host-to-GPU time of ``n_blocks`` blocks (each GPU its shard, in parallel)."""
        if n_blocks <= 0:
            return 0.0
        return RELOAD_LATENCY_S + n_blocks * self.block_bytes_per_gpu / self.link_bytes_per_s

    def check(self) -> None:
        """Invariants (tests, ``check_invariants``)."""
        assert 0 <= len(self.blocks) <= self.capacity_blocks, (
            f"CPU tier holds {len(self.blocks)} blocks, capacity {self.capacity_blocks}")
        assert self.reloaded_blocks >= 0 and self.offloaded >= len(self.blocks), (
            "CPU tier counters inconsistent")
