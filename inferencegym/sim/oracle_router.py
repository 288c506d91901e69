"""``prefix_oracle``: a hindsight router for prefix-sharing workloads (a privileged reference).

It reads what no real router can: every request of the run (future arrivals included, from
``Cluster.requests``), their true output lengths, and the replicas' current (not published) caches.

1. **Placement in hindsight** (once, at the first decision): requests are grouped by the first
   block of their hash chain (a shared prefix, or a conversation's first turn); each group's total
   work over the whole run (prompt tokens + ``decode_token_weight`` x output tokens, its prefix
   counted once) is known in advance. Groups are placed on replicas longest-processing-time first
   (the least-loaded replica so far takes the largest group); a group with more than a replica's
   share of the work gets as many replicas as its work needs, so hot prefixes stay resident on a
   few replicas while the totals balance.
2. **Dispatch**: the replica with the earliest clairvoyant first token
   (:func:`~inferencegym.sim.estimates.first_token_iterations` with the true remaining outputs and
   the prompt tokens cached there now) plus, when the replica is not one of the group's homes,
   ``away_penalty`` x the prefill time of the prompt's shareable blocks not cached there (sending
   a prefix away costs its home future hits and fills another cache).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .estimates import decode_iteration_s, first_token_iterations
from .router_base import _Rotating

if TYPE_CHECKING:
    from .request import Request
    from .views import RouterClusterView


class PrefixOracleRouter(_Rotating):
    """Hindsight prefix placement + clairvoyant least-cost dispatch (see the module docstring)."""

    name = "prefix_oracle"
    needs_sync = True

    def __init__(self, decode_token_weight: float = 4.0, away_penalty: float = 0.5) -> None:
        super().__init__()
        self.decode_token_weight = decode_token_weight
        self.away_penalty = away_penalty
        self._homes: dict | None = None
        self._iter_s: dict[int, tuple[int, float]] = {}

    def _place(self, cluster: "RouterClusterView") -> dict:
        wd = self.decode_token_weight
        work: dict = {}
        seen: set = set()
        for r in cluster.requests:
            h = r.block_hashes
            if not h:
                continue
            g = h[0]
            new = sum(1 for x in h if x not in seen)
            seen.update(h)
            bs = len(h) and r.prompt_tokens / max(len(h), 1)
            work[g] = work.get(g, 0.0) + (r.prompt_tokens - (len(h) - new) * bs) + wd * r.output_tokens
        n = len(cluster.replicas)
        total = sum(work.values())
        share = total / n if n else 0.0
        load = [0.0] * n
        homes: dict = {}
        for g, w in sorted(work.items(), key=lambda kv: (-kv[1], kv[0])):
            k = max(1, min(n, int(-(-w // share)) if share > 0 else 1))
            order = sorted(range(n), key=lambda i: (load[i], i))[:k]
            for i in order:
                load[i] += w / k
            homes[g] = frozenset(order)
        return homes

    def choose(self, cluster: "RouterClusterView", req: "Request", cands: list[int]) -> int:
        if self._homes is None:
            self._homes = self._place(cluster)
        reps = cluster.replicas
        h = req.block_hashes
        home = self._homes.get(h[0]) if h else None

        def cost(i: int) -> float:
            rep = reps[i]
            bs = rep.kv.block_size
            hit = rep.kv.match(h, (req.prompt_tokens - 1) // bs)[0] * bs if h else 0
            it = self._iter_s.get(i)
            if it is None or it[0] != rep.cfg.batch_cap:
                it = self._iter_s[i] = (rep.cfg.batch_cap, decode_iteration_s(rep))
            c = first_token_iterations(rep, req.prompt_tokens, expected_output_tokens=None,
                                       cached_tokens=hit) * it[1]
            if home is not None and i not in home:
                c += self.away_penalty * rep.model.prefill_time_s(max(len(h) * bs - hit, 1))
            return c

        return self._argmin(cands, cost)
