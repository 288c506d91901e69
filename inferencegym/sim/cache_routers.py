"""Production cache-aware routers: llm-d's inference scheduler (precise and approximate prefix
scorers), SGLang's cache-aware router and NVIDIA Dynamo's KV router, with their published defaults
(sources in docs/simulator.md, "Cache-aware routers").

They see only what the real routers see: the replicas' prefix caches and load metrics as published
(``Cluster.published()``, refreshed every ``ClusterConfig.cache_publish_interval_s``), or the
router's own record of where it sent which prompt blocks (an LRU index / approximate tree). Prefix
identity is ``Request.block_hashes`` (one chained hash per simulator KV block), standing for the
token-block hashes (llm-d, Dynamo) or prompt text (SGLang) the real routers use.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from .cache_view import leading_blocks
from .router_base import _Rotating

if TYPE_CHECKING:
    from .request import Request
    from .views import RouterClusterView


class _BlockLRU:
    """Router-side index of one replica: the block hashes sent there, least recently used first."""

    __slots__ = ("capacity", "d")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.d: OrderedDict = OrderedDict()

    def add(self, hashes) -> None:
        d = self.d
        for h in hashes:
            if h in d:
                d.move_to_end(h)
            else:
                d[h] = None
        while len(d) > self.capacity:
            d.popitem(last=False)

    def prefix_blocks(self, hashes, max_blocks: int) -> int:
        return leading_blocks(hashes, self.d, max_blocks)

    def __len__(self) -> int:
        return len(self.d)


class _Index:
    """One ``_BlockLRU`` per replica, created on first use."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.per: dict[int, _BlockLRU] = {}

    def of(self, i: int) -> _BlockLRU:
        x = self.per.get(i)
        if x is None:
            x = self.per[i] = _BlockLRU(self.capacity)
        return x


class _WeightedScorers(_Rotating):
    """llm-d / Gateway API inference extension ``max-score-picker`` over weighted scorers; ties
    rotate (the real picker breaks ties at random)."""

    def _pick(self, cands: list[int], scores: dict[int, float]) -> int:
        return self._argmin(cands, lambda i: -scores[i])


def _minmax_hits(raw: dict[int, int]) -> dict[int, float]:
    """llm-d's ``indexedScoresToNormalizedScoredPods``: replicas with a hit are min-max normalised
    (all equal: 1), replicas without a hit score 0."""
    hit = {i: v for i, v in raw.items() if v > 0}
    out = {i: 0.0 for i in raw}
    if hit:
        lo, hi = min(hit.values()), max(hit.values())
        for i, v in hit.items():
            out[i] = 1.0 if hi == lo else (v - lo) / (hi - lo)
    return out


class LLMDPreciseRouter(_WeightedScorers):
    """llm-d precise prefix-cache-aware scheduling: ``prefix_weight * precise-prefix-cache-scorer +
    kv_weight * kv-cache-utilization-scorer + queue_weight * queue-scorer``, highest wins. Prefix:
    leading blocks of the prompt cached on the replica (published KV events), min-max normalised
    over the replicas with a hit; KV: 1 - KV usage; queue: (max - q) / (max - min) of the waiting
    queues (1 when all equal)."""

    name = "llmd_precise"
    needs_sync = False

    def __init__(self, prefix_weight: float = 2.0, kv_weight: float = 1.0, queue_weight: float = 1.0) -> None:
        super().__init__()
        self.w = (prefix_weight, kv_weight, queue_weight)

    def choose(self, cluster: "RouterClusterView", req: "Request", cands: list[int]) -> int:
        snaps = cluster.published()
        h = req.block_hashes
        pre = _minmax_hits({i: snaps[i].prefix_blocks(h) if h else 0 for i in cands})
        qs = {i: snaps[i].waiting for i in cands}
        qmax, qmin = max(qs.values()), min(qs.values())
        wp, wk, wq = self.w
        scores = {i: wp * pre[i] + wk * (1.0 - snaps[i].kv_usage)
                  + wq * (1.0 if qmax == qmin else (qmax - qs[i]) / (qmax - qmin)) for i in cands}
        return self._pick(cands, scores)


class LLMDApproxRouter(_WeightedScorers):
    """llm-d's default inference scheduling: ``prefix_weight * prefix-cache-scorer + load_weight *
    load-aware-scorer``. Prefix: matched / total prompt blocks (at most 256) in the router's own LRU
    index of the blocks it sent to each replica (31,250 blocks per replica); load-aware:
    ``0.5 * (1 - min(q, 128) / 128)`` of the published waiting queue (0.5 when empty)."""

    name = "llmd_approx"
    needs_sync = False
    MAX_BLOCKS = 256
    LRU_BLOCKS = 31_250
    QUEUE_THRESHOLD = 128

    def __init__(self, prefix_weight: float = 2.0, load_weight: float = 1.0) -> None:
        super().__init__()
        self.w = (prefix_weight, load_weight)
        self.index = _Index(self.LRU_BLOCKS)

    def choose(self, cluster: "RouterClusterView", req: "Request", cands: list[int]) -> int:
        snaps = cluster.published()
        h = req.block_hashes[:self.MAX_BLOCKS]
        wp, wl = self.w
        qt = self.QUEUE_THRESHOLD
        scores = {}
        for i in cands:
            pre = self.index.of(i).prefix_blocks(h, self.MAX_BLOCKS) / len(h) if h else 0.0
            q = snaps[i].waiting
            scores[i] = wp * pre + wl * 0.5 * (1.0 - min(q, qt) / qt)
        best = self._pick(cands, scores)
        if h:
            self.index.of(best).add(h)
        return best


