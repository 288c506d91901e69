"""A model replica: queues, running batch, KV cache, and the iteration loop.

The replica alternates between *planned work* and its end event (pushed on the cluster's heap):

* ``ITER``: one iteration of a mixed batch (prefill chunks, maybe decodes), timed by
  ``ExecutionModel.iteration_time_s``;
* ``RUN``: a stable pure-decode batch advanced ``n`` iterations at once in closed form. With
  pure-decode time ``a + b*S`` (``S``: total context, growing by ``B`` per iteration) the n
  iterations take ``n*a + b*(n*S0 + B*n*(n-1)/2)``. ``n`` stops at the next completion and at the
  first iteration whose new KV blocks would not fit; an arrival or a config change truncates the run
  to the iteration in progress (``interrupt``), a window boundary splits it (``sync``);
* ``PAUSE``: weights reloading after a quantization switch.

Per-request counters are updated in bulk when (part of) a run is applied; TBT samples go to a
``TBTRecorder`` as weighted arithmetic sequences, so percentiles stay exact without per-token objects.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from .batching import make_scheduler
from .kv_cache import KVCache
from .metrics import TBTRecorder

if TYPE_CHECKING:
    from .config import ReplicaConfig
    from .request import Request

IDLE, ITER, RUN, PAUSE = 0, 1, 2, 3
_isnan = math.isnan


class Replica:
    """One engine instance (``tensor_parallel`` GPUs). Created and driven by ``Cluster``."""

    def __init__(self, *, replica_id: int, config: "ReplicaConfig", model, rng: np.random.Generator,
                 tenant_alpha: list[float | None], recent_window: int = 32) -> None:
        self.id = replica_id
        self.rng = rng
        self.tenant_alpha = tenant_alpha
        self.waiting: deque = deque()
        self.prio_waiting: deque = deque()
        self.running: list = []
        self.priority_on = False
        self.inbound = 0  # KV transfers heading here (disaggregation)
        self.state = IDLE
        self.version = 0
        self.paused_until = 0.0
        self.pending: tuple | None = None
        self.rejected: list[tuple["Request", str]] = []
        self.now = 0.0
        # current work
        self.seg_t0 = 0.0
        self.seg_end = 0.0
        self.seg_n = 0
        self.seg_B = 0
        self.seg_S0 = 0
        self.seg_a = 0.0
        self.seg_b = 0.0
        self.seg_decodes: list = []
        self.it_chunks: list = []
        # metrics (window counters; the cluster resets them)
        self.tbt = TBTRecorder()
        self.n_tenants = len(tenant_alpha)
        # per-tenant token-level TBT (only with several tenants; kept off the single-tenant path)
        self.ttbt = [TBTRecorder() for _ in range(self.n_tenants)] if self.n_tenants > 1 else None
        self.win_first: list = []
        self.tokens_out = 0
        self.quality_token_sum = 0.0
        self.prompt_tokens_done = 0
        self.preemptions = 0
        self.spec_proposed = 0
        self.spec_accepted = 0
        self.kv_area = 0.0  # integral of KV occupancy (used / capacity blocks) over time, s
        self.kv_t = 0.0
        self.kv_max = 0.0
        self.recent_ttft: deque = deque(maxlen=recent_window)
        self.recent_iter: deque = deque(maxlen=recent_window)
        self.iterations = 0
        self._ubuf: list = []  # block of uniforms for speculative acceptance draws
        self._ui = 0
        self.max_run = 1 << 62
        self.preempted_in_plan = False  # cap on iterations per closed-form run (1 = step by step; tests)
        self._set_config(config, model)
        self.kv = KVCache(capacity_tokens=model.kv_capacity_tokens(config.kv_budget_fraction),
                          block_size=config.block_size, watermark_fraction=config.watermark_fraction)

    # ------------------------------------------------------------------ configuration
    def _set_config(self, cfg: "ReplicaConfig", model) -> None:
        prev = getattr(self, "cfg", None)
        # half-done prompts can only exist under chunked prefill (or after a switch away from it)
        self.partials_possible = (cfg.scheduler == "sarathi" or getattr(self, "partials_possible", False)
                                  or (prev is not None and prev.scheduler == "sarathi"))
        self.cfg = cfg
        self.model = model
        self.scheduler = make_scheduler(cfg.scheduler)
        self.spec_k = cfg.speculation_depth
        self.lookahead = cfg.speculation_depth + 1
        self.default_alpha = cfg.spec_acceptance
        self.quality = float(model.quality_delta)
        self._coeffs: dict = {}

    def request_config(self, cfg: "ReplicaConfig", model, reload_s: float) -> float | None:
        """Queue a new config; applied at the next iteration boundary. Returns a new end time when
        a running decode run was truncated (the caller re-schedules), else None."""
        self.pending = (cfg, model, reload_s)
        if self.state == RUN:
            return self.interrupt(self.now)
        return None

    def apply_pending(self, now: float) -> None:
        cfg, model, reload_s = self.pending  # type: ignore[misc]
        self.pending = None
        self._kv_advance(now)
        self._set_config(cfg, model)
        cap_tokens = model.kv_capacity_tokens(cfg.kv_budget_fraction)
        new_blocks = cap_tokens // cfg.block_size
        if cfg.block_size != self.kv.block_size:
            raise ValueError("block_size cannot change while the simulator runs")
        while self.kv.used_blocks > new_blocks and self.running:
            self.preempt(self.running[-1])
        self.kv.resize(cap_tokens, cfg.watermark_fraction)
        # requests that can never fit any more are rejected (never silently lost)
        for r in list(self.running):
            if self.kv.blocks_for(self.max_kv_tokens(r)) > self.kv.capacity_blocks:
                self.running.remove(r)
                self.kv.free(r.kv_blocks)
                r.kv_blocks = 0
                self._reject_if_too_big(r)
        for q in (self.prio_waiting, self.waiting):
            keep = [r for r in q if not self._reject_if_too_big(r)]
            q.clear()
            q.extend(keep)
        if reload_s > 0:
            self.paused_until = max(self.paused_until, now + reload_s)

    def max_kv_tokens(self, r: "Request") -> int:
        return r.prompt_tokens + r.output_tokens - 1

    def _reject_if_too_big(self, r: "Request") -> bool:
        need = self.kv.blocks_for(self.max_kv_tokens(r))
        if need > self.kv.capacity_blocks:
            self.rejected.append((r, f"needs {need} KV blocks at full length ({self.max_kv_tokens(r)} tokens) "
                                     f"but replica {self.id} holds {self.kv.capacity_blocks}"))
            return True
        return False

    # ------------------------------------------------------------------ queues and admission
    def enqueue(self, r: "Request", front: bool = False) -> None:
        q = self.prio_waiting if (self.priority_on and r.priority == 1) else self.waiting
        if front:
            q.appendleft(r)
        else:
            q.append(r)

    def head(self):
        if self.prio_waiting:
            return self.prio_waiting[0]
        if self.waiting:
            return self.waiting[0]
        return None

    def queued(self) -> int:
        return len(self.waiting) + len(self.prio_waiting)

    def outstanding(self) -> int:
        return len(self.waiting) + len(self.prio_waiting) + len(self.running) + self.inbound

    def try_admit(self, r: "Request", full: bool) -> bool:
        """Admit the queue head ``r`` if the batch cap and KV (with watermark) allow; a priority
        request may preempt best-effort ones when priority scheduling is on."""
        kv = self.kv
        if full:
            tokens = self.max_kv_tokens(r)
        elif r.prefilled_tokens >= r.prefill_target:  # KV arrived by transfer: decodes at once,
            mx = self.max_kv_tokens(r)                 # so hold its next step's slots too
            tokens = r.prefill_target + self.lookahead
            if tokens > mx:
                tokens = mx
        else:
            tokens = r.prefill_target
        need = -(-tokens // kv.block_size)
        cap = self.cfg.batch_cap
        while True:
            free = kv.capacity_blocks - kv.used_blocks
            if len(self.running) < cap and (free - need >= kv.watermark_blocks
                                            or (not self.running and free >= need)):
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
        kv.used_blocks += need
        r.kv_blocks = need
        if r.prefilled_tokens >= r.prefill_target:  # KV arrived by transfer
            r.kv_tokens = r.prefill_target
        self.running.append(r)
        if _isnan(r.first_scheduled_s):
            r.first_scheduled_s = self.now
        self._kv_peak()
        return True

    def preempt(self, r: "Request") -> None:
        """Recompute preemption (vLLM): free the blocks, requeue at the front."""
        self.running.remove(r)
        self._kv_advance(self.now)
        self.kv.free(r.kv_blocks)
        r.kv_blocks = 0
        r.kv_tokens = 0
        r.prefilled_tokens = 0
        r.prefill_target = r.prompt_tokens + r.generated_tokens
        r.preemptions += 1
        self.preemptions += 1
        self.enqueue(r, front=True)

    def reserve_decode(self) -> None:
        """Allocate the blocks the decoding sequences need for the next iteration, preempting the
        most recently admitted running requests while blocks are short."""
        kv = self.kv
        bs = kv.block_size
        la = self.lookahead
        while True:
            short = 0
            for r in self.running:
                if r.prefilled_tokens >= r.prefill_target:
                    rem = r.output_tokens - r.generated_tokens  # never reserve past full length
                    nb = (r.kv_tokens + (la if la < rem else rem) + bs - 1) // bs
                    if nb > r.kv_blocks:
                        short += nb - r.kv_blocks
            if short == 0:
                return
            if short <= kv.capacity_blocks - kv.used_blocks:
                break
            self.preempt(self.running[-1])
            self.preempted_in_plan = True
        self._kv_advance(self.now)
        for r in self.running:
            if r.prefilled_tokens >= r.prefill_target:
                rem = r.output_tokens - r.generated_tokens
                nb = (r.kv_tokens + (la if la < rem else rem) + bs - 1) // bs
                if nb > r.kv_blocks:
                    kv.used_blocks += nb - r.kv_blocks
                    r.kv_blocks = nb
        self._kv_peak()

    # ------------------------------------------------------------------ KV accounting helpers
    def _kv_advance(self, t: float) -> None:
        if t > self.kv_t:
            # occupancy against the capacity of the time (a budget change mid-window stays exact)
            self.kv_area += self.kv.used_blocks / self.kv.capacity_blocks * (t - self.kv_t)
            self.kv_t = t

    def _kv_peak(self) -> None:
        f = self.kv.used_blocks / self.kv.capacity_blocks
        if f > self.kv_max:
            self.kv_max = f

    # ------------------------------------------------------------------ planning
    def plan(self, now: float) -> float | None:
        """Decide the next work from ``now``; returns its end time or None when idle."""
        self.now = now
        if self.pending is not None:
            self.apply_pending(now)
        if now < self.paused_until:
            self.state = PAUSE
            self.seg_end = self.paused_until
            return self.paused_until
        while True:
            if not self.running and not self.waiting and not self.prio_waiting:
                self.state = IDLE
                return None
            self.preempted_in_plan = False
            chunks, with_dec = self.scheduler.plan(self)
            if with_dec:
                if self.partials_possible:
                    decodes = [r for r in self.running if r.prefilled_tokens >= r.prefill_target]
                else:
                    decodes = self.running[:]
            else:
                decodes = []
            if chunks or decodes:
                break
            if self.running:  # only stalled partial prefills (cannot happen with budget > 0)
                raise RuntimeError(f"replica {self.id}: scheduler produced an empty iteration")
            # empty replica and the head still cannot be admitted: it can never run here
            r = self.head()
            if self.prio_waiting and self.prio_waiting[0] is r:
                self.prio_waiting.popleft()
            else:
                self.waiting.popleft()
            self.rejected.append((r, f"cannot be admitted on empty replica {self.id}: needs "
                                     f"{self.kv.blocks_for(r.prefill_target)} KV blocks, "
                                     f"{self.kv.capacity_blocks} in the cache"))
        self.seg_t0 = now
        k = self.spec_k
        if not chunks and k == 0:
            return self._plan_run(now, decodes)
        S = 0
        for r in decodes:
            S += r.kv_tokens
        B = len(decodes)
        S += B
        pf = [(c, r.prefilled_tokens) for r, c in chunks]
        dur = self.model.iteration_time_s(pf, B, S, k if B else 0)
        self.state = ITER
        self.it_chunks = chunks
        self.seg_decodes = decodes
        self.seg_end = now + dur
        return self.seg_end

    def _plan_run(self, now: float, decodes: list) -> float:
        B = len(decodes)
        S0 = B
        rmin = 1 << 62
        for r in decodes:
            S0 += r.kv_tokens
            rem = r.output_tokens - r.generated_tokens
            if rem < rmin:
                rmin = rem
        n = rmin if rmin < self.max_run else self.max_run
        if self.preempted_in_plan:
            # a request was just preempted after the admission pass (vLLM order): the next
            # iteration may admit differently (e.g. a priority request preempting best effort)
            n = 1
        kv = self.kv
        bs = kv.block_size
        free = kv.capacity_blocks - kv.used_blocks
        if free < B * ((n + bs - 1) // bs + 1):
            if self._extra_blocks(decodes, n) > free:
                lo, hi = 1, n  # extra(1) == 0 after reserve_decode
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    if self._extra_blocks(decodes, mid) <= free:
                        lo = mid
                    else:
                        hi = mid - 1
                n = lo
        c = self._coeffs.get(B)
        if c is None:
            c = self._coeffs[B] = self.model.decode_coeffs(B, 0)
        a, b = c
        self.state = RUN
        self.seg_decodes = decodes
        self.seg_B = B
        self.seg_S0 = S0
        self.seg_a = a
        self.seg_b = b
        self.seg_n = n
        self.seg_end = now + n * a + b * (n * S0 + B * n * (n - 1) / 2)
        return self.seg_end

    def _extra_blocks(self, decodes: list, n: int) -> int:
        bs = self.kv.block_size
        extra = 0
        for r in decodes:
            nb = (r.kv_tokens + n + bs - 1) // bs
            if nb > r.kv_blocks:
                extra += nb - r.kv_blocks
        return extra

    # ------------------------------------------------------------------ applying work
    def on_step_end(self, now: float) -> tuple[list, list]:
        """Apply the finished work; returns (completed requests, requests to hand off)."""
        self.now = now
        st = self.state
        self.state = IDLE
        if st == RUN:
            self._apply_run(self.seg_n, True)
            done = [r for r in self.seg_decodes if r.generated_tokens >= r.output_tokens]
            return self._finish(done), []
        if st == ITER:
            return self._apply_iter(now)
        return [], []

    def _finish(self, done: list) -> list:
        if done:
            self._kv_advance(self.now)
            kv = self.kv
            for r in done:
                self.running.remove(r)
                kv.used_blocks -= r.kv_blocks
                r.kv_blocks = 0
                r.completion_s = r.last_token_s
        return done

    def _apply_run(self, k: int, final: bool) -> None:
        if k <= 0:
            return
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
        rec = self.tbt
        gaps: dict = {}
        ttbt = self.ttbt
        if ttbt is not None:
            t_all = [0] * self.n_tenants
            t_back = [0] * self.n_tenants
        for r in self.seg_decodes:
            lt = r.last_token_s
            if ttbt is not None:
                t_all[r.tenant] += 1
            if lt == t0:
                back += 1
                m = dl
                if ttbt is not None:
                    t_back[r.tenant] += 1
            else:
                g0 = t0 - lt + d0
                gaps[g0] = gaps.get(g0, 0) + 1  # stalled together -> one weighted sample
                if ttbt is not None:
                    ttbt[r.tenant].add(g0, 0.0, 1, 1.0)
                m = g0 if g0 > dl or k == 1 else dl
            if m > r.tbt_max_s:
                r.tbt_max_s = m
            r.tbt_sum_s += end - lt
            r.last_token_s = end
            r.generated_tokens += k
            kvt = r.kv_tokens + k
            r.kv_tokens = kvt
            nb = (kvt + bs1) // bs
            if nb > r.kv_blocks:
                extra += nb - r.kv_blocks
                r.kv_blocks = nb
        for g0, c in gaps.items():
            rec.add(g0, 0.0, 1, float(c))
        if back == B:
            rec.d0.append(d0)
            rec.step.append(step)
            rec.n.append(k)
            rec.w.append(B)
        else:
            rec.add(d0, 0.0, 1, back)
            rec.add(d0 + step, step, k - 1, B)
        if ttbt is not None:
            for ti in range(self.n_tenants):
                if t_all[ti]:
                    if t_back[ti] == t_all[ti]:
                        ttbt[ti].add(d0, step, k, t_all[ti])
                    else:
                        ttbt[ti].add(d0, 0.0, 1, t_back[ti])
                        ttbt[ti].add(d0 + step, step, k - 1, t_all[ti])
        if extra:
            mid = 0.5 * (t0 + end)
            self._kv_advance(mid)
            if extra > self.kv.capacity_blocks - self.kv.used_blocks:
                raise RuntimeError(f"replica {self.id}: decode run overran the KV cache")
            self.kv.used_blocks += extra
            self._kv_peak()
        self.tokens_out += B * k
        self.quality_token_sum += self.quality * B * k
        self.iterations += k
        self.recent_iter.append(dl)
        self.seg_t0 = end
        self.seg_S0 = S0 + B * k
        self.seg_n -= k

    def _emit_token(self, r: "Request", t: float) -> None:
        """A prefill (or recompute) produced this request's next token at ``t``."""
        if r.generated_tokens == 0:
            r.first_token_s = t
            self.recent_ttft.append(t - r.arrival_s)
            self.win_first.append(r)
        else:
            gap = t - r.last_token_s
            self.tbt.add(gap, 0.0, 1, 1.0)
            if self.ttbt is not None:
                self.ttbt[r.tenant].add(gap, 0.0, 1, 1.0)
            if gap > r.tbt_max_s:
                r.tbt_max_s = gap
            r.tbt_sum_s += gap
        r.generated_tokens += 1
        r.last_token_s = t
        self.tokens_out += 1
        self.quality_token_sum += self.quality

    def _apply_iter(self, now: float) -> tuple[list, list]:
        t0 = self.seg_t0
        dur = now - t0
        decodes = self.seg_decodes
        rec = self.tbt
        k = self.spec_k
        self.iterations += 1
        self.recent_iter.append(dur)
        B = len(decodes)
        if B:
            if k == 0:
                back = 0
                ttbt = self.ttbt
                if ttbt is not None:  # per tenant: one weighted sample, as in the fast path
                    t_back = [0] * self.n_tenants
                for r in decodes:
                    lt = r.last_token_s
                    gap = now - lt
                    if lt == t0:
                        back += 1
                        if ttbt is not None:
                            t_back[r.tenant] += 1
                    else:
                        rec.add(gap, 0.0, 1, 1.0)
                        if ttbt is not None:
                            ttbt[r.tenant].add(gap, 0.0, 1, 1.0)
                    if gap > r.tbt_max_s:
                        r.tbt_max_s = gap
                    r.tbt_sum_s += gap
                    r.last_token_s = now
                    r.generated_tokens += 1
                    r.kv_tokens += 1
                rec.add(dur, 0.0, 1, back)
                if ttbt is not None:
                    for ti, c in enumerate(t_back):
                        ttbt[ti].add(dur, 0.0, 1, c)  # add() skips c == 0
                self.tokens_out += B
                self.quality_token_sum += self.quality * B
            else:
                self._apply_spec(decodes, now)
        handoffs = []
        for r, c in self.it_chunks:
            r.prefilled_tokens += c
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
                self.kv.used_blocks -= r.kv_blocks
                r.kv_blocks = 0
        return done, handoffs

    def _apply_spec(self, decodes: list, now: float) -> None:
        """Speculative step: each sequence accepts a truncated-geometric number of draft tokens
        (each accepted with probability alpha until the first rejection) plus one target token:
        ``min(Geometric(1 - alpha), k + 1)`` tokens, drawn by inversion from uniforms that the
        replica's Generator produces in blocks (cheap per draw, still one seeded stream)."""
        k = self.spec_k
        kmax = k + 1
        ta = self.tenant_alpha
        da = self.default_alpha
        rec = self.tbt
        ttbt = self.ttbt
        buf = self._ubuf
        ui = self._ui
        log = math.log
        toks = 0
        acc = 0
        for r in decodes:
            x = ta[r.tenant] if r.tenant < len(ta) else None
            a = da if x is None else x
            if a <= 0.0:
                j = 1
            elif a >= 1.0:
                j = kmax
            else:
                if ui >= len(buf):
                    buf = self._ubuf = self.rng.random(4096).tolist()
                    ui = 0
                u = 1.0 - buf[ui]  # in (0, 1]
                ui += 1
                j = int(log(u) / log(a)) + 1
                if j > kmax:
                    j = kmax
            acc += j - 1
            n = r.output_tokens - r.generated_tokens
            if j < n:
                n = j
            gap = now - r.last_token_s
            per = gap / n
            rec.add(per, 0.0, 1, float(n))
            if ttbt is not None:
                ttbt[r.tenant].add(per, 0.0, 1, float(n))
            if per > r.tbt_max_s:
                r.tbt_max_s = per
            r.tbt_sum_s += gap
            r.last_token_s = now
            r.generated_tokens += n
            r.kv_tokens += n
            toks += n
        self._ui = ui
        self.spec_proposed += len(decodes) * k
        self.spec_accepted += acc
        self.tokens_out += toks
        self.quality_token_sum += self.quality * toks

    # ------------------------------------------------------------------ interruption
    def _done_by(self, t: float) -> int:
        """Iterations of the current run finished by ``t`` (at most seg_n - 1)."""
        n = self.seg_n
        if n <= 1:
            return 0
        dt = t - self.seg_t0
        if dt <= 0:
            return 0
        a, b, B, S0 = self.seg_a, self.seg_b, self.seg_B, self.seg_S0
        A = 0.5 * b * B
        L = a + b * S0 - A
        if A > 0:
            k = int((-L + math.sqrt(L * L + 4 * A * dt)) / (2 * A))
        else:
            k = int(dt / L) if L > 0 else n - 1
        k = min(max(k, 0), n - 1)
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
        self.sync(t)
        if self.seg_n > 1:
            self.seg_n = 1
            self.seg_end = self.seg_t0 + self.seg_a + self.seg_b * self.seg_S0
            return self.seg_end
        return None

    # ------------------------------------------------------------------ introspection
    def check_invariants(self) -> None:
        kv = self.kv
        held = sum(r.kv_blocks for r in self.running)
        assert kv.used_blocks == held, f"replica {self.id}: used {kv.used_blocks} != held {held}"
        assert 0 <= kv.used_blocks <= kv.capacity_blocks, (
            f"replica {self.id}: used {kv.used_blocks} outside [0, {kv.capacity_blocks}]")
        for r in self.running:
            assert r.kv_blocks * kv.block_size >= r.kv_tokens, f"request {r.req_id} holds too few blocks"
        for q in (self.waiting, self.prio_waiting):
            for r in q:
                assert r.kv_blocks == 0, f"queued request {r.req_id} holds blocks"

    def fragmentation(self) -> float:
        alloc = sum(r.kv_blocks for r in self.running) * self.kv.block_size
        if alloc == 0:
            return 0.0
        used = sum(r.kv_tokens for r in self.running)
        return (alloc - used) / alloc
