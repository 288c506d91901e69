"""Applying a replica's finished work: the closed-form decode runs, iterations, speculative steps and
tokens that come out of them, and cutting a run short (``sync`` / ``interrupt``).

The base class of :class:`inferencegym.sim.replica.Replica`: ``replica.py`` holds the replica's
state machine (queues, admission, planning) and this file how time advances it. The state the two
share is declared below (``ReplicaAdvance``'s annotations: the contract ``Replica.__init__``
fulfils, checked by ``tests/sim/test_sim_events.py``); nothing else crosses the line. Per-request counters are updated in bulk; TBT samples go to the replica's
``ReplicaWindow`` (``add_tbt`` / ``add_run``, the one recording path for every advance mode).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .spec_draws import tenant_draws
from .spec_step import apply_spec
from .interpreted import mypyc_attr

_sqrt = math.sqrt

if TYPE_CHECKING:
    from .kv_cache import KVCache
    from .metrics import ReplicaWindow
    from .request import Request

IDLE, ITER, RUN, PAUSE = 0, 1, 2, 3
"""Replica states: idle, one iteration planned, a closed-form decode run planned, reloading weights."""


_NONE: tuple = ()
_NOTHING: tuple = (_NONE, _NONE)
"""``on_step_end``'s answer when nothing completed and nothing is handed off (read, never mutated)."""


