"""Checking requests handed to ``Cluster.submit`` (one job: the rules a submitted request must
meet, each refused with one clear message before anything is added)."""

from __future__ import annotations

import math

from .request import Request


def check_submitted(requests: list, *, now_s: float, n_tenants: int, block_size: int) -> None:
    """Raise ``TypeError`` / ``ValueError`` naming the first request that cannot be submitted at
    ``now_s`` to a cluster with ``n_tenants`` tenants and ``block_size``-token KV blocks."""
    seen: set[int] = set()
    for r in requests:
        if not isinstance(r, Request):
            raise TypeError(f"submit expects Request objects, got {type(r).__name__}")
        if not (r.arrival_s >= now_s) or math.isinf(r.arrival_s):
            raise ValueError(f"request {r.req_id}: arrival_s={r.arrival_s} is before the clock "
                             f"({now_s}) or not finite; submit only future arrivals")
        if r.prompt_tokens < 1 or r.output_tokens < 1:
            raise ValueError(f"request {r.req_id}: prompt_tokens and output_tokens must be >= 1, "
                             f"got {r.prompt_tokens}, {r.output_tokens}")
        if not 0 <= r.tenant < n_tenants:
            raise ValueError(f"request {r.req_id}: tenant {r.tenant} out of range; the config has "
                             f"{n_tenants} tenant(s) (indices 0..{n_tenants - 1})")
        if r.priority not in (0, 1):
            raise ValueError(f"request {r.req_id}: priority must be 0 or 1, got {r.priority}")
        h = r.block_hashes
        if h and (len(h) > r.prompt_tokens // block_size or len(set(h)) != len(h)):
            raise ValueError(f"request {r.req_id}: block_hashes must hold at most one hash per full "
                             f"{block_size}-token block of the prompt ({r.prompt_tokens // block_size}), all distinct "
                             f"(chained); got {len(h)} hashes, {len(set(h))} distinct")
        if r.prefill_target != 0 or r.generated_tokens != 0 or r.replica_id != -1 or id(r) in seen:
            raise ValueError(f"request {r.req_id} was already submitted or simulated; submit fresh "
                             f"Request objects")
        seen.add(id(r))