class SGLangCacheAwareRouter(_Rotating):
    """SGLang router ``cache_aware`` policy: if the load spread exceeds ``balance_abs`` requests and
    ``balance_rel`` times the least load, the least-loaded replica; else the replica whose
    approximate tree (the router's record of prompts it sent there) matches the prompt best when
    the match rate exceeds ``cache_threshold``, else the replica with the smallest tree. Load: the
    router's own count of requests in flight per replica. The chosen replica's tree takes the prompt;
    every ``eviction_interval_s`` trees are cut to ``max_tree_blocks`` (least recently used first)."""

    name = "sglang_cache_aware"
    needs_sync = False

    def __init__(self, cache_threshold: float = 0.3, balance_abs: int = 64, balance_rel: float = 1.5,
                 eviction_interval_s: float = 120.0, max_tree_blocks: int = 67_108_864 // 4 // 16) -> None:
        super().__init__()
        self.cache_threshold = cache_threshold
        self.balance_abs = balance_abs
        self.balance_rel = balance_rel
        self.eviction_interval_s = eviction_interval_s
        self.trees = _Index(1 << 62)  # the size cap applies at eviction ticks only
        self.max_tree_blocks = max_tree_blocks
        self._next_evict = eviction_interval_s

    def choose(self, cluster: "RouterClusterView", req: "Request", cands: list[int]) -> int:
        if cluster.now_s >= self._next_evict:
            for t in self.trees.per.values():
                while len(t.d) > self.max_tree_blocks:
                    t.d.popitem(last=False)
            self._next_evict = (cluster.now_s // self.eviction_interval_s + 1) * self.eviction_interval_s
        reps = cluster.replicas
        loads = {i: reps[i].outstanding() for i in cands}
        hi, lo = max(loads.values()), min(loads.values())
        h = req.block_hashes
        if hi - lo > self.balance_abs and hi > lo * self.balance_rel:
            best = self._argmin(cands, loads.__getitem__)
        else:
            match = {i: self.trees.of(i).prefix_blocks(h, 1 << 30) for i in cands} if h else {}
            top = max(match.values()) if match else 0
            rate = top * cluster.replicas[cands[0]].kv.block_size / req.prompt_tokens
            if top > 0 and rate > self.cache_threshold:
                best = self._argmin(cands, lambda i: -match[i])
            else:
                best = self._argmin(cands, lambda i: len(self.trees.of(i)))
        if h:
            self.trees.of(best).add(h)
        return best


class DynamoKVRouter(_Rotating):
    """NVIDIA Dynamo KV router: ``cost = overlap_score_weight * prefill_blocks + decode_blocks``,
    lowest wins (``router_temperature = 0``). Prefill blocks: the replica's pending prefill tokens
    plus the prompt tokens not cached there (published KV events), over the block size; decode
    blocks: the KV blocks the replica holds and has promised to queued requests, plus this
    request's. Dynamo tracks the active blocks itself; here they are read from the replica."""

    name = "dynamo_kv"
    needs_sync = False

    def __init__(self, overlap_score_weight: float = 1.0) -> None:
        super().__init__()
        self.overlap_score_weight = overlap_score_weight

    def choose(self, cluster: "RouterClusterView", req: "Request", cands: list[int]) -> int:
        snaps = cluster.published()
        reps = cluster.replicas
        h = req.block_hashes
        wo = self.overlap_score_weight

        def cost(i: int) -> float:
            rep = reps[i]
            bs = rep.kv.block_size
            pending = 0
            queued_blocks = 0
            for q in (rep.prio_waiting, rep.waiting):
                for r in q:
                    pending += r.prefill_target - r.prefilled_tokens
                    queued_blocks += -(-r.prefill_target // bs)
            for r in rep.running:
                left = r.prefill_target - r.prefilled_tokens
                if left > 0:
                    pending += left
            cached = snaps[i].prefix_blocks(h, (req.prompt_tokens - 1) // bs) * bs if h else 0
            prefill_blocks = (pending + req.prompt_tokens - cached) / bs
            decode_blocks = rep.kv.used_blocks + queued_blocks + -(-req.prompt_tokens // bs)
            return wo * prefill_blocks + decode_blocks

        return self._argmin(cands, cost)


CACHE_ROUTERS = (LLMDPreciseRouter, LLMDApproxRouter, SGLangCacheAwareRouter, DynamoKVRouter)
