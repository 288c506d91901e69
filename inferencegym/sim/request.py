"""The request entity: one LLM inference request and every timestamp its metrics need."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .interpreted import mypyc_attr

NAN = math.nan


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # deep-copied (sim/interpreted.py)
@dataclass(slots=True, eq=False)
class Request:
    """One LLM request.

    The workload sets the first six fields; the simulator fills in the rest. Times are simulated
    seconds from the start of the run. Identity is the object (``eq=False``): two requests with the
    same fields are still two requests.
    """

    req_id: int
    """Unique id within one run (assigned by the workload, never by a class-level counter)."""
    arrival_s: float
    """Time the request reaches the cluster's router."""
    prompt_tokens: int
    """Prompt (prefill) length in tokens, >= 1."""
    output_tokens: int
    """Number of tokens to generate, >= 1 (the first one comes out of the prefill iteration)."""
    tenant: int = 0
    """Index of the tenant in ``ClusterConfig.tenants`` (0 when there is one tenant)."""
    priority: int = 0
    """0 = best effort, 1 = priority (jumps queues when priority scheduling is on)."""
    block_hashes: tuple = ()
    """Prefix-cache identity of the prompt: one chained hash per *full* simulator KV block of the
    prompt (block i's hash identifies tokens 0 .. (i+1)*block_size - 1, as vLLM's block hashes do).
    Any hashable values (ints from the workload layer; tests use tuples too). Empty: no shared
    prefixes (nothing can be reused). Built by the workload layer for the
    simulator's block size (see ``inferencegym.workload``)."""

    # --- filled by the simulator -------------------------------------------------------------
    replica_id: int = -1
    """Replica that served it (the decode replica under disaggregation)."""
    dispatched_s: float = NAN
    """Time the router placed it on a replica's queue."""
    first_scheduled_s: float = NAN
    """Time its first prefill chunk started running (end of queueing delay)."""
    first_token_s: float = NAN
    """Time its first output token was produced (end of prefill)."""
    completion_s: float = NAN
    """Time its last output token was produced."""
    prefilled_tokens: int = 0
    """Prompt tokens (plus recomputed output tokens after a preemption) already prefilled."""
    generated_tokens: int = 0
    """Output tokens produced so far."""
    preemptions: int = 0
    """Times it was preempted (recompute) for lack of KV blocks."""
    cached_tokens: int = 0
    """Prompt tokens found in the replica's prefix cache at its first admission (not prefilled).
    A recompute after a preemption may reuse cached blocks again; that reuse is not counted here."""
    tbt_max_s: float = 0.0
    """Largest gap between two consecutive output tokens."""
    tbt_sum_s: float = 0.0
    """Sum of gaps between consecutive output tokens (TPOT = tbt_sum_s / (output_tokens - 1))."""
    last_token_s: float = NAN
    """Time its latest output token was produced."""
    rejected_reason: str | None = None
    """Why it was rejected (never served), or None."""

    # --- simulator bookkeeping (internal to inferencegym.sim) -----------------------------------
    prefill_target: int = 0
    """Tokens the current (re)prefill must process: the prompt, or prompt + generated after a recompute."""
    kv_tokens: int = 0
    """Tokens whose KV is in the cache of the current replica."""
    kv_blocks: int = 0
    """KV blocks held on the current replica."""
    shared_blocks: int = 0
    """The first ``shared_blocks`` of ``kv_blocks`` are prefix-cache blocks (named by hash, shared)."""
    handoff: bool = False
    """Disaggregation: after its prefill the KV moves to a decode instance."""
    prefill_replica_id: int = -1
    """Disaggregation: the prefill instance that ran its prompt (-1 when colocated)."""
    kv_transfer_s: float = 0.0
    """Disaggregation: time spent moving its KV cache between instances."""

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float:
        return self.completion_s - self.arrival_s

    @property
    def queueing_delay_s(self) -> float:
        return self.first_scheduled_s - self.arrival_s

    @property
    def tpot_s(self) -> float:
        n = self.output_tokens - 1
        return self.tbt_sum_s / n if n > 0 else 0.0

    @property
    def done(self) -> bool:
        return not math.isnan(self.completion_s)
