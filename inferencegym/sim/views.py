"""What a policy may read: read-only views of the cluster and its replicas (``typing.Protocol``).

Routers (``router.py``, ``cache_routers.py``, ``oracle_router.py``) and batching policies
(``batching.py``) are typed against these Protocols, never against ``Cluster`` or ``Replica``: the
concrete classes satisfy them structurally, and the policies import nothing of the event loop (no
import circle in ``sim/``, ``TYPE_CHECKING`` imports included). A member missing here is a member
a policy must not touch; adding one is a deliberate widening of the contract.

* :class:`RouterClusterView` / :class:`RouterReplicaView` / :class:`KVView`: what a router reads at
  a decision (queues, KV load, its published cache view; the privileged ``prefix_oracle`` also
  reads ``requests`` and the current cache through ``KVView.match``); ``published()`` is the
  routers' only way to the caches of other replicas.
* :class:`BatchingReplicaView`: what a batching policy reads of its replica, plus the replica's
  three admission helpers (the only calls that change state; KV accounting, the watermark,
  preemption and priority stay in ``replica.py``).
"""

from __future__ import annotations

from collections.abc import Sequence, Sized
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

    from .cache_view import ReplicaSnapshot
    from .config import ReplicaConfig
    from .request import Request


class KVView(Protocol):
    """A replica's paged KV cache, read-only."""

    @property
    def block_size(self) -> int:
        """Tokens per KV block."""
        ...

    @property
    def used_blocks(self) -> int:
        """Blocks held by running requests."""
        ...

    @property
    def capacity_blocks(self) -> int:
        """Blocks the cache may use."""
        ...

    def match(self, hashes: tuple, max_blocks: int) -> tuple:
        """Leading blocks of ``hashes`` cached now: ``(blocks, ...)`` (privileged: current state)."""
        ...


class ExecutionView(Protocol):
    """The replica's execution-time model, as far as routers use it."""

    def prefill_time_s(self, prompt_tokens: int) -> float:
        """One request's whole prefill on an empty cache, seconds."""
        ...

    def decode_step_time_s(self, batch_size: int, context_tokens: int) -> float:
        """One decode iteration of ``batch_size`` sequences at that context, seconds."""
        ...


class RouterReplicaView(Protocol):
    """One replica as a router sees it (counts and queues; never mutated by a router)."""

    @property
    def id(self) -> int:
        """Replica index."""
        ...

    @property
    def cfg(self) -> ReplicaConfig:
        """The knobs in force."""
        ...

    @property
    def model(self) -> ExecutionView:
        """Its execution-time model."""
        ...

    @property
    def kv(self) -> KVView:
        """Its KV cache."""
        ...

    @property
    def waiting(self) -> Sequence[Request]:
        """Best-effort requests queued, oldest first."""
        ...

    @property
    def prio_waiting(self) -> Sequence[Request]:
        """Priority requests queued (priority routing on), oldest first."""
        ...

    @property
    def running(self) -> Sequence[Request]:
        """Admitted requests (prefilling or decoding)."""
        ...

    def outstanding(self) -> int:
        """Queued + running + inbound KV transfers."""
        ...

    def queued(self) -> int:
        """Requests waiting for admission."""
        ...


class RouterClusterView(Protocol):
    """The cluster as a router sees it at a decision."""

    @property
    def now_s(self) -> float:
        """Simulated time, seconds."""
        ...

    @property
    def rng(self) -> np.random.Generator:
        """The cluster's Generator (random routers draw from it)."""
        ...

    @property
    def replicas(self) -> Sequence[RouterReplicaView]:
        """Every replica, by index."""
        ...

    @property
    def requests(self) -> Sequence[Request]:
        """Every submitted request (future arrivals too: privileged routers only)."""
        ...

    def published(self) -> Sequence[ReplicaSnapshot]:
        """Every replica's prefix cache and load metrics as last published (slightly stale:
        ``ClusterConfig.cache_publish_interval_s``)."""
        ...


class BatchingReplicaView(Protocol):
    """What a batching policy reads of its replica, and the admission helpers it may call."""

    @property
    def cfg(self) -> ReplicaConfig:
        """The knobs in force (``max_tokens_per_iter``, ``chunk_size``)."""
        ...

    @property
    def running(self) -> Sequence[Request]:
        """Admitted requests."""
        ...

    @property
    def partials_possible(self) -> bool:
        """Whether a running request may have an unfinished prefill (after a policy switch)."""
        ...

    @property
    def waiting(self) -> Sized:
        """The normal-priority queue (only its emptiness is read)."""
        ...

    @property
    def prio_waiting(self) -> Sized:
        """The high-priority queue (only its emptiness is read)."""
        ...

    def head(self) -> Request | None:
        """The next request to admit, or None."""
        ...

    def try_admit(self, r: Request, full: bool, budget: int | None = None) -> bool:
        """Admit ``r`` if its KV fits (``full``: for its whole length); False leaves it queued."""
        ...

    def reserve_decode(self) -> None:
        """Reserve the next decode token's KV for every decoding request (preempting if needed)."""
        ...

    def in_step_block(self) -> bool:
        """Multi-step scheduling: whether a decode block started by ``start_step_block`` has steps left."""
        ...

    def start_step_block(self, steps: int) -> None:
        """Multi-step scheduling: the decodes planned now start a block of ``steps`` steps."""
        ...
