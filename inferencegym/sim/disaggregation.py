"""Prefill/decode disaggregation (Splitwise, DistServe): which replicas prefill, which decode, and
where a prefilled request's KV goes.

The router picks a prefill instance at arrival (``Cluster`` passes :meth:`Disaggregation.candidates`);
when the prefill is done, the decode instance is chosen by a router of the registry
(``ClusterConfig.decode_router``, least outstanding requests by default, ties rotating), never by an
inline rule, and the KV moves over the interconnect in ``ExecutionModel.kv_transfer_time_s``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .router import make_router

if TYPE_CHECKING:
    from .replica import Replica
    from .request import Request
    from .views import RouterClusterView


class Disaggregation:
    """The prefill / decode split of ``num_replicas`` replicas and the decode placement."""

    def __init__(self, num_replicas: int, decode_router: str) -> None:
        self.n = num_replicas
        self.on = False
        self.prefill_ids: list[int] = []
        self.decode_ids: list[int] = []
        self.all_ids = list(range(num_replicas))
        self.decode_router = make_router(decode_router)

    def set(self, on: bool, prefill_replicas: int) -> None:
        """Split into prefill instances (the first ``prefill_replicas``) and decode instances, or
        merge them back (``on=False``)."""
        n = self.n
        if on:
            p = int(prefill_replicas)
            if n < 2 or not 1 <= p < n:
                raise ValueError(f"disaggregation needs 1 <= prefill_replicas < num_replicas={n}, got {p}")
            self.prefill_ids = list(range(p))
            self.decode_ids = list(range(p, n))
        else:
            self.prefill_ids = []
            self.decode_ids = []
        self.on = bool(on)

    def candidates(self) -> list[int]:
        """Replicas an arrival may be routed to: the prefill pool when on, else all."""
        return self.prefill_ids if self.on else self.all_ids

    def is_prefill(self, replica_id: int) -> bool:
        """Whether a request placed on ``replica_id`` now hands its KV off after its prefill."""
        return self.on and replica_id in self.prefill_ids

    def start_transfer(self, view: RouterClusterView, replicas: Sequence[Replica], r: Request,
                       src: Replica) -> tuple[int, float]:
        """Choose the decode replica of the prefilled ``r`` (the decode router reads ``view``,
        synced by the caller when ``decode_router.needs_sync``) and start its KV transfer; returns
        ``(destination, transfer seconds)``. If the split was undone meanwhile, any other replica
        (or the source itself in a one-replica cluster) decodes."""
        dst_ids = self.decode_ids or [i for i in self.all_ids if i != src.id] or [src.id]
        dst = self.decode_router.choose(view, r, dst_ids)
        dt = float(src.model.kv_transfer_time_s(r.kv_tokens))
        r.prefill_replica_id = src.id
        r.kv_transfer_s = dt
        replicas[dst].inbound += 1
        return dst, dt
