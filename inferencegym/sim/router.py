"""Global routers: which replica gets an arriving request.

One-method classes ``choose(cluster, request, candidates) -> replica index`` in a small registry.
``candidates`` is the list of replica indices allowed (all replicas, or the prefill pool under
disaggregation). Ties go to the candidate after the previous choice (rotating), never always to
replica 0 (Vidur's LOR does that and leaves replicas idle). The production cache-aware routers
(llm-d, SGLang, Dynamo) live in ``cache_routers.py`` and are registered here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .cache_routers import CACHE_ROUTERS
from .oracle_router import PrefixOracleRouter
from .router_base import _Rotating

if TYPE_CHECKING:
    from .request import Request
    from .views import RouterClusterView


class RoundRobinRouter:
    """Cycle over the candidates."""

    name = "round_robin"
    needs_sync = False

    def __init__(self) -> None:
        self._i = 0

    def choose(self, cluster: "RouterClusterView", req: "Request", cands: list[int]) -> int:
        r = cands[self._i % len(cands)]
        self._i += 1
        return r


class RandomRouter:
    """Uniformly random candidate, from the cluster's Generator."""

    name = "random"
    needs_sync = False

    def choose(self, cluster: "RouterClusterView", req: "Request", cands: list[int]) -> int:
        return cands[int(cluster.rng.integers(len(cands)))]


class LeastOutstandingRouter(_Rotating):
    """Fewest outstanding requests: queued + running (+ inbound KV transfers)."""

    name = "least_outstanding_requests"

    def choose(self, cluster: "RouterClusterView", req: "Request", cands: list[int]) -> int:
        reps = cluster.replicas
        return self._argmin(cands, lambda i: reps[i].outstanding())


class LeastKVLoadRouter(_Rotating):
    """Lowest KV load: blocks in use plus the blocks the queued prompts will need, over capacity."""

    name = "least_kv_load"
    needs_sync = True

    def choose(self, cluster: "RouterClusterView", req: "Request", cands: list[int]) -> int:
        reps = cluster.replicas

        def load(i: int) -> float:
            rep = reps[i]
            kv = rep.kv
            q = 0
            for qq in (rep.waiting, rep.prio_waiting):
                for r in qq:
                    q += -(-r.prefill_target // kv.block_size)
            return (kv.used_blocks + q) / kv.capacity_blocks

        return self._argmin(cands, load)


class PowerOfTwoRouter:
    """Two distinct random candidates (cluster Generator), the one with fewer outstanding requests."""

    name = "power_of_two_choices"
    needs_sync = False

    def choose(self, cluster: "RouterClusterView", req: "Request", cands: list[int]) -> int:
        if len(cands) == 1:
            return cands[0]
        i, j = cluster.rng.choice(len(cands), size=2, replace=False)
        a, b = cands[int(i)], cands[int(j)]
        reps = cluster.replicas
        return a if reps[a].outstanding() <= reps[b].outstanding() else b


class ClairvoyantRouter(_Rotating):
    """Knows output lengths: least outstanding work in tokens (remaining prefill + remaining decode)."""

    name = "clairvoyant"
    needs_sync = True  # reads generated-token counts

    def choose(self, cluster: "RouterClusterView", req: "Request", cands: list[int]) -> int:
        reps = cluster.replicas

        def work(i: int) -> int:
            rep = reps[i]
            w = 0
            for qq in (rep.waiting, rep.prio_waiting, rep.running):
                for r in qq:
                    w += (r.prefill_target - r.prefilled_tokens) + (r.output_tokens - r.generated_tokens)
            return w

        return self._argmin(cands, work)


class ExternalRouter:
    """Marker: the cluster pauses at each arrival (``run_until_decision``) for ``dispatch``."""

    name = "external"
    needs_sync = True

    def choose(self, cluster: "RouterClusterView", req: "Request", cands: list[int]) -> int:  # pragma: no cover
        raise RuntimeError("the external router does not choose; call Cluster.dispatch")


ROUTERS: dict[str, type] = {
    cls.name: cls
    for cls in (RoundRobinRouter, RandomRouter, LeastOutstandingRouter, LeastKVLoadRouter,
                PowerOfTwoRouter, ClairvoyantRouter, ExternalRouter, *CACHE_ROUTERS,
                PrefixOracleRouter)
}


def make_router(name: str):
    try:
        return ROUTERS[name]()
    except KeyError:
        raise ValueError(f"unknown router {name!r}; valid: {', '.join(sorted(ROUTERS))}") from None