def _set_completed(r: "Request", frontend_s: float) -> None:
    """The one place a request completes: at its last token, as the client sees it (after the
    engine profile's API server, ``frontend_s``)."""
    r.completion_s = r.last_token_s + frontend_s


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # deep-copied (sim/interpreted.py)
class ReplicaAdvance:
    """Methods of ``Replica`` that apply finished work (see the module docstring).

    State contract: ``Replica.__init__`` sets every attribute annotated here; ``Replica`` provides
    ``_kv_advance(t)`` (KV occupancy integral up to ``t``) and ``_kv_peak()``.
    """

    # what the replica is doing
    now: float
    state: int
    rng: Any
    kv: KVCache
    running: list[Request]
    win: ReplicaWindow
    inbound: int
    # the planned work (``Replica.plan`` writes, this class applies)
    seg_t0: float
    seg_end: float
    seg_n: int
    seg_B: int
    seg_S0: int
    seg_a: float
    seg_b: float
    seg_decodes: list[Request]
    it_chunks: list[tuple[Request, int]]
    # knobs in force and per-replica statistics
    spec_k: int
    quality: float
    default_alpha: float
    tenant_alpha: list
    n_tenants: int
    iterations: int
    prompt_tokens_done: int
    recent_ttft: Any
    recent_iter: Any
    _ubuf: list[float]
    _ui: int
    _draws_got: tuple
    _draws_alpha: float
    _draws_kmax: int
    # the engine profile's step (issue 23): asynchronous scheduling and the API server
    async_sched: bool
    cutoff: float
    frontend_s: float
    # multi-step scheduling (vLLM V0 ``--num-scheduler-steps``): the decode block ends at this count
    block_end: int

    def _kv_advance(self, t: float) -> None:  # pragma: no cover - provided by Replica
        raise NotImplementedError

    def _kv_peak(self) -> None:  # pragma: no cover - provided by Replica
        raise NotImplementedError

    def _draws(self, kmax: int) -> tuple:
        """``tenant_draws(self.tenant_alpha, self.default_alpha, kmax)`` (the memo's own object),
        kept for the last ``(default_alpha, kmax)`` asked (``tenant_alpha`` never changes)."""
        a = self.default_alpha
        if a != self._draws_alpha or kmax != self._draws_kmax:
            self._draws_got = tenant_draws(self.tenant_alpha, a, kmax)
            self._draws_alpha = a
            self._draws_kmax = kmax
        return self._draws_got

    # ------------------------------------------------------------------ applying work
    def on_step_end(self, now: float) -> tuple[Sequence, Sequence]:
        """Apply the finished work; returns (completed requests, requests to hand off): sequences,
        empty ones shared (the caller reads them, never changes them)."""
        self.now = now
        st = self.state
        self.state = IDLE
        if st == RUN:
            done = self._apply_run(self.seg_n, True)
            return (self._finish(done), _NONE) if done else _NOTHING
        if st == ITER:
            return self._apply_iter(now)
        return _NOTHING

    def _finish(self, done: list) -> list:
        if done:
            self._kv_advance(self.now)
            release = self.kv.release
            running = self.running
            for r in done:
                running.remove(r)
                release(r)
                _set_completed(r, self.frontend_s)
        return done

    def _apply_run(self, k: int, final: bool) -> list:
        """Apply ``k`` iterations of the current run (all of it when ``final``); returns the
        requests that produced their last token (only a final apply can finish any)."""
        done: list = []
        if k <= 0:
            return done
        a = self.seg_a
        b = self.seg_b
        B = self.seg_B
        S0 = self.seg_S0
        t0 = self.seg_t0
        end = self.seg_end if final else t0 + k * a + b * (k * S0 + B * k * (k - 1) / 2)
        d0 = a + b * S0
        step = b * B
        dl = d0 + step * (k - 1)
        bs = self.kv.block_size
        # a partial apply (sync/interrupt) leaves the next iteration in progress: hold its blocks
        # now, as the step-by-step path does at each iteration start (the run's budget covers it)
        bs1 = bs - 1 if final else bs
        extra = 0
        back = 0
        over = 0  # tokens past a request's end (multi-step blocks only)
        win = self.win
        gaps: dict | None = None  # stalled sequences with equal gaps -> one weighted sample
        multi = win.ttbt is not None
        if multi:
            nt = self.n_tenants
            t_all = [0] * nt
            t_back = [0] * nt
        for r in self.seg_decodes:
            lt = r.last_token_s
            if multi:
                t_all[r.tenant] += 1
            if lt == t0:
                back += 1
                m = dl
                if multi:
                    t_back[r.tenant] += 1
            else:
                g0 = t0 - lt + d0
                if gaps is None:
                    gaps = {}
                if multi:
                    tw = gaps.get(g0)
                    if tw is None:
                        tw = gaps[g0] = [0] * nt
                    tw[r.tenant] += 1
                else:
                    gaps[g0] = gaps.get(g0, 0) + 1
                m = g0 if g0 > dl or k == 1 else dl
            if m > r.tbt_max_s:
                r.tbt_max_s = m
            r.tbt_sum_s += end - lt
            r.last_token_s = end
            g = r.generated_tokens + k
            kvt = r.kv_tokens + k
            if g >= r.output_tokens:
                if g > r.output_tokens:  # multi-step: finished inside the block; still computed
                    over += g - r.output_tokens  # (its KV slots too) to the block's end
                    g = r.output_tokens
                done.append(r)
            r.generated_tokens = g
            r.kv_tokens = kvt
            nb = (kvt + bs1) // bs
            if nb > r.kv_blocks:
                extra += nb - r.kv_blocks
                r.kv_blocks = nb
        if multi:
            win.add_run(d0, step, k, back, B, gaps, t_back, t_all)
        else:
            win.add_run(d0, step, k, back, B, gaps, None, None)
        if extra:
            self._kv_advance(0.5 * (t0 + end))
            self.kv.allocate(extra)  # grown in place above; the run's plan guarantees they fit
            self._kv_peak()
        if over:
            win.tokens_out += B * k - over
            win.quality_token_sum += self.quality * B * k - self.quality * over
        else:  # (the same sums: x - 0.0 is x, bit for bit)
            win.tokens_out += B * k
            if self.quality:  # (FP16: adding 0.0 to a sum that is never -0.0 leaves it as it is)
                win.quality_token_sum += self.quality * B * k
        self.iterations += k
        if done and self.iterations < self.block_end:
            done = []  # multi-step: requests that finished inside the block leave at its end
        self.recent_iter.append(dl)
        if final and self.async_sched:  # the next step was fixed when the last one started
            self.cutoff = end - dl
        self.seg_t0 = end
        self.seg_S0 = S0 + B * k
        self.seg_n -= k
        return done

    def _emit_token(self, r: "Request", t: float) -> None:
        """A prefill (or recompute, or a KV transfer's arrival) produced this request's next token at ``t``."""
        w = self.win
        if r.generated_tokens == 0:
            r.first_token_s = t + self.frontend_s  # the client sees it after the API server
            self.recent_ttft.append(r.first_token_s - r.arrival_s)
            w.first.append(r)
        else:
            gap = t - r.last_token_s
            w.add_tbt(gap, 0.0, 1, 1.0, r.tenant)
            if gap > r.tbt_max_s:
                r.tbt_max_s = gap
            r.tbt_sum_s += gap
        r.generated_tokens += 1
        r.last_token_s = t
        w.tokens_out += 1
        if self.quality:
            w.quality_token_sum += self.quality

    def receive_kv(self, r: "Request", now: float) -> bool:
        """Disaggregation: ``r``'s KV arrived from its prefill instance at ``now``; its first token
        (or the next one after a recompute) comes out now. Returns True when that was its last
        token (it completed here); otherwise the caller hands it to :meth:`accept`."""
        self.inbound -= 1
        self.now = now
        r.kv_tokens = 0
        r.prefilled_tokens = r.prefill_target  # KV present; admission allocates its blocks
        self._emit_token(r, now)
        if r.generated_tokens >= r.output_tokens:
            _set_completed(r, self.frontend_s)
            return True
        return False

    def _apply_iter(self, now: float) -> tuple[list, list]:
        t0 = self.seg_t0
        dur = now - t0
        decodes = self.seg_decodes
        win = self.win
        k = self.spec_k
        self.iterations += 1
        self.recent_iter.append(dur)
        if self.async_sched:  # the next step was fixed when this one started
            self.cutoff = t0
        B = len(decodes)
        if B:
            if k == 0:
                add = win.add_tbt
                back = 0
                multi = win.ttbt is not None
                if multi:  # per tenant: one weighted sample, as in the fast path
                    t_back = [0] * self.n_tenants
                for r in decodes:
                    lt = r.last_token_s
                    gap = now - lt
                    if lt == t0:
                        back += 1
                        if multi:
                            t_back[r.tenant] += 1
                    else:
                        add(gap, 0.0, 1, 1.0, r.tenant)
                    if gap > r.tbt_max_s:
                        r.tbt_max_s = gap
                    r.tbt_sum_s += gap
                    r.last_token_s = now
                    r.generated_tokens += 1
                    r.kv_tokens += 1
                add(dur, 0.0, 1, back, 0, t_back if multi else None)
                win.tokens_out += B
                if self.quality:
                    win.quality_token_sum += self.quality * B
            else:
                self._apply_spec(decodes, now)
        handoffs = []
        kv = self.kv
        pc = kv.prefix_caching
        bs = kv.block_size
        for r, c in self.it_chunks:
            if not r.kv_blocks:  # preempted by a priority admission after its chunk was planned:
                continue         # the chunk's work is lost (it is back in the queue, from scratch)
            r.prefilled_tokens += c
            if pc and r.block_hashes:  # name the prompt blocks this chunk completed
                nf = r.prefilled_tokens // bs
                nh = len(r.block_hashes)
                kv.commit(r, nf if nf < nh else nh)
            if r.prefilled_tokens >= r.prefill_target:
                r.kv_tokens = r.prefill_target
                if r.generated_tokens == 0:
                    self.prompt_tokens_done += r.prompt_tokens
                if r.handoff:
                    handoffs.append(r)
                else:
                    self._emit_token(r, now)
        self.it_chunks = []
        done = [r for r in self.running if r.generated_tokens >= r.output_tokens]
        done = self._finish(done)
        if handoffs:
            self._kv_advance(now)
            for r in handoffs:
                self.running.remove(r)
                kv.release(r)
        return done, handoffs

    def _apply_spec(self, decodes: list, now: float) -> None:
        """Speculative step of ``decodes`` ending at ``now`` (``sim/spec_step.py``)."""
        k = self.spec_k
        self._ubuf, self._ui = apply_spec(decodes, now, k, self._draws(k + 1), self.win, self.quality,
                                          self._ubuf, self._ui, self.rng)

    # ------------------------------------------------------------------ interruption
    def _done_by(self, t: float) -> int:
        """Iterations of the current run finished by ``t`` (at most seg_n - 1)."""
        n = self.seg_n
        if n <= 1:
            return 0
        dt = t - self.seg_t0
        if dt <= 0:
            return 0
        a = self.seg_a
        b = self.seg_b
        S0 = self.seg_S0
        if a >= 0 and b >= 0 and a + b * S0 > dt:  # the first iteration is still in progress (the loops
            return 0                                # below end at 0: the end times grow with k)
        B = self.seg_B
        A = 0.5 * b * B
        L = a + b * S0 - A
        if A > 0:
            k = int((-L + _sqrt(L * L + 4 * A * dt)) / (2 * A))
        else:
            k = int(dt / L) if L > 0 else n - 1
        if k < 0:
            k = 0
        elif k > n - 1:
            k = n - 1
        while k > 0 and k * a + b * (k * S0 + B * k * (k - 1) / 2) > dt:
            k -= 1
        while k + 1 <= n - 1 and (k + 1) * a + b * ((k + 1) * S0 + B * (k + 1) * k / 2) <= dt:
            k += 1
        return k

    def sync(self, t: float) -> None:
        """Apply the iterations of the current decode run that finished by ``t`` (bookkeeping only)."""
        if self.state == RUN:
            k = self._done_by(t)
            if k > 0:
                self.now = t
                self._apply_run(k, False)

    def interrupt(self, t: float) -> float | None:
        """Cut the current decode run after the iteration in progress at ``t``; returns the new
        end time (caller re-schedules) or None when nothing changed."""
        if self.state != RUN:
            return None
        k = self._done_by(t)  # (sync, inline)
        if k > 0:
            self.now = t
            self._apply_run(k, False)
        if self.seg_n > 1:
            self.seg_n = 1
            self.seg_end = self.seg_t0 + self.seg_a + self.seg_b * self.seg_S0
            return self.seg_end
        return None
