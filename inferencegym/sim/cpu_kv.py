"""The CPU tier of a replica's prefix cache: evicted prefix blocks kept in host memory.

As vLLM's CPU offloading and LMCache's local CPU backend do, a prefix block the GPU cache evicts
(``KVCache`` calls ``offload`` through its ``spill`` hook) is copied to host memory instead of being
lost. The host tier is an LRU set of block hashes with a capacity in blocks
(``ReplicaConfig.cpu_kv_gb`` over the bytes of one block of the whole replica). When a request is
admitted, the blocks of its prompt that follow the GPU hit and are found here (a consecutive run)
are **reloaded** over PCIe instead of recomputed when that is cheaper: each GPU loads its own
shard over its own host link in parallel, ``latency + blocks x (copies a block x copy cost + block
bytes per GPU / link)``; the
reload time is added to the iteration that carries the request's first prefill chunk (the forward
pass waits for its KV, as LMCache's synchronous retrieval does). Reloaded blocks take new GPU blocks
and are named by hash at once (they stay in the host tier too, moved to its most-recent end).

Two connectors (``ReplicaConfig.cpu_kv_connector``):

* ``offload`` (vLLM's native CPU offloading): offloads are asynchronous copies that never delay an
  iteration; hits and reloads count 16-token blocks; a reload moves each block of each layer's KV
  tensor with its own ``cudaMemcpyAsync`` (``swap_blocks``, called per KV tensor by
  ``vllm/v1/kv_offload/worker/cpu_gpu.py``), so it pays :data:`OFFLOAD_COPY_S` per block and layer on
  the GPU beside the bytes at the link rate (measured: 64 KiB copies reach 17.5 GB/s of a 54.6 GB/s link).
* ``lmcache`` (LMCache's ``LMCacheConnectorV1`` with its local CPU backend, as vLLM 0.10-0.14 run
  it): the KV of every prefilled prompt chunk is **stored** to host memory synchronously, the step
  waits for it (``wait_for_save`` at the end of the forward, LMCache's recipe logs it as the request's
  ``offload_time``); hits count whole **chunks of** :data:`LMCACHE_CHUNK_TOKENS` tokens from the
  prompt's start (LMCache hashes per chunk; vLLM loads ``LMCache hit tokens - vLLM's own hit``); the
  store and the retrieval run at LMCache's measured rates (:data:`LMCACHE_STORE_GB_S`,
  :data:`LMCACHE_RETRIEVE_GB_S`, capped by the link) plus a fixed cost per call.

Assumptions: only prompt prefix blocks (named by hash) are offloaded (LMCache's
``save_decode_cache`` is off by default); the tier survives a KV capacity change (it is host memory).

Invariants (``check``): at most ``capacity_blocks`` blocks held, the event log describes the held
set (``published`` view), counts never negative.
"""

from __future__ import annotations

from collections import OrderedDict

RELOAD_LATENCY_S = 2.0e-5
"""Fixed cost of one host-to-GPU reload (a DMA launch and its synchronisation), seconds."""
OFFLOAD_COPY_S = 2.54e-6
"""GPU time of one host-to-GPU ``cudaMemcpyAsync`` beyond its bytes at the link rate, s: N scattered
4 KiB-2 MiB blocks copied one call each from pinned memory take ``N x (2.54 us + bytes / 54.6 GB/s)``
within 1.6 % on every size (lent H100, PCIe Gen5 x16; device-to-host 2.14 us;
``benchmarks/gpu_host_link.cu``, ``benchmarks/results/gpu_h100_2026-11-26/host_link.json``, fitted by
``benchmarks/host_link_fit.py``; a lent H200 on another host: 2.76 us, +9 %). Paid per block and layer by
the ``offload`` connector's reloads."""
LMCACHE_CHUNK_TOKENS = 256
"""LMCache's ``chunk_size`` default (the unit it hashes, stores and retrieves; GPUStack's LMCache run set
256 explicitly, LMCache's recipes: "Default: 256")."""
LMCACHE_STORE_GB_S = 13.8
"""LMCache's store rate, GB/s: "Stored 1792 out of total 1792 tokens. size: 0.2461 GB, cost 17.8199 ms,
throughput: 13.8101 GB/s; offload_time: 17.7556 ms" (LMCache/LMCache ``recipes/dense_instruct_cpu_hot_cache.md``,
vLLM V1 + LMCache 2026-01, Qwen3-4B: the same 147 KB of KV per token as Qwen3-8B)."""
LMCACHE_RETRIEVE_GB_S = 17.2
"""LMCache's retrieval rate, GB/s, same run: "Retrieved 1792 out of 1792 required tokens ... 0.2461 gb, cost
14.3229 ms, throughput: 17.1818 GB/s" (its warm 6,144-token prefix: 120.5 ms TTFT with LMCache alone against
80.1 ms median with vLLM's GPU prefix cache, ~40 ms for 0.9 GB)."""
LMCACHE_CALL_S = 0.4e-3
"""Fixed cost of one LMCache store or retrieval call, s (its logs for an 8-token chunk: "cost 0.5547 ms"
to retrieve, "cost 0.4274 ms" to store, LMCache docs' vLLM quick start, 2025-09)."""
ROUTER_CPU_WEIGHT = 0.8
"""Weight of a CPU-tier block against a GPU block in the cache-aware routers' prefix score (llm-d
KV-cache manager's default ``kvCacheBackendConfigs``: gpu 1.0, cpu 0.8)."""


