"""What the cluster reports (one job: reading its state out, never changing the simulation):
window and run statistics, per-replica features for agents, the published cache view, prefix hits
by tier, the per-request results table, and the invariant checks of tests.

The base class of :class:`inferencegym.sim.cluster.Cluster` (``cluster.py`` is the event loop,
routing and placement). State contract: ``Cluster.__init__`` sets every attribute annotated on
``ClusterReadout``; nothing else crosses the line.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .events import EV_STEP
from .interpreted import mypyc_attr
from .metrics import WindowStats
from .outputs import ReplicaFeatures, results_table, write_parquet
from .replica import RUN
from .window_metrics import RunLedger, collect_window

if TYPE_CHECKING:
    from .config import ClusterConfig
    from .request import Request


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # deep-copied (sim/interpreted.py)
class ClusterReadout:
    """Methods of ``Cluster`` that read its state out (see the module docstring)."""

    config: ClusterConfig
    replicas: list
    ledger: RunLedger
    events: Any
    now_s: float
    requests: list
    cache_view: Any
    check: bool
    _features: ReplicaFeatures
    _pending_decision: Request | None

    # ------------------------------------------------------------------ state and metrics
    def sync(self) -> None:
        """Apply every replica's decode iterations finished by now (bookkeeping only)."""
        t = self.now_s
        for rep in self.replicas:
            if rep.state == RUN:
                rep.sync(t)

    def first_tokens_since(self, marks: list) -> bool:
        """Whether any replica emitted a first token since the previous call with ``marks`` (True
        on the first call, ``marks`` empty), updating ``marks`` in place: per replica its window's
        list of first-token requests and that list's length. A first token always joins that list
        (``ReplicaAdvance._emit_token``, the one place a first token is set) and a window reset
        starts a new list object; ``marks`` holds the old one, so its identity is not reused."""
        reps = self.replicas
        changed = False
        if len(marks) != 2 * len(reps):
            marks.clear()
            for _ in reps:
                marks.append(None)
                marks.append(-1)
            changed = True
        j = 0
        for rep in reps:
            f = rep.win.first
            k = len(f)
            if marks[j] is not f or marks[j + 1] != k:
                marks[j] = f
                marks[j + 1] = k
                changed = True
            j += 2
        return changed

    def check_invariants(self) -> None:
        """KV blocks: used + free = capacity, never negative, used = sum held; conservation."""
        for rep in self.replicas:
            rep.check_invariants()
        queued = sum(rep.queued() + len(rep.running) for rep in self.replicas)
        in_heap = sum(1 for e in self.events if e[1] != EV_STEP)
        pending = 1 if self._pending_decision is not None else 0
        led = self.ledger
        total = led.completed + led.rejected + queued + in_heap + pending
        assert total == led.submitted, (f"conservation: completed {led.completed} + rejected "
                                        f"{led.rejected} + in system {queued + in_heap + pending} "
                                        f"!= submitted {led.submitted}")

    def window_stats(self, reset: bool = True, brief: bool = False) -> WindowStats:
        """Aggregates since the last reset (or the start). ``brief``: without the figures no env
        step reads (``collect_window``: the TBT mean, end-to-end / TPOT / queueing percentiles and
        the tenants' latency percentiles are NaN). A cluster told ``percentiles_only_tbt`` gives
        the brief readout only (its TBT records are merged: the mean would round differently)."""
        if not brief and any(rep.win.merge_tbt for rep in self.replicas):
            raise ValueError("window_stats: this cluster merges its TBT records for percentiles only "
                             "(percentiles_only_tbt, set by LLMServeEnv.reset); got brief=False, which "
                             "needs the TBT mean: call window_stats(reset, brief=True)")
        self.sync()
        ws = collect_window(self.replicas, self.config.tenants, self.ledger, self.now_s, brief)
        if reset:
            self.ledger.reset_window(self.now_s)
            for rep in self.replicas:
                rep.reset_window(self.now_s)
        return ws

    def skip_tenant_tbt(self) -> None:
        """Stop recording each tenant's time-between-token samples (from the current window on):
        for a reader that never looks at them (``LLMServeEnv``: its observation, reward and info
        read the cluster's TBT only). The replicas then record TBT as with one tenant (the same
        cluster records, no per-tenant ones: cheaper speculative steps and window resets), and
        ``window_stats`` gives every tenant's ``tbt_s`` as NaN. Nothing else changes."""
        for rep in self.replicas:
            rep.win.ttbt = None

    def percentiles_only_tbt(self) -> None:
        """Promise that the window's TBT is read for its percentiles only (``LLMServeEnv``: its
        readout is ``window_stats(brief=True)``, no TBT mean). From the current window on, the
        speculative steps merge an iteration's records of equal value (the sequences with the
        iteration's common gap and the same token count: one record, weights summed), which leaves
        the weighted multiset of values, hence every inverted-CDF percentile, bit for bit as
        before with fewer records to write, read and free. Compiled core only
        (``spec_step.NATIVE``): in pure Python the counting costs more than it saves, so it
        records per sequence as before. ``window_stats(brief=False)`` (and
        ``run_stats``) then refuse with a ValueError: the mean over merged records would round
        differently. Per-request figures are not affected."""
        for rep in self.replicas:
            rep.win.merge_tbt = True

    def closed_window_completions(self) -> tuple[list[Request], list[bool]]:
        """The requests completed in the window closed by the last ``window_stats(reset=True)``,
        in completion order, and whether each met its SLO (``slo.meets_slo``, decided once)."""
        return self.ledger.closed_done, self.ledger.closed_ok

    def run_stats(self) -> WindowStats:
        """Aggregates over the current window without resetting it (the whole run if never reset)."""
        return self.window_stats(reset=False)

    # ------------------------------------------------------------------ agent-facing state
    def replica_features(self) -> np.ndarray:
        """(N, 8) float32 per-replica state, Vidur-style (names in ``Cluster.FEATURE_NAMES``):
        queue length, oldest and mean wait of queued requests (s), running sequences, KV occupancy,
        p90 of the last ``recent_window`` TTFTs and iteration times (s, 0 before any), and the load
        trend (outstanding requests now minus at the previous call)."""
        self.sync()
        return self._features(self.replicas, self.now_s)

    def published(self) -> list:
        """Every replica's prefix cache and load metrics as last published (what routers see)."""
        return self.cache_view.get(self)

    def published_cached_tokens(self, replica_id: int, req: Request) -> int:
        """Prompt tokens of ``req`` cached on ``replica_id`` as last published (what a router may
        credit; at most ``prompt_tokens - 1``, whole blocks)."""
        h = req.block_hashes
        if not h:
            return 0
        bs = self.replicas[replica_id].kv.block_size
        snap = self.published()[replica_id]
        g, c = snap.prefix_blocks_by_tier(h, (req.prompt_tokens - 1) // bs)
        return (g + c) * bs  # CPU-tier blocks are reloaded, not recomputed

    def prefix_hit_rate_by_tier(self) -> dict[str, float]:
        """Since the start: prompt tokens served from each cache tier over prompt tokens looked up
        at first admission, ``{"gpu": ..., "cpu": ...}`` (NaN before any lookup)."""
        q = g = c = 0
        for rep in self.replicas:
            tq, tg, tc = rep.tier_tokens
            q += tq
            g += tg
            c += tc
        if not q:
            return {"gpu": math.nan, "cpu": math.nan}
        return {"gpu": g / q, "cpu": c / q}

    # ------------------------------------------------------------------ results
    def results(self) -> dict[str, np.ndarray]:
        """Per-request table over every submitted request (dict of equal-length numpy arrays),
        with derived ttft_s, tpot_s, e2e_s, queueing_delay_s, rejected and rejected_reason."""
        return results_table(self.requests)

    def write_parquet(self, path) -> None:
        """Write ``results()`` to a Parquet file (pyarrow)."""
        write_parquet(self.results(), path)
