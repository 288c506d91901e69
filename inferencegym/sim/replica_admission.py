"""Admission to a replica's running batch: the prefix-cache lookup, KV allocation with the watermark,
priority preemption and the decode reservation (the mutators a batching policy may call, see
``sim/views.py``'s ``BatchingReplicaView``).

The base class of :class:`inferencegym.sim.replica.Replica` between it and ``ReplicaAdvance``:
``replica.py`` holds the replica's state, queues, knob changes and planning; this file decides who
joins the batch and what it costs in blocks. The state it reads and writes beyond
``ReplicaAdvance``'s is declared below (``ReplicaAdmission``'s annotations, the contract
``Replica.__init__`` fulfils, checked by ``tests/sim/test_sim_events.py``).
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Any

from .execution_fast import IterationCosts, iteration_costs
from .replica_advance import ReplicaAdvance
from .interpreted import mypyc_attr

if TYPE_CHECKING:
    from .config import ReplicaConfig
    from .cpu_kv import CPUKVTier
    from .request import Request

_isnan = math.isnan


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # deep-copied (sim/interpreted.py)
class ReplicaAdmission(ReplicaAdvance):
    """Methods of ``Replica`` that admit, preempt and reserve (see the module docstring).

    State contract: ``Replica.__init__`` sets every attribute annotated here (and ``ReplicaAdvance``'s);
    ``Replica`` provides ``max_kv_tokens(r)`` and ``enqueue(r, front)``.
    """

    cfg: ReplicaConfig
    model: Any
    # the compiled iteration time of ``model`` (``execution_fast``) and the model it was made for
    _itc: IterationCosts | None
    _itc_model: Any
    _itcs: dict
    waiting: deque
    prio_waiting: deque
    priority_on: bool
    lookahead: int
    cpu: CPUKVTier | None
    reload_debt_s: float
    tier_tokens: list
    preempted_in_plan: bool

    def max_kv_tokens(self, r: "Request") -> int:  # pragma: no cover - provided by Replica
        raise NotImplementedError

    def enqueue(self, r: "Request", front: bool = False) -> None:  # pragma: no cover - provided by Replica
        raise NotImplementedError

    def _iter_time(self, pf: list[tuple[int, int]], B: int, S: int, k: int) -> float:
        """``self.model.iteration_time_s(pf, B, S, k)`` (the same float), by the compiled
        evaluator of ``execution_fast`` where it applies to the model in force."""
        m = self.model
        if m is not self._itc_model:  # (a knob switch: the evaluator made for that model before)
            self._itc_switch(m)
        itc = self._itc
        if itc is None:
            return m.iteration_time_s(pf, B, S, k)
        return itc.time(pf, B, S, k)

    def _decode_coeffs(self, B: int, k: int) -> Any:
        """``self.model.decode_coeffs(B, k)`` (the same ``(a, b)``), by the compiled evaluator
        where it applies (``execution_fast``: a memo miss computed there)."""
        m = self.model
        if m is not self._itc_model:
            self._itc_switch(m)
        itc = self._itc
        if itc is None:
            return m.decode_coeffs(B, k)
        return itc.coeffs(B, k)

    def _itc_switch(self, m: Any) -> None:
        """Make ``self._itc`` the evaluator of ``m`` (the one made for it before, if any)."""
        got = self._itcs.get(id(m))
        if got is None or got[0] is not m:
            if len(self._itcs) >= 8:
                self._itcs.clear()
            got = self._itcs[id(m)] = (m, iteration_costs(m))
        self._itc_model = m
        self._itc = got[1]

    def try_admit(self, r: "Request", full: bool, budget: int | None = None) -> bool:
        """Admit the queue head ``r`` if the batch cap and KV (with watermark) allow; a priority
        request may preempt best-effort ones when priority scheduling is on. With ``budget``, refuse
        (before any change) when its prefill tokens not found in the prefix cache exceed it."""
        kv = self.kv
        transfer = r.prefilled_tokens >= r.prefill_target
        # prefix cache: at most (prefill_target - 1) tokens are reused (one token is always computed)
        lookup = r.block_hashes and kv.prefix_caching and not transfer
        hit = ev = chit = 0
        if budget is not None:
            if lookup:
                hit, ev, chit = self._lookup(r)
                ht = (hit + chit) * kv.block_size
                left = r.prefill_target - (ht if ht > r.prefilled_tokens else r.prefilled_tokens)
            else:
                left = r.prefill_target - r.prefilled_tokens
            if left > budget:
                return False
        if full:
            tokens = self.max_kv_tokens(r)
        elif transfer:  # KV arrived by transfer: decodes at once,
            mx = self.max_kv_tokens(r)  # so hold its next step's slots too
            tokens = r.prefill_target + self.lookahead
            if tokens > mx:
                tokens = mx
        else:
            tokens = r.prefill_target
        need = -(-tokens // kv.block_size)
        wx = kv.window_extra(r) if kv.window_blocks else 0
        cap = self.cfg.batch_cap
        matched = budget is not None  # the lookup above is current
        while True:
            if lookup and not matched:  # (again after a priority preemption changed the cache)
                hit, ev, chit = self._lookup(r)
            matched = False
            demand = need - hit + ev + wx  # new blocks (and sliding-window ones) plus evictable cached
            # blocks taken off the queue
            free = kv.capacity_blocks - kv.used_blocks
            if len(self.running) < cap and (free - demand >= kv.watermark_blocks
                                            or (not self.running and free >= demand)):
                break
            if self.priority_on and r.priority == 1 and not full:
                victim = None
                for x in reversed(self.running):
                    if x.priority == 0:
                        victim = x
                        break
                if victim is not None:
                    self.preempt(victim)
                    continue
            return False
        if self.prio_waiting and self.prio_waiting[0] is r:
            self.prio_waiting.popleft()
        else:
            self.waiting.popleft()
        self._kv_advance(self.now)
        if chit:  # reloaded from the CPU tier (read before the allocation below may spill to it)
            self.reload_debt_s += self.cpu.reload(r.block_hashes, hit, chit)  # type: ignore[union-attr]
        if self.cpu is not None and self.cpu.store_bytes_per_s and not transfer:
            # LMCache stores the prompt KV this prefill computes (charged with its first chunk)
            self.reload_debt_s += self.cpu.store_time_s(r.prompt_tokens - (hit + chit) * kv.block_size,
                                                        kv.block_size)
        kv.admit(r, need, hit)
        if chit:  # the reloaded blocks are new GPU blocks, named at once
            kv.commit(r, hit + chit)
        if hit or chit:
            ht = (hit + chit) * kv.block_size
            if ht > r.prefilled_tokens:
                r.prefilled_tokens = ht
        if transfer:
            r.kv_tokens = r.prefill_target
        self.running.append(r)
        if _isnan(r.first_scheduled_s):
            r.first_scheduled_s = self.now
            if not transfer:  # hit statistics count a request's first admission only
                w = self.win
                w.prefix_query_tokens += r.prompt_tokens
                tt = self.tier_tokens
                tt[0] += r.prompt_tokens
                if hit or chit:
                    r.cached_tokens = (hit + chit) * kv.block_size
                    w.prefix_hit_tokens += r.cached_tokens
                    tt[1] += hit * kv.block_size
                    tt[2] += chit * kv.block_size
        self._kv_peak()
        return True

    def _lookup(self, r: "Request") -> tuple[int, int, int]:
        """Prefix lookup: (GPU blocks hit, of which evictable, CPU-tier blocks worth reloading next)."""
        kv = self.kv
        mx = (r.prefill_target - 1) // kv.block_size
        hit, ev = kv.match(r.block_hashes, mx)
        cpu = self.cpu
        if cpu is None or hit >= mx:
            return hit, ev, 0
        c = cpu.match(r.block_hashes, hit, mx)
        if c:  # reload only when cheaper than recomputing those tokens after the GPU hit
            bs = kv.block_size
            t, ctx = c * bs, hit * bs
            m = self.model
            recompute = m.iteration_time_s(((t, ctx),)) - m.iteration_time_s(((1, ctx + t),))
            if cpu.reload_time_s(c) >= recompute:
                c = 0
        return hit, ev, c

    def preempt(self, r: "Request") -> None:
        """Recompute preemption (vLLM): free the blocks, requeue at the front."""
        self.running.remove(r)
        self._kv_advance(self.now)
        self.kv.release(r)
        r.kv_tokens = 0
        r.prefilled_tokens = 0
        r.prefill_target = r.prompt_tokens + r.generated_tokens
        r.preemptions += 1
        self.win.preemptions += 1
        self.enqueue(r, front=True)

    def reserve_decode(self) -> None:
        """Allocate the blocks the decoding sequences need for the next iteration, preempting the
        most recently admitted running requests while blocks are short."""
        kv = self.kv
        bs = kv.block_size
        la = self.lookahead
        while True:
            short = 0
            grow: list[tuple[Request, int]] | None = None
            for r in self.running:
                if r.prefilled_tokens >= r.prefill_target:
                    rem = r.output_tokens - r.generated_tokens  # never reserve past full length
                    nb = (r.kv_tokens + (la if la < rem else rem) + bs - 1) // bs
                    if nb > r.kv_blocks:
                        short += nb - r.kv_blocks
                        if grow is None:
                            grow = [(r, nb)]
                        else:
                            grow.append((r, nb))
            if short == 0:
                return
            if short <= kv.capacity_blocks - kv.used_blocks:
                break
            self.preempt(self.running[-1])
            self.preempted_in_plan = True
        self._kv_advance(self.now)
        grown: list[tuple[Request, int]] = grow  # type: ignore[assignment]  # short > 0: a list
        for r, nb in grown:
            r.kv_blocks = nb
        kv.allocate(short)  # the blocks counted above, grown in place
        self._kv_peak()
