"""A model replica: queues, running batch, KV cache, knob changes, and planning the next work.

Admission to the batch (prefix lookup, KV allocation, preemption, decode reservation) is in
``replica_admission.py``, applying finished work in ``replica_advance.py``: ``Replica`` derives from
``ReplicaAdmission``, which derives from ``ReplicaAdvance``; each base declares the state it shares.

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
from typing import TYPE_CHECKING, Callable

import numpy as np

from .batching import make_scheduler
from .cpu_kv import CPUKVTier
from .kv_cache import KVCache
from .metrics import ReplicaWindow
from .recent import RecentValues
from .replica_admission import ReplicaAdmission
from .replica_advance import IDLE, ITER, PAUSE, RUN
from .sliding_window import window_blocks
from .interpreted import mypyc_attr

if TYPE_CHECKING:
    from .config import ReplicaConfig
    from .request import Request

__all__ = ["IDLE", "ITER", "PAUSE", "RUN", "Replica"]
_INF = math.inf


def _reject_unowned(r: "Request", why: str) -> None:
    r.rejected_reason = why


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # deep-copied (sim/interpreted.py)
class Replica(ReplicaAdmission):
    """One engine instance (``tensor_parallel`` GPUs). Created and driven by ``Cluster``."""

    def __init__(self, *, replica_id: int, config: "ReplicaConfig", model, rng: np.random.Generator,
                 tenant_alpha: list[float | None], recent_window: int = 32,
                 on_reject: Callable[["Request", str], None] | None = None) -> None:
        self.id = replica_id
        self.on_reject = on_reject if on_reject is not None else _reject_unowned
        """Called once per rejected request with the reason (the cluster counts it; no mailbox)."""
        self.rng = rng
        self.tenant_alpha = tenant_alpha
        self.waiting: deque = deque()
        self.prio_waiting: deque = deque()
        self.running = []  # (typed in ReplicaAdvance: list[Request])
        self.priority_on = False
        self.inbound = 0  # KV transfers heading here (disaggregation)
        self.state = IDLE
        self.version = 0
        self.paused_until = 0.0
        self.pending: tuple | None = None
        self.now = 0.0
        # current work
        self.seg_t0 = 0.0
        self.seg_end = 0.0
        self.seg_n = 0
        self.seg_B = 0
        self.seg_S0 = 0
        self.seg_a = 0.0
        self.seg_b = 0.0
        self.seg_decodes = []  # (list[Request], declared in ReplicaAdvance)
        self.it_chunks = []  # (list[tuple[Request, int]])
        # metrics of the current window (``reset_window`` starts a new one)
        self.n_tenants = len(tenant_alpha)
        self.win = ReplicaWindow(self.n_tenants)
        self.prompt_tokens_done = 0
        self.recent_ttft = RecentValues(maxlen=recent_window)
        self.recent_iter = RecentValues(maxlen=recent_window)
        self.iterations = 0
        self._ubuf = []  # (list[float]) block of uniforms for speculative acceptance draws
        self._ui = 0
        self._draws_got, self._draws_alpha, self._draws_kmax = (), math.nan, -1  # (ReplicaAdvance._draws)
        self.max_run = 1 << 62
        # asynchronous scheduling (engine profile): requests placed after ``cutoff`` wait a step
        self.cutoff = _INF  # dispatch time up to which waiting requests may be scheduled now
        self.blocked = False  # the last scheduling pass left a request waiting for the cutoff
        self.preempted_in_plan = False  # cap on iterations per closed-form run (1 = step by step; tests)
        self.block_end = 0  # multi-step scheduling: the decode block in progress ends at this iteration count
        self.api_pending = 0  # arrivals the in-process API server has not handled yet (engine profile)
        self._itc_model = None  # (the model ``_itc`` was made for: ``ReplicaAdvance._iter_time``)
        self._itc = None
        self._itcs: dict = {}  # id(model) -> (model, its evaluator) of the models met (at most 8)
        self._set_config(config, model)
        self.kv = KVCache(capacity_tokens=model.kv_capacity_tokens(config.kv_budget_fraction, config.batch_cap),
                          block_size=config.block_size, watermark_fraction=config.watermark_fraction,
                          prefix_caching=config.prefix_caching)
        self.kv.window_blocks = window_blocks(model, config.block_size)
        self.cpu: CPUKVTier | None = None
        """Host-memory tier of the prefix cache (``ReplicaConfig.cpu_kv_gb`` > 0), fed by GPU evictions."""
        self.reload_debt_s = 0.0  # CPU-tier reload time owed by the next iteration
        self.tier_tokens = [0, 0, 0]  # first admissions: prompt tokens looked up, GPU hits, CPU hits
        if config.cpu_kv_gb > 0 and config.prefix_caching:
            self.cpu = CPUKVTier.for_model(model, cpu_kv_gb=config.cpu_kv_gb, block_size=config.block_size,
                                           link_gb_s=config.cpu_kv_link_gb_s, connector=config.cpu_kv_connector)
            self.kv.spill = self.cpu.offload

    # ------------------------------------------------------------------ configuration
    def _set_config(self, cfg: "ReplicaConfig", model) -> None:
        prev = getattr(self, "cfg", None)
        # half-done prompts can only exist under chunked prefill (or after a switch away from it)
        self.partials_possible = (cfg.scheduler == "sarathi" or getattr(self, "partials_possible", False)
                                  or (prev is not None and prev.scheduler == "sarathi"))
        self.cfg = cfg
        self.model = model
        self.scheduler = make_scheduler(cfg.scheduler)
        if cfg.num_scheduler_steps == 1:
            self.block_end = 0  # multi-step switched off: no block in progress
        self.spec_k = cfg.speculation_depth
        self.lookahead = cfg.speculation_depth + 1
        self.default_alpha = cfg.spec_acceptance
        self.async_sched = bool(getattr(model, "_async", False))
        self.frontend_s = float(getattr(model, "frontend_s", 0.0))
        self.api_s = float(getattr(model, "api_server_per_request_s", 0.0))
        self.quality = float(model.quality_delta)
        self._coeffs: dict = {}

    @property
    def target_config(self) -> "ReplicaConfig":
        """The config in force after the pending change (the current one when none is pending)."""
        return self.pending[0] if self.pending is not None else self.cfg

    @property
    def pending_reload_s(self) -> float:
        return self.pending[2] if self.pending is not None else 0.0

    def request_config(self, cfg: "ReplicaConfig", model, reload_s: float) -> float | None:
        """Queue a new config; it takes effect in ``plan`` (the next iteration boundary; the only
        place it does). Returns a new end time when a running decode run was truncated so that the
        boundary comes sooner (the caller re-schedules), else None."""
        self.pending = (cfg, model, reload_s)
        if self.state == RUN:
            return self.interrupt(self.now)
        return None

    def _apply_pending(self, now: float) -> None:
        cfg, model, reload_s = self.pending  # type: ignore[misc]
        self.pending = None
        self._kv_advance(now)
        self._set_config(cfg, model)
        cap_tokens = model.kv_capacity_tokens(cfg.kv_budget_fraction, cfg.batch_cap)
        new_blocks = cap_tokens // cfg.block_size
        if cfg.block_size != self.kv.block_size:
            raise ValueError("block_size cannot change while the simulator runs")
        self.kv.prefix_caching = cfg.prefix_caching
        while self.kv.used_blocks > new_blocks and self.running:
            self.preempt(self.running[-1])
        self.kv.resize(cap_tokens, cfg.watermark_fraction)
        # requests that can never fit any more are rejected (never silently lost)
        for r in list(self.running):
            why = self.never_fits(r)
            if why is not None:
                self.running.remove(r)
                self.kv.release(r)
                self.on_reject(r, why)
        for q in (self.prio_waiting, self.waiting):
            keep = [r for r in q if self._fits_or_reject(r)]
            q.clear()
            q.extend(keep)
        if reload_s > 0:
            self.paused_until = max(self.paused_until, now + reload_s)

    def max_kv_tokens(self, r: "Request") -> int:
        return r.prompt_tokens + r.output_tokens - 1

    def never_fits(self, r: "Request") -> str | None:
        """The one admission rule of the simulator: a request whose KV at full length exceeds the
        replica's cache can never run here. Returns the one rejection message, or None if it fits."""
        need = self.kv.blocks_for(self.max_kv_tokens(r)) + self.kv.window_extra(r)
        if need > self.kv.capacity_blocks:
            return (f"needs {need} KV blocks at full length ({self.max_kv_tokens(r)} tokens) "
                    f"but replica {self.id} holds {self.kv.capacity_blocks}")
        return None

    def _fits_or_reject(self, r: "Request") -> bool:
        why = self.never_fits(r)
        if why is None:
            return True
        self.on_reject(r, why)
        return False

    # ------------------------------------------------------------------ queues and admission
    def accept(self, r: "Request") -> bool:
        """A request arrives (routed, or its KV transferred here): queued if it can ever fit,
        else rejected through ``on_reject`` (the only entry to the queues from outside)."""
        if not self._fits_or_reject(r):
            return False
        if self.api_s and r.generated_tokens == 0 and r.prefilled_tokens == 0:
            self.api_pending += 1  # a new request: the API server handles it before the next step
        self.enqueue(r)
        return True

    def enqueue(self, r: "Request", front: bool = False) -> None:
        """Queue membership, decided here only: the priority queue when priority scheduling is on."""
        q = self.prio_waiting if (self.priority_on and r.priority == 1) else self.waiting
        if front:
            q.appendleft(r)
        else:
            q.append(r)

    def set_priority(self, on: bool) -> None:
        """Priority scheduling on/off from now on; turning it on moves queued priority requests
        to the priority queue (behind those already there), in their order."""
        self.priority_on = bool(on)
        if on:
            pr = [r for r in self.waiting if r.priority == 1]
            if pr:
                rest = [r for r in self.waiting if r.priority != 1]
                self.waiting.clear()
                self.waiting.extend(rest)
                self.prio_waiting.extend(pr)

    def head(self):
        """The next request the scheduler may take: the queue head, unless it was placed after
        ``cutoff`` (asynchronous scheduling: the step now starting was fixed before it arrived)."""
        c = self.cutoff
        if self.prio_waiting:
            r = self.prio_waiting[0]
            if not r.dispatched_s > c:
                return r
            self.blocked = True
        if self.waiting:
            r = self.waiting[0]
            if not r.dispatched_s > c:
                return r
            self.blocked = True
        return None

    def queued(self) -> int:
        return len(self.waiting) + len(self.prio_waiting)

    def outstanding(self) -> int:
        return len(self.waiting) + len(self.prio_waiting) + len(self.running) + self.inbound

    def in_step_block(self) -> bool:
        """Multi-step scheduling: a decode block has steps left (the scheduler is not consulted)."""
        return self.iterations < self.block_end and bool(self.running)

    def start_step_block(self, steps: int) -> None:
        """Multi-step scheduling: the decodes planned now are a block of ``steps`` steps."""
        self.block_end = self.iterations + steps

    # ------------------------------------------------------------------ KV accounting helpers
    def _kv_advance(self, t: float) -> None:
        w = self.win
        if t > w.kv_t:
            # occupancy against the capacity of the time (a budget change mid-window stays exact)
            w.kv_area += self.kv.used_blocks / self.kv.capacity_blocks * (t - w.kv_t)
            w.kv_t = t

    def _kv_peak(self) -> None:
        f = self.kv.used_blocks / self.kv.capacity_blocks
        w = self.win
        if f > w.kv_max:
            w.kv_max = f

    def kv_occupancy(self) -> float:
        return self.kv.used_blocks / self.kv.capacity_blocks

    def window_close(self, now: float) -> ReplicaWindow:
        """The current window's counters, with the KV occupancy integral brought up to ``now``."""
        self._kv_advance(now)
        return self.win

    def reset_window(self, now: float) -> None:
        self.win.reset(now, self.kv.used_blocks / self.kv.capacity_blocks)

    # ------------------------------------------------------------------ planning
    def plan(self, now: float) -> float | None:
        """Decide the next work from ``now``; returns its end time or None when idle."""
        self.now = now
        if self.pending is not None:
            self._apply_pending(now)
        if now < self.paused_until:
            self.cutoff = _INF  # the engine restarts after the reload
            self.state = PAUSE
            self.seg_end = self.paused_until
            return self.paused_until
        if not self.running and not self.waiting and not self.prio_waiting:
            self.cutoff = _INF
            self.state = IDLE
            return None
        if self.api_pending and not self.in_step_block():
            # API server in the engine's process (vLLM v0.5): the requests that arrived during the last
            # step are handled (HTTP, validation, tokenisation, add_request) before the next step runs
            stall = self.api_pending * self.api_s
            self.api_pending = 0
            self.state = PAUSE
            self.seg_end = now + stall
            return self.seg_end
        tries = 2
        while True:
            self.preempted_in_plan = False
            self.blocked = False
            chunks, with_dec = self.scheduler.plan(self)
            if with_dec:
                if self.partials_possible:
                    decodes = [r for r in self.running if r.prefilled_tokens >= r.prefill_target]
                else:
                    decodes = self.running[:]
            else:
                decodes = []
            tries -= 1
            if chunks or decodes or not self.blocked or not tries:
                break
            self.cutoff = _INF  # asynchronous scheduling with no step in flight: nothing to wait for
        if not chunks and not decodes:
            # An empty replica always admits its head: every queued request passed ``never_fits``
            # (its full length fits the cache, and an empty cache has every block free).
            raise RuntimeError(f"replica {self.id}: the scheduler produced an empty iteration with "
                               f"{len(self.running)} running and {self.queued()} queued (a simulator bug)")
        self.cutoff = _INF
        self.seg_t0 = now
        k = self.spec_k
        if not chunks and k == 0 and not self.reload_debt_s:
            return self._plan_run(now, decodes)
        S = 0
        for r in decodes:
            S += r.kv_tokens
        B = len(decodes)
        S += B
        pf = [(c, r.prefilled_tokens) for r, c in chunks]
        dur = self._iter_time(pf, B, S, k if B else 0)
        if self.reload_debt_s:  # CPU-tier reloads of this iteration's new requests
            dur += self.reload_debt_s
            self.reload_debt_s = 0.0
        self.state = ITER
        self.it_chunks = chunks
        self.seg_decodes = decodes
        self.seg_end = now + dur
        return self.seg_end

    def _plan_run(self, now: float, decodes: list["Request"]) -> float:
        B = len(decodes)
        S0 = B
        rmin = 1 << 62
        for r in decodes:
            S0 += r.kv_tokens
            rem = r.output_tokens - r.generated_tokens
            if rem < rmin:
                rmin = rem
        n = rmin if rmin < self.max_run else self.max_run
        left = self.block_end - self.iterations
        if left > 0:  # multi-step block: runs to its end whatever completes inside it (vLLM
            n = left if left < self.max_run else self.max_run  # reports those at the block's end)
        if self.preempted_in_plan or self.blocked:
            # a request was just preempted after the admission pass (vLLM order), or one waits for
            # the next step (asynchronous scheduling): the next iteration may admit differently
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
            c = self._coeffs[B] = self._decode_coeffs(B, 0)
        a: float = c[0]
        b: float = c[1]
        self.state = RUN
        self.seg_decodes = decodes
        self.seg_B = B
        self.seg_S0 = S0
        self.seg_a = a
        self.seg_b = b
        self.seg_n = n
        self.seg_end = now + n * a + b * (n * S0 + B * n * (n - 1) / 2)
        return self.seg_end

    def _extra_blocks(self, decodes: list["Request"], n: int) -> int:
        bs = self.kv.block_size
        extra = 0
        for r in decodes:
            nb = (r.kv_tokens + n + bs - 1) // bs
            if nb > r.kv_blocks:
                extra += nb - r.kv_blocks
        return extra

    # ------------------------------------------------------------------ introspection
    def check_invariants(self) -> None:
        """Full KV-cache check (blocks, reference counts, free queue) against the running requests."""
        kv = self.kv
        assert 0 <= kv.used_blocks <= kv.capacity_blocks, (
            f"replica {self.id}: used {kv.used_blocks} outside [0, {kv.capacity_blocks}]")
        kv.check(self.running)
        if self.cpu is not None:
            self.cpu.check()
            assert self.tier_tokens[1] + self.tier_tokens[2] <= self.tier_tokens[0], "hits exceed lookups"
        for r in self.running:
            assert r.kv_blocks * kv.block_size >= r.kv_tokens, f"request {r.req_id} holds too few blocks"
            assert r.kv_blocks * kv.block_size >= r.prefilled_tokens, f"request {r.req_id} prefilled past its blocks"
        for q in (self.waiting, self.prio_waiting):
            for r in q:
                assert r.kv_blocks == 0 and r.shared_blocks == 0, f"queued request {r.req_id} holds blocks"
                assert r.prefilled_tokens == 0 or r.prefilled_tokens >= r.prefill_target, (
                    f"queued request {r.req_id} was advanced while queued ({r.prefilled_tokens} tokens)")
