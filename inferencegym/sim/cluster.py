"""The cluster: an event-driven simulator of replicas behind a router.

Events sit in one ``EventQueue`` (``events.py``) keyed ``(time, priority, seq)`` with a
per-instance counter: replica iteration ends (priority 0), KV transfers (1), arrivals (2). Replicas advance independently between
cluster events; each replica's end of planned work is one event (stale ones are skipped by version).
No class-level state: two clusters in one process never interact.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from inferencegym.sim.execution import ExecutionModel

from .cache_view import PublishedView
from .config import ClusterConfig, ReplicaConfig
from .events import EventQueue
from .metrics import TBTRecorder, TenantWindowStats, WindowStats, pct, pdict, weighted_arith_percentiles
from .replica import IDLE, RUN, Replica
from .request import Request
from .router import make_router
from .slo import meets_slo

EV_STEP, EV_TRANSFER, EV_ARRIVAL = 0, 1, 2


def _arith_mean(d0, step, n, w) -> float:
    tw = (n * w).sum()
    if tw <= 0:
        return math.nan
    return float((w * (n * d0 + step * n * (n - 1) / 2)).sum() / tw)

_REPLICA_KNOBS = ("batch_cap", "kv_budget_fraction", "chunk_size", "speculation_depth", "quantization",
                  "scheduler", "spec_acceptance", "max_tokens_per_iter", "watermark_fraction")


def _hw(cfg: ReplicaConfig) -> tuple:
    """Hardware identity of a replica config (model, GPU, tensor parallel, engine profile)."""
    return (cfg.model, cfg.gpu, cfg.tensor_parallel, cfg.engine_profile)


def _p90(values) -> float:
    """p90 with linear interpolation (numpy's default) of a short deque; 0 when empty. Pure Python:
    np.percentile costs ~20 us per call, which dominated the router's decision time (cluster env)."""
    if not values:
        return 0.0
    x = sorted(values)
    pos = 0.9 * (len(x) - 1)
    lo = int(pos)
    hi = lo + 1 if lo + 1 < len(x) else lo
    return float(x[lo] + (x[hi] - x[lo]) * (pos - lo))


class Cluster:
    """Event-driven simulator of ``num_replicas`` replicas (see docs/simulator.md).

    ``rng`` is the only source of randomness (random routers, speculative acceptance draws);
    ``execution_model`` overrides the preset model (anything with ExecutionModel's interface).
    ``check_invariants=True`` verifies KV and conservation invariants after every event (tests);
    ``max_run_iterations=1`` disables the closed-form multi-iteration decode runs (reference path).
    """

    def __init__(self, config: ClusterConfig, rng: np.random.Generator | None = None, *,
                 execution_model=None, check_invariants: bool = False,
                 max_run_iterations: int | None = None) -> None:
        if not isinstance(config, ClusterConfig):
            raise TypeError(f"config must be a ClusterConfig, got {type(config).__name__}")
        self.config = config
        self.rng = rng if rng is not None else np.random.default_rng(0)
        rc = config.replica
        if execution_model is None:
            execution_model = ExecutionModel.from_preset(
                model=rc.model, gpu=rc.gpu, tensor_parallel=rc.tensor_parallel,
                quantization=rc.quantization, gpu_hour_usd=config.gpu_hour_usd,
                engine_profile=rc.engine_profile)
        self.base_model = execution_model
        self._models: dict[str, Any] = {rc.quantization: execution_model}
        alphas = [t.spec_acceptance for t in config.tenants]
        child = self.rng.spawn(config.num_replicas)
        # heterogeneous clusters (ClusterConfig.replica_configs): one model per distinct hardware
        rcs = list(config.replica_configs) or [rc] * config.num_replicas
        rep_models = [execution_model if _hw(c) == _hw(rc) else self._hw_model(c) for c in rcs]
        self.replicas = [Replica(replica_id=i, config=rcs[i], model=rep_models[i], rng=child[i],
                                 tenant_alpha=alphas, recent_window=config.recent_window)
                         for i in range(config.num_replicas)]
        if max_run_iterations is not None:
            if max_run_iterations < 1:
                raise ValueError(f"max_run_iterations must be >= 1, got {max_run_iterations}")
            for rep in self.replicas:
                rep.max_run = int(max_run_iterations)
        self.cache_view = PublishedView(config.cache_publish_interval_s)
        """What routers see of the replicas' prefix caches and load (published, slightly stale)."""
        self.router = make_router(config.router)
        self.external = config.router == "external"
        self.events = EventQueue()
        self._schedule_event = self.events.schedule
        self.now_s = 0.0
        self.requests: list[Request] = []
        self._pending_decision: Request | None = None
        self._fallback_router = None
        self.check = check_invariants
        self.priority_on = False
        self.set_priority_routing(config.priority_routing)
        self.disagg_on = False
        self.prefill_ids: list[int] = []
        self.decode_ids: list[int] = []
        self.all_ids = list(range(config.num_replicas))
        self.routable: list[int] | None = None
        """Lifecycle hook (``sim/fleet.py``): replicas that may receive new requests (None: all)."""
        if config.disaggregate:
            self.set_disaggregation(True, prefill_replicas=config.prefill_replicas)
        # run totals
        self.n_submitted = 0
        self.n_completed = 0
        self.n_rejected = 0
        # window state
        self._win_start = 0.0
        self._win_arrivals = 0
        self._win_rejections = 0
        self._win_done: list[Request] = []
        self._features_prev: np.ndarray | None = None
        self.total_preemptions = 0
        self.total_tokens = 0

    # ------------------------------------------------------------------ properties
    @property
    def num_replicas(self) -> int:
        return len(self.replicas)

    # ------------------------------------------------------------------ input
    def submit(self, requests: Iterable[Request]) -> None:
        """Add requests; each becomes an arrival event at ``arrival_s`` (>= now). All are validated
        before any is added: a bad request leaves the cluster unchanged."""
        nt = len(self.config.tenants)
        bs = self.config.replica.block_size
        requests = list(requests)
        seen: set[int] = set()
        for r in requests:
            if not isinstance(r, Request):
                raise TypeError(f"submit expects Request objects, got {type(r).__name__}")
            if not (r.arrival_s >= self.now_s) or math.isinf(r.arrival_s):
                raise ValueError(f"request {r.req_id}: arrival_s={r.arrival_s} is before the clock "
                                 f"({self.now_s}) or not finite; submit only future arrivals")
            if r.prompt_tokens < 1 or r.output_tokens < 1:
                raise ValueError(f"request {r.req_id}: prompt_tokens and output_tokens must be >= 1, "
                                 f"got {r.prompt_tokens}, {r.output_tokens}")
            if not 0 <= r.tenant < nt:
                raise ValueError(f"request {r.req_id}: tenant {r.tenant} out of range; the config has "
                                 f"{nt} tenant(s) (indices 0..{nt - 1})")
            if r.priority not in (0, 1):
                raise ValueError(f"request {r.req_id}: priority must be 0 or 1, got {r.priority}")
            h = r.block_hashes
            if h and (len(h) > r.prompt_tokens // bs or len(set(h)) != len(h)):
                raise ValueError(f"request {r.req_id}: block_hashes must hold at most one hash per full "
                                 f"{bs}-token block of the prompt ({r.prompt_tokens // bs}), all distinct "
                                 f"(chained); got {len(h)} hashes, {len(set(h))} distinct")
            if r.prefill_target != 0 or r.generated_tokens != 0 or r.replica_id != -1 or id(r) in seen:
                raise ValueError(f"request {r.req_id} was already submitted or simulated; submit fresh "
                                 f"Request objects")
            seen.add(id(r))
        for r in requests:
            r.prefill_target = r.prompt_tokens
            self.requests.append(r)
            self.n_submitted += 1
            self.events.schedule(r.arrival_s, EV_ARRIVAL, r)

    # ------------------------------------------------------------------ event loop
    def _run(self, t_s: float, decide: bool, until_done: bool = False) -> Request | None:
        if self._pending_decision is not None:
            raise RuntimeError(f"request {self._pending_decision.req_id} awaits routing; call "
                               f"dispatch(req, replica_id) first")
        if t_s < self.now_s:
            raise ValueError(f"cannot run back in time: t_s={t_s} < now_s={self.now_s}")
        reps = self.replicas
        guard = self.external and not decide and self._fallback_router is None
        for ev in (self._guarded_until(t_s) if guard else self.events.until(t_s)):
            t = ev[0]
            self.now_s = t
            kind = ev[1]
            if kind == EV_STEP:
                rep = reps[ev[3]]
                if ev[4] != rep.version:
                    continue
                done, handoffs = rep.on_step_end(t)
                if done:
                    self._complete(done)
                for r in handoffs:
                    self._start_transfer(r, rep)
                self._schedule(rep)
            elif kind == EV_ARRIVAL:
                r = ev[3]
                self._win_arrivals += 1
                if self.external:
                    if decide:
                        self._pending_decision = r
                        if self.check:
                            self.check_invariants()
                        return r
                    self._route(r, self._fallback_router)
                else:
                    self._route(r, self.router)
            else:  # EV_TRANSFER
                self._finish_transfer(ev[3], ev[4])
            if self.check:
                self.check_invariants()
            if until_done and self.n_completed + self.n_rejected >= self.n_submitted:
                return None
        if t_s != math.inf:
            self.now_s = t_s
        return None

    def _guarded_until(self, t_s: float):
        """Events due by ``t_s``, refusing (before touching it: no state change) an arrival that
        the external router would have to decide."""
        q = self.events
        while True:
            top = q.peek()
            if top is None or top[0] > t_s:
                return
            if top[1] == EV_ARRIVAL:
                raise RuntimeError("router is 'external': advance with run_until_decision() and "
                                   "dispatch(), or drain() (which routes the rest by least "
                                   "outstanding requests)")
            yield q.pop()

    def run_until(self, t_s: float) -> None:
        """Process every event with time <= t_s; the clock ends at t_s."""
        self._run(float(t_s), False)

    def run_until_decision(self, t_limit_s: float) -> Request | None:
        """External routing: run until an arrival needs a decision (returned, clock at its arrival)
        or until ``t_limit_s`` (returns None, clock at t_limit_s)."""
        if not self.external:
            raise RuntimeError(f"run_until_decision needs router='external' (this cluster uses "
                               f"{self.config.router!r})")
        return self._run(float(t_limit_s), True)

    def dispatch(self, req: Request, replica_id: int) -> None:
        """Place the request awaiting an external decision on ``replica_id``."""
        if req is not self._pending_decision:
            raise ValueError(f"request {getattr(req, 'req_id', req)!r} is not the one awaiting routing")
        rid = int(replica_id)
        if not 0 <= rid < len(self.replicas):
            raise ValueError(f"replica_id must be in 0..{len(self.replicas) - 1}, got {replica_id!r}")
        self._pending_decision = None
        self._place(req, rid)
        if self.check:
            self.check_invariants()

    def drain(self, max_t_s: float = math.inf) -> None:
        """Run until every submitted request has completed or been rejected (or ``max_t_s``).
        Under the external router the remaining arrivals go to the least-outstanding replica."""
        if self._pending_decision is not None:
            raise RuntimeError("a request awaits routing; dispatch it before drain()")
        if self.external:
            self._fallback_router = make_router("least_outstanding_requests")
        try:
            if self.n_completed + self.n_rejected < self.n_submitted:
                self._run(max_t_s, False, until_done=True)
        finally:
            self._fallback_router = None

    # ------------------------------------------------------------------ routing and placement
    def _route(self, r: Request, router) -> None:
        cands = self.prefill_ids if self.disagg_on else (self.routable or self.all_ids)
        if router.needs_sync:
            self.sync()
        self._place(r, router.choose(self, r, cands))

    def _place(self, r: Request, rid: int) -> None:
        rep = self.replicas[rid]
        r.replica_id = rid
        r.dispatched_s = self.now_s
        if rep.reject_if_too_big(r):
            self._collect_rejections(rep)
            return
        if self.disagg_on and rid in self.prefill_ids:
            r.handoff = True
        rep.enqueue(r)
        self._wake(rep)

    def _wake(self, rep: Replica) -> None:
        if rep.state == IDLE:
            self._schedule(rep)
        elif rep.state == RUN:
            rep.now = self.now_s
            end = rep.interrupt(self.now_s)
            if end is not None:
                self._push_step(rep, end)

    def _schedule(self, rep: Replica) -> None:
        end = rep.plan(self.now_s)
        if rep.rejected:
            self._collect_rejections(rep)
        if end is not None:
            self._push_step(rep, end)

    def _push_step(self, rep: Replica, end: float) -> None:
        rep.version += 1
        self._schedule_event(end, EV_STEP, rep.id, rep.version)

    def _collect_rejections(self, rep: Replica) -> None:
        for r, why in rep.rejected:
            r.rejected_reason = why
            self.n_rejected += 1
            self._win_rejections += 1
        rep.rejected.clear()

    def _complete(self, done: list[Request]) -> None:
        self.n_completed += len(done)
        self._win_done.extend(done)

    # ------------------------------------------------------------------ disaggregation
    def _start_transfer(self, r: Request, src: Replica) -> None:
        dst_ids = self.decode_ids if self.decode_ids else [i for i in self.all_ids if i != src.id] or [src.id]
        reps = self.replicas
        dst = min(dst_ids, key=lambda i: (reps[i].outstanding(), i))
        dt = float(src.model.kv_transfer_time_s(r.kv_tokens))
        r.prefill_replica_id = src.id
        r.kv_transfer_s = dt
        reps[dst].inbound += 1
        self.events.schedule(self.now_s + dt, EV_TRANSFER, r, dst)

    def _finish_transfer(self, r: Request, dst: int) -> None:
        rep = self.replicas[dst]
        r.handoff = False
        r.replica_id = dst
        rep.receive_kv(r, self.now_s)
        if r.generated_tokens >= r.output_tokens:
            r.completion_s = r.last_token_s
            self._complete([r])
            return
        if rep.reject_if_too_big(r):
            self._collect_rejections(rep)
            return
        rep.enqueue(r)
        self._wake(rep)

    def set_disaggregation(self, on: bool, prefill_replicas: int | None = None) -> None:
        """Split the replicas into prefill instances (the first ``prefill_replicas``) and decode
        instances, or merge them back. Requests in flight finish where they are (a request whose
        prefill was placed on a prefill instance still moves to a decode instance); new arrivals
        follow the new mode."""
        n = len(self.replicas)
        if on:
            p = self.config.prefill_replicas if prefill_replicas is None else int(prefill_replicas)
            if n < 2 or not 1 <= p < n:
                raise ValueError(f"disaggregation needs 1 <= prefill_replicas < num_replicas={n}, got {p}")
            self.prefill_ids = list(range(p))
            self.decode_ids = list(range(p, n))
        else:
            self.prefill_ids = []
            self.decode_ids = []
        self.disagg_on = bool(on)

    def set_priority_routing(self, on: bool) -> None:
        """Priority requests jump queues and may preempt best-effort ones (from now on)."""
        self.priority_on = bool(on)
        for rep in self.replicas:
            rep.priority_on = self.priority_on
            if on:  # move queued priority requests ahead
                pr = [r for r in rep.waiting if r.priority == 1]
                if pr:
                    rest = [r for r in rep.waiting if r.priority != 1]
                    rep.waiting.clear()
                    rep.waiting.extend(rest)
                    rep.prio_waiting.extend(pr)

    # ------------------------------------------------------------------ knobs
    def _model_for(self, quantization: str, cfg: ReplicaConfig | None = None):
        if cfg is not None and _hw(cfg) != _hw(self.config.replica):  # heterogeneous replica
            return self._hw_model(dataclasses.replace(cfg, quantization=quantization))
        m = self._models.get(quantization)
        if m is None:
            m = self._models[quantization] = self.base_model.with_quantization(quantization)
        return m

    def _hw_model(self, cfg: ReplicaConfig):
        """The execution model of a replica whose hardware differs from ``config.replica``."""
        key = (_hw(cfg), cfg.quantization)
        m = self._models.get(key)
        if m is None:
            m = self._models[key] = ExecutionModel.from_preset(
                model=cfg.model, gpu=cfg.gpu, tensor_parallel=cfg.tensor_parallel,
                quantization=cfg.quantization, gpu_hour_usd=self.config.gpu_hour_usd,
                engine_profile=cfg.engine_profile)
        return m

    def apply_replica_config(self, replica: int | None = None, **knobs: Any) -> dict[str, float]:
        """Change replica knobs from now on: ``batch_cap, kv_budget_fraction, chunk_size,
        speculation_depth, quantization, scheduler, spec_acceptance, max_tokens_per_iter,
        watermark_fraction``. Applied at each replica's next iteration boundary. A quantization
        change reloads the weights: the replica pauses ``weight_bytes_per_gpu / host_to_gpu_gb_s``;
        if the new KV capacity is smaller than what is in use, the most recently admitted requests
        are preempted. Returns ``{replica_id: pause_s}`` for replicas that pause."""
        bad = [k for k in knobs if k not in _REPLICA_KNOBS]
        if bad:
            raise ValueError(f"unknown replica knob(s) {bad}; valid: {', '.join(_REPLICA_KNOBS)}")
        ids = self.all_ids if replica is None else [int(replica)]
        for i in ids:
            if not 0 <= i < len(self.replicas):
                raise ValueError(f"replica must be None or in 0..{len(self.replicas) - 1}, got {replica!r}")
        pauses: dict[str, float] = {}
        news = []
        for i in ids:  # validate every replica's new config before changing any
            cur = self.replicas[i].target_config
            news.append((i, cur, dataclasses.replace(cur, **knobs)))
        for i, cur, new in news:
            rep = self.replicas[i]
            if new == cur:
                continue
            model = self._model_for(new.quantization, new)
            reload_s = 0.0
            if new.quantization != cur.quantization:
                reload_s = float(model.weight_bytes_per_gpu) / (new.host_to_gpu_gb_s * 1e9)
                pauses[str(i)] = reload_s
            reload_s = max(reload_s, rep.pending_reload_s)
            rep.now = self.now_s
            end = rep.request_config(new, model, reload_s)
            if end is not None:
                self._push_step(rep, end)
            elif rep.state == IDLE:  # its next plan (now) applies the change
                self._schedule(rep)
        return pauses

    # ------------------------------------------------------------------ metrics
    def sync(self) -> None:
        """Apply every replica's decode iterations finished by now (bookkeeping only)."""
        t = self.now_s
        for rep in self.replicas:
            if rep.state == RUN:
                rep.sync(t)

    def check_invariants(self) -> None:
        """KV blocks: used + free = capacity, never negative, used = sum held; conservation."""
        for rep in self.replicas:
            rep.check_invariants()
        queued = sum(rep.queued() + len(rep.running) for rep in self.replicas)
        in_heap = sum(1 for e in self.events if e[1] != EV_STEP)
        pending = 1 if self._pending_decision is not None else 0
        total = self.n_completed + self.n_rejected + queued + in_heap + pending
        assert total == self.n_submitted, (f"conservation: completed {self.n_completed} + rejected "
                                           f"{self.n_rejected} + in system {queued + in_heap + pending} "
                                           f"!= submitted {self.n_submitted}")

    def window_stats(self, reset: bool = True) -> WindowStats:
        """Aggregates since the last reset (or the start)."""
        self.sync()
        now = self.now_s
        start = self._win_start
        dur = now - start
        tenants = self.config.tenants
        tbt = TBTRecorder()
        tokens = 0
        qsum = 0.0
        preempt = 0
        prop = acc = 0
        occ = []
        occ_max = 0.0
        gpu_s = 0.0
        cost = 0.0
        mem = 0.0
        alloc = used_tok = 0
        q_tok = hit_tok = 0
        rep_hit: dict[str, float] = {}
        cache_occ = []
        for rep in self.replicas:
            w = rep.window_close(now)
            tbt.extend(w.tbt)
            tokens += w.tokens_out
            qsum += w.quality_token_sum
            preempt += w.preemptions
            prop += w.spec_proposed
            acc += w.spec_accepted
            q_tok += w.prefix_query_tokens
            hit_tok += w.prefix_hit_tokens
            rep_hit[str(rep.id)] = (w.prefix_hit_tokens / w.prefix_query_tokens
                                    if w.prefix_query_tokens else math.nan)
            cache_occ.append(rep.kv.cached_blocks / rep.kv.capacity_blocks)
            if dur > 0:
                occ.append(w.kv_area / dur)
            occ_max = max(occ_max, w.kv_max, rep.kv_occupancy())
            m = rep.model
            gpu_s += m.gpu_count * dur
            cost += m.gpu_hour_usd * dur / 3600.0
            mem += (m.weight_bytes_per_gpu * m.gpu_count
                    + rep.kv.used_blocks * rep.kv.block_size * m.kv_bytes_per_token) / 1e9
            for r in rep.running:
                alloc += r.kv_blocks * rep.kv.block_size
                used_tok += r.kv_tokens
        first = [r for rep in self.replicas for r in rep.win.first]
        tbt_arrays = tbt.arrays()
        tbt_p = weighted_arith_percentiles(*tbt_arrays, (50, 90, 99))
        done = self._win_done
        slo_ok = [self._meets_slo(r) for r in done]
        tstats = {}
        for ti, ts in enumerate(tenants):
            fd = [r for r in first if r.tenant == ti]
            dd = [r for r in done if r.tenant == ti]
            ok = [self._meets_slo(r) for r in dd]
            if len(tenants) == 1:
                ttb_p = tbt_p
            else:
                ttb = TBTRecorder()
                for rep in self.replicas:
                    ttb.extend(rep.win.ttbt[ti])
                ttb_p = ttb.percentiles()
            tstats[ts.name] = TenantWindowStats(
                name=ts.name, completions=len(dd),
                ttft_s=pdict(pct([r.first_token_s - r.arrival_s for r in fd])),
                tbt_s=pdict(ttb_p),
                tpot_s=pdict(pct([r.tpot_s for r in dd if r.output_tokens > 1])),
                e2e_s=pdict(pct([r.completion_s - r.arrival_s for r in dd])),
                slo_attainment=(sum(ok) / len(ok)) if ok else math.nan)
        ws = WindowStats(
            start_s=start, end_s=now, arrivals=self._win_arrivals, completions=len(done),
            rejections=self._win_rejections, preemptions=preempt,
            ttft_s=pdict(pct([r.first_token_s - r.arrival_s for r in first])),
            tbt_s=pdict(tbt_p),
            e2e_s=pdict(pct([r.completion_s - r.arrival_s for r in done])),
            tpot_s=pdict(pct([r.tpot_s for r in done if r.output_tokens > 1])),
            queueing_delay_s=pdict(pct([r.first_scheduled_s - r.arrival_s for r in first])),
            tbt_mean_s=_arith_mean(*tbt_arrays),
            throughput_tok_s=tokens / dur if dur > 0 else 0.0,
            throughput_req_s=len(done) / dur if dur > 0 else 0.0,
            goodput_req_s=sum(slo_ok) / dur if dur > 0 else 0.0,
            slo_attainment=(sum(slo_ok) / len(slo_ok)) if slo_ok else math.nan,
            kv_occupancy_mean=float(np.mean(occ)) if occ else 0.0,
            kv_occupancy_max=occ_max,
            kv_fragmentation=(alloc - used_tok) / alloc if alloc else 0.0,
            gpu_memory_used_gb=mem,
            queue_depth=sum(rep.queued() for rep in self.replicas),
            running=sum(len(rep.running) for rep in self.replicas),
            output_tokens=tokens, gpu_seconds=gpu_s, cost_usd=cost,
            cost_per_1k_tokens=cost / (tokens / 1000.0) if tokens else math.nan,
            spec_acceptance_rate=acc / prop if prop else math.nan,
            quality_delta=qsum / tokens if tokens else float(np.mean([r.quality for r in self.replicas])),
            prefix_hit_rate=hit_tok / q_tok if q_tok else math.nan,
            prefix_cached_tokens=hit_tok,
            prefix_cache_occupancy=float(np.mean(cache_occ)),
            replica_prefix_hit_rate=rep_hit,
            tenants=tstats)
        if reset:
            self._reset_window()
        return ws

    def _meets_slo(self, r: Request) -> bool:
        return meets_slo(r, self.config.tenants[r.tenant])

    def _reset_window(self) -> None:
        self._win_start = self.now_s
        self._win_arrivals = 0
        self._win_rejections = 0
        self._win_done = []
        for rep in self.replicas:
            self.total_preemptions += rep.win.preemptions
            self.total_tokens += rep.win.tokens_out
            rep.reset_window(self.now_s)

    # ------------------------------------------------------------------ agent-facing state
    FEATURE_NAMES = ("queue_len", "oldest_wait_s", "mean_wait_s", "running", "kv_occupancy",
                     "recent_p90_ttft_s", "recent_p90_tbt_s", "load_trend")

    def replica_features(self) -> np.ndarray:
        """(N, 8) float32 per-replica state, Vidur-style (names in ``Cluster.FEATURE_NAMES``):
        queue length, oldest and mean wait of queued requests (s), running sequences, KV occupancy,
        p90 of the last ``recent_window`` TTFTs and iteration times (s, 0 before any), and the load
        trend (outstanding requests now minus at the previous call)."""
        self.sync()
        now = self.now_s
        n = len(self.replicas)
        out = np.zeros((n, len(self.FEATURE_NAMES)), dtype=np.float32)
        outstanding = np.zeros(n)
        for i, rep in enumerate(self.replicas):
            waits = [now - (r.dispatched_s if r.dispatched_s == r.dispatched_s else r.arrival_s)
                     for q in (rep.prio_waiting, rep.waiting) for r in q]
            out[i, 0] = len(waits)
            out[i, 1] = max(waits) if waits else 0.0
            out[i, 2] = sum(waits) / len(waits) if waits else 0.0
            out[i, 3] = len(rep.running)
            out[i, 4] = rep.kv_occupancy()
            out[i, 5] = _p90(rep.recent_ttft)
            out[i, 6] = _p90(rep.recent_iter)
            outstanding[i] = rep.outstanding()
        prev = self._features_prev
        out[:, 7] = outstanding - prev if prev is not None else 0.0
        self._features_prev = outstanding
        return out

    def published_cached_tokens(self, replica_id: int, req: Request) -> int:
        """Prompt tokens of ``req`` cached on ``replica_id`` as last published (what a router may
        credit; at most ``prompt_tokens - 1``, whole blocks)."""
        h = req.block_hashes
        if not h:
            return 0
        bs = self.replicas[replica_id].kv.block_size
        snap = self.cache_view.get(self)[replica_id]
        return snap.prefix_blocks(h, (req.prompt_tokens - 1) // bs) * bs

    # ------------------------------------------------------------------ results
    _RESULT_FIELDS = ("req_id", "arrival_s", "prompt_tokens", "output_tokens", "tenant", "priority",
                      "replica_id", "prefill_replica_id", "dispatched_s", "first_scheduled_s",
                      "first_token_s", "completion_s", "preemptions", "tbt_max_s", "tbt_sum_s",
                      "kv_transfer_s", "generated_tokens", "cached_tokens")

    def results(self) -> dict[str, np.ndarray]:
        """Per-request table over every submitted request (dict of equal-length numpy arrays),
        with derived ttft_s, tpot_s, e2e_s, queueing_delay_s, rejected and rejected_reason."""
        reqs = self.requests
        out: dict[str, np.ndarray] = {}
        for f in self._RESULT_FIELDS:
            out[f] = np.array([getattr(r, f) for r in reqs])
        if not reqs:
            for f in self._RESULT_FIELDS:
                out[f] = np.zeros(0)
        out["ttft_s"] = out["first_token_s"] - out["arrival_s"]
        out["e2e_s"] = out["completion_s"] - out["arrival_s"]
        out["queueing_delay_s"] = out["first_scheduled_s"] - out["arrival_s"]
        out["tpot_s"] = np.array([r.tpot_s if r.done else math.nan for r in reqs], dtype=float)
        out["rejected"] = np.array([r.rejected_reason is not None for r in reqs], dtype=bool)
        out["rejected_reason"] = np.array([r.rejected_reason or "" for r in reqs], dtype=object)
        return out

    def write_parquet(self, path) -> None:
        """Write ``results()`` to a Parquet file (pyarrow)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        res = self.results()
        cols = {k: (pa.array(list(v), type=pa.string()) if v.dtype == object else pa.array(v))
                for k, v in res.items()}
        pq.write_table(pa.table(cols), str(path))

    def run_stats(self) -> WindowStats:
        """Aggregates over the current window without resetting it (the whole run if never reset)."""
        return self.window_stats(reset=False)
