"""Estimated time to first token of a request on a replica, from the replica's state.

One job: replay a replica's slot releases to estimate when a newly arriving request would produce
its first token there. Used by the routers ``estimated_ttft`` (observable state only) and
``clairvoyant`` (true output lengths), and by the cluster env's ``est_ttft`` router feature.

Model (in units of one decode iteration of the replica, so a faster GPU counts faster):

- the replica runs at most ``batch_cap`` sequences; a free slot is available now;
- a running request frees its slot after its remaining prefill chunks plus its remaining output
  tokens; a queued request takes the earliest free slot, in queue order (priority queue first), and
  holds it for its prefill chunks plus its output tokens;
- the new request starts at the earliest free slot after the queue, and its first token comes after
  the chunked prefill of every prompt ahead of it and its own
  (``(prefill tokens ahead + prompt) / chunk`` iterations).

A request's output length is unknown to a real router: with ``expected_output_tokens`` given, every
request's remaining output is taken as that expectation (memoryless: the same for a request that has
already produced tokens), which uses only what a router observes; with ``None``, the true remaining
output is used (clairvoyant; no learning agent sees it). The estimate ignores preemptions, KV
limits, and speculative decoding (stated simplifications). With prefix caching, the new request's
cached prompt tokens (as the replicas last published them: ``Cluster.published_cached_tokens``)
are not prefilled, so they do not count.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .views import RouterReplicaView


def first_token_iterations(rep: "RouterReplicaView", prompt_tokens: int, *,
                           expected_output_tokens: float | None, cached_tokens: int = 0) -> float:
    """Estimated iterations until a new request of ``prompt_tokens`` would emit its first token on
    replica ``rep`` (read through :class:`~inferencegym.sim.views.RouterReplicaView`), of
    which ``cached_tokens`` are in the replica's prefix cache and are not prefilled."""
    chunk = max(1, rep.cfg.chunk_size)
    running = rep.running  # (Sequence[Request]: compiled, their attributes are read natively)
    pw = rep.prio_waiting
    wt = rep.waiting
    # The free slots (all 0.0) are kept as a count beside the heap of the running requests' release
    # times: the same multiset of values popped in the same order as one heap of every slot (a pop
    # takes a free slot while none of the heap is below 0.0), without heapifying ``batch_cap`` zeros.
    zeros = rep.cfg.batch_cap - len(running)
    if zeros < 0:
        zeros = 0
    clair = expected_output_tokens is None
    eo: float = 0.0 if expected_output_tokens is None else expected_output_tokens
    if zeros and not clair and eo >= 0.0 and not (pw or wt):
        # nothing queued, a free slot, no release time below 0: the request starts now (the common
        # case for the router feature); only the prefill ahead of it counts
        ahead = 0
        for r in running:
            left = r.prefill_target - r.prefilled_tokens
            if left > 0:
                ahead += left
        return 0.0 + (ahead + prompt_tokens - cached_tokens) / chunk
    slots = []
    ahead = 0
    for r in running:
        left = r.prefill_target - r.prefilled_tokens
        if left < 0:
            left = 0
        ahead += left
        rem = (r.output_tokens - r.generated_tokens) if clair else eo
        slots.append(left / chunk + rem)
    if pw or wt:
        heapq.heapify(slots)
        for q in (pw, wt):
            for r in q:
                if zeros and (not slots or slots[0] >= 0.0):
                    zeros -= 1
                    t = 0.0
                else:
                    t = heapq.heappop(slots) if slots else 0.0
                ahead += r.prompt_tokens
                out = r.output_tokens if clair else eo
                heapq.heappush(slots, t + r.prompt_tokens / chunk + out)
        low = slots[0] if slots else None
    else:
        low = min(slots) if slots else None
    if low is None:
        start = 0.0
    elif zeros and low >= 0.0:
        start = 0.0
    else:
        start = low
    return start + (ahead + prompt_tokens - cached_tokens) / chunk


def decode_iteration_s(rep: "RouterReplicaView") -> float:
    """The replica's decode-iteration time at its batch cap and a 1k-token context (seconds)."""
    return float(rep.model.decode_step_time_s(batch_size=rep.cfg.batch_cap, context_tokens=1024))


def est_ttft_values(replicas: list, prompt_tokens: int, iter_s_cache: dict, expected_output_tokens: float,
                    slo_s: float, cached_tokens: list | None) -> list[float]:
    """Per replica, :func:`first_token_iterations` x the replica's :func:`decode_iteration_s` /
    ``slo_s`` (the cluster env's ``est_ttft`` column), the iteration time memoised in
    ``iter_s_cache`` by ``(replica index, batch cap)``; ``cached_tokens`` (per replica, or None for
    none) the published cached prompt tokens. One loop, compiled with the simulator core."""
    out: list[float] = []
    for i, rep in enumerate(replicas):
        key = (i, rep.cfg.batch_cap)
        it = iter_s_cache.get(key)
        if it is None:
            it = iter_s_cache[key] = decode_iteration_s(rep)
        c = cached_tokens[i] if cached_tokens is not None else 0
        out.append(first_token_iterations(rep, prompt_tokens, cached_tokens=c,
                                          expected_output_tokens=expected_output_tokens) * it / slo_s)
    return out