class CPUKVTier:
    """LRU host-memory tier of block hashes (see the module docstring)."""

    __slots__ = ("capacity_blocks", "blocks", "events", "block_bytes_per_gpu", "link_bytes_per_s",
                 "offloaded", "reloaded_blocks", "chunk_blocks", "store_bytes_per_s", "call_s", "stored_tokens",
                 "block_copy_s")

    def __init__(self, *, capacity_blocks: int, block_bytes_per_gpu: float, link_gb_s: float,
                 chunk_blocks: int = 1, retrieve_gb_s: float | None = None, store_gb_s: float = 0.0,
                 call_s: float = RELOAD_LATENCY_S, block_copy_s: float = 0.0) -> None:
        """``chunk_blocks``: blocks per hit unit (1: any block run; LMCache: a chunk);
        ``retrieve_gb_s`` / ``store_gb_s``: the connector's rates (capped by the link; store 0: the
        offload is asynchronous and free); ``call_s``: fixed cost per reload or store;
        ``block_copy_s``: per-copy GPU time of a reloaded block (all its copies: one per layer)."""
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
        if chunk_blocks < 1:
            raise ValueError(f"chunk_blocks must be >= 1, got {chunk_blocks}")
        self.chunk_blocks = int(chunk_blocks)
        if retrieve_gb_s is not None:
            self.link_bytes_per_s = min(self.link_bytes_per_s, float(retrieve_gb_s) * 1e9)
        self.store_bytes_per_s = min(float(link_gb_s), float(store_gb_s)) * 1e9
        self.call_s = float(call_s)
        if block_copy_s < 0:
            raise ValueError(f"block_copy_s must be >= 0 s, got {block_copy_s}")
        self.block_copy_s = float(block_copy_s)
        self.stored_tokens = 0
        """Prompt tokens stored synchronously so far (``lmcache``)."""

    @classmethod
    def for_model(cls, model, *, cpu_kv_gb: float, block_size: int, link_gb_s: float | None = None,
                  connector: str = "offload") -> CPUKVTier:
        """The tier of one replica running ``model`` (an ``ExecutionModel``) with ``cpu_kv_gb`` GB
        of host memory: every GPU's shard of a block is held (MLA's latent once per rank);
        ``link_gb_s``: the host link (None: the GPU preset's ``host_link_gb_s``);
        ``connector``: ``offload`` or ``lmcache`` (module docstring)."""
        shards = 1 if getattr(model.model, "is_mla", False) else model.tensor_parallel
        host_block = block_size * model.kv_bytes_per_token * shards
        if link_gb_s is None:
            link_gb_s = model.gpu.host_link_gb_s
        kw = {}
        if connector == "offload":
            layers_per_gpu = -(-model.model.num_layers // model.pipeline_parallel)  # a stage reloads its layers
            kw = dict(block_copy_s=layers_per_gpu * OFFLOAD_COPY_S)
        elif connector == "lmcache":
            kw = dict(chunk_blocks=max(1, LMCACHE_CHUNK_TOKENS // block_size), retrieve_gb_s=LMCACHE_RETRIEVE_GB_S,
                      store_gb_s=LMCACHE_STORE_GB_S, call_s=LMCACHE_CALL_S)
        else:
            raise ValueError(f"unknown cpu_kv_connector {connector!r}; valid: offload, lmcache")
        return cls(capacity_blocks=int(cpu_kv_gb * 1e9 // host_block),
                   block_bytes_per_gpu=block_size * model.kv_bytes_per_token, link_gb_s=link_gb_s, **kw)

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
        """Consecutive blocks of ``hashes[start:max_blocks]`` held here (with chunks: up to the last
        whole chunk from the prompt's start that is held)."""
        blocks = self.blocks
        n = 0
        for i in range(start, min(max_blocks, len(hashes))):
            if hashes[i] not in blocks:
                break
            n += 1
        cb = self.chunk_blocks
        if cb > 1 and n:
            n = max(0, (start + n) // cb * cb - start)
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
        return self.call_s + n_blocks * (self.block_copy_s + self.block_bytes_per_gpu / self.link_bytes_per_s)

    def store_time_s(self, tokens: int, block_size: int) -> float:
        """Synchronous store of ``tokens`` newly prefilled prompt tokens (``lmcache``; 0 for an
        asynchronous offload)."""
        if self.store_bytes_per_s <= 0.0 or tokens <= 0:
            return 0.0
        self.stored_tokens += tokens
        return self.call_s + tokens * self.block_bytes_per_gpu / block_size / self.store_bytes_per_s

    def check(self) -> None:
        """Invariants (tests, ``check_invariants``)."""
        assert 0 <= len(self.blocks) <= self.capacity_blocks, (
            f"CPU tier holds {len(self.blocks)} blocks, capacity {self.capacity_blocks}")
        assert self.reloaded_blocks >= 0 and self.offloaded >= len(self.blocks), (
            "CPU tier counters inconsistent")
