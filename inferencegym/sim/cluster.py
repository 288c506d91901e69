"""The cluster: an event-driven simulator of replicas behind a router (the event loop).

Events sit in one ``EventQueue`` (``events.py``) keyed ``(time, priority, seq)`` with a
per-instance counter: replica iteration ends (priority 0), KV transfers (1), arrivals (2). Replicas
advance independently between cluster events; each replica's end of planned work is one event
(stale ones are skipped by version). No class-level state: two clusters in one process never interact.

One owner per decision; this module owns the event loop, request validation, routing and placement.
The rest lives beside it: admission and rejection (``Replica.never_fits`` / ``Replica.accept``,
reported through ``on_reject`` into the :class:`~inferencegym.sim.window_metrics.RunLedger`),
completion (``replica_advance``), window metrics (``window_metrics.py``), knob physics
(``knobs.py``), disaggregation and decode placement (``disaggregation.py``), features and the
results table (``outputs.py``), name checks (``names.py``), what the cluster reports
(``cluster_readout.py``), checks of submitted requests (``submission.py``), several speculative
iterations per event (``spec_ahead.py``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, ClassVar

import numpy as np

from .cache_view import PublishedView
from .chunk_ahead import advance_chunks
from .cluster_readout import ClusterReadout
from .config import ClusterConfig
from .disaggregation import Disaggregation
from .events import EV_ARRIVAL, EV_STEP, EV_TRANSFER, EventQueue
from .execution import ExecutionModel
from .knobs import REPLICA_KNOBS, ModelBank, changed_configs, reload_time_s
from .names import check_cluster_names
from .outputs import FEATURE_NAMES, ReplicaFeatures
from .replica import IDLE, ITER, RUN, Replica
from .request import Request
from .router import make_router
from .spec_ahead import advance_spec
from .submission import check_submitted
from .window_metrics import RunLedger
from .interpreted import mypyc_attr

_REPLICA_KNOBS = REPLICA_KNOBS  # the name older callers import


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # deep-copied (sim/interpreted.py)
class Cluster(ClusterReadout):
    """Event-driven simulator of ``num_replicas`` replicas (see docs/simulator.md).

    ``rng`` is the only source of randomness (random routers, speculative acceptance draws);
    ``execution_model`` overrides the preset model (anything with ExecutionModel's interface).
    ``check_invariants=True`` verifies KV and conservation invariants after every event (tests);
    ``max_run_iterations=1`` disables the closed-form multi-iteration decode runs (reference path).
    """

    FEATURE_NAMES: ClassVar[tuple[str, ...]] = FEATURE_NAMES

    def __init__(self, config: ClusterConfig, rng: np.random.Generator | None = None, *,
                 execution_model=None, check_invariants: bool = False,
                 max_run_iterations: int | None = None) -> None:
        if not isinstance(config, ClusterConfig):
            raise TypeError(f"config must be a ClusterConfig, got {type(config).__name__}")
        check_cluster_names(config)
        if max_run_iterations is not None and max_run_iterations < 1:
            raise ValueError(f"max_run_iterations must be >= 1, got {max_run_iterations}")
        self.config = config
        self.rng = rng if rng is not None else np.random.default_rng(0)
        rc = config.replica
        if execution_model is None:
            execution_model = ExecutionModel.shared_preset(  # (one per process: memos stay warm)
                model=rc.model, gpu=rc.gpu, tensor_parallel=rc.tensor_parallel,
                quantization=rc.quantization, gpu_hour_usd=config.gpu_hour_usd,
                engine_profile=rc.engine_profile, expert_parallel=rc.expert_parallel,
                kv_cache_dtype=rc.kv_cache_dtype, draft_model=rc.draft_model,
                pipeline_parallel=rc.pipeline_parallel)
        self.base_model = execution_model
        self.models = ModelBank(rc, execution_model, config.gpu_hour_usd)
        self.ledger = RunLedger(config.tenants)
        """Run totals and the current window's counters (the event loop is its only writer)."""
        alphas = [t.spec_acceptance for t in config.tenants]
        child = self.rng.spawn(config.num_replicas)
        # heterogeneous clusters (ClusterConfig.replica_configs): one model per distinct hardware
        rcs = list(config.replica_configs) or [rc] * config.num_replicas
        self.replicas = [Replica(replica_id=i, config=rcs[i], model=self.models.model_for(rcs[i]),
                                 rng=child[i], tenant_alpha=alphas, recent_window=config.recent_window,
                                 on_reject=self.ledger.reject)
                         for i in range(config.num_replicas)]
        if max_run_iterations is not None:
            for rep in self.replicas:
                rep.max_run = int(max_run_iterations)
        self.cache_view = PublishedView(config.cache_publish_interval_s)
        """What routers see of the replicas' prefix caches and load (published, slightly stale)."""
        self.router = make_router(config.router)
        self.external = config.router == "external"
        self.events = EventQueue()
        self.now_s = 0.0
        self.requests: list[Request] = []
        self._pending_decision: Request | None = None
        self._fallback_router: Any = None  # a router object (make_router)
        self.check = check_invariants
        self._features = ReplicaFeatures()
        self.disagg = Disaggregation(config.num_replicas, config.decode_router)
        self.set_priority_routing(config.priority_routing)
        self.routable: list[int] | None = None
        """Lifecycle hook (``sim/fleet.py``): replicas that may receive new requests (None: all)."""
        if config.disaggregate:
            self.set_disaggregation(True, prefill_replicas=config.prefill_replicas)

    # ------------------------------------------------------------------ properties
    @property
    def num_replicas(self) -> int:
        return len(self.replicas)

    @property
    def n_submitted(self) -> int:
        return self.ledger.submitted

    @property
    def n_completed(self) -> int:
        return self.ledger.completed

    @property
    def n_rejected(self) -> int:
        return self.ledger.rejected

    @property
    def disagg_on(self) -> bool:
        return self.disagg.on

    @property
    def priority_on(self) -> bool:
        return self._priority_on

    # ------------------------------------------------------------------ input
    def submit(self, requests: Iterable[Request]) -> None:
        """Add requests; each becomes an arrival event at ``arrival_s`` (>= now). All are validated
        before any is added: a bad request leaves the cluster unchanged."""
        requests = list(requests)
        check_submitted(requests, now_s=self.now_s, n_tenants=len(self.config.tenants),
                        block_size=self.config.replica.block_size)
        for r in requests:
            r.prefill_target = r.prompt_tokens
            self.requests.append(r)
            self.ledger.submitted += 1
            self.events.schedule(r.arrival_s, EV_ARRIVAL, r)

    # ------------------------------------------------------------------ event loop
    def _run(self, t_s: float, decide: bool, until_done: bool = False) -> Request | None:
        if self._pending_decision is not None:
            raise RuntimeError(f"request {self._pending_decision.req_id} awaits routing; call "
                               f"dispatch(req, replica_id) first")
        if t_s < self.now_s:
            raise ValueError(f"cannot run back in time: t_s={t_s} < now_s={self.now_s}")
        reps = self.replicas
        ledger = self.ledger
        sched = self.events.schedule  # (bound per call: a stored bound method of a compiled object
        # would survive copy.deepcopy pointing at the original's queue)
        claim = self.events.claim_first
        check = self.check
        guard = self.external and not decide and self._fallback_router is None
        for ev in (self._guarded_until(t_s) if guard else self.events.until(t_s)):
            t = ev[0]
            self.now_s = t
            kind = ev[1]
            if kind == EV_STEP:
                rep = reps[ev[3]]
                if ev[4] != rep.version:
                    continue
                while True:
                    done, handoffs = rep.on_step_end(t)
                    if done:
                        ledger.complete(done)
                    for r in handoffs:
                        self._start_transfer(r, rep)
                    end = rep.plan(t)
                    if end is None:
                        break
                    if rep.state == ITER and rep.spec_k:  # several speculative iterations, one event
                        end = advance_spec(rep, self._ahead_limit(t_s), None if until_done else ledger,
                                           self.events)
                        if end is None:
                            break
                    elif rep.state == ITER and rep.it_chunks:  # chunked prefill, several iterations
                        end = advance_chunks(rep, self._ahead_limit(t_s), None if until_done else ledger,
                                             self.events)
                        if end is None:
                            break
                    v = rep.version = rep.version + 1  # (_push_step, inline)
                    # the replica's next step comes before every queued event: it is the next
                    # event, handled here without the queue (same order, same sequence numbers)
                    if (end <= t_s and not (until_done and ledger.completed + ledger.rejected >= ledger.submitted)
                            and claim(end)):
                        if check:
                            self.check_invariants()
                        t = end
                        self.now_s = t
                        continue
                    sched(end, EV_STEP, rep.id, v)
                    break
            elif kind == EV_ARRIVAL:
                r = ev[3]
                ledger.win_arrivals += 1
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
            if check:
                self.check_invariants()
            if until_done and ledger.completed + ledger.rejected >= ledger.submitted:  # (settled(), inline)
                return None
        if t_s != math.inf:
            self.now_s = t_s
        return None

    def _ahead_limit(self, t_s: float) -> float:
        """How far a replica may advance on its own from now (``spec_ahead``): up to ``t_s`` and
        up to the next arrival or transfer (they come after replica steps at an equal time); other
        replicas' steps do not touch it, except that under disaggregation a step may start a
        transfer to it, so then up to (before) the next event of any kind."""
        q = self.events
        h = q.next_other()
        if self.disagg.on:
            top = q.peek()
            if top is not None and top[1] == EV_STEP:
                h = math.nextafter(top[0], -math.inf)  # before it: its seq comes first at a tie
        return h if h < t_s else t_s

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
            if not self.ledger.settled():
                self._run(max_t_s, False, until_done=True)
        finally:
            self._fallback_router = None

    # ------------------------------------------------------------------ routing and placement
    def _route(self, r: Request, router) -> None:
        if router.needs_sync:
            self.sync()
        cands = self.disagg.candidates()
        if self.routable and not self.disagg.on:  # lifecycle hook: serving replicas only
            cands = self.routable
        self._place(r, router.choose(self, r, cands))

    def _place(self, r: Request, rid: int) -> None:
        rep = self.replicas[rid]
        r.replica_id = rid
        r.dispatched_s = self.now_s
        if rep.accept(r):
            if self.disagg.is_prefill(rid):
                r.handoff = True
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
        if end is not None:
            self._push_step(rep, end)

    def _push_step(self, rep: Replica, end: float) -> None:
        rep.version += 1
        self.events.schedule(end, EV_STEP, rep.id, rep.version)

    # ------------------------------------------------------------------ disaggregation
    def _start_transfer(self, r: Request, src: Replica) -> None:
        if self.disagg.decode_router.needs_sync:
            self.sync()
        dst, dt = self.disagg.start_transfer(self, self.replicas, r, src)
        self.events.schedule(self.now_s + dt, EV_TRANSFER, r, dst)

    def _finish_transfer(self, r: Request, dst: int) -> None:
        rep = self.replicas[dst]
        r.handoff = False
        r.replica_id = dst
        if rep.receive_kv(r, self.now_s):
            self.ledger.complete([r])
        elif rep.accept(r):
            self._wake(rep)

    def set_disaggregation(self, on: bool, prefill_replicas: int | None = None) -> None:
        """Split the replicas into prefill instances (the first ``prefill_replicas``) and decode
        instances, or merge them back. Requests in flight finish where they are (a request whose
        prefill was placed on a prefill instance still moves to a decode instance); new arrivals
        follow the new mode."""
        p = self.config.prefill_replicas if prefill_replicas is None else int(prefill_replicas)
        self.disagg.set(on, p)

    @property
    def prefill_ids(self) -> list[int]:
        return self.disagg.prefill_ids

    @property
    def decode_ids(self) -> list[int]:
        return self.disagg.decode_ids

    def set_priority_routing(self, on: bool) -> None:
        """Priority requests jump queues and may preempt best-effort ones (from now on; each
        replica decides queue membership, ``Replica.set_priority``)."""
        self._priority_on = bool(on)
        for rep in self.replicas:
            rep.set_priority(self._priority_on)

    # ------------------------------------------------------------------ knobs
    def apply_replica_config(self, replica: int | None = None, **knobs: Any) -> dict[str, float]:
        """Change replica knobs from now on: ``batch_cap, kv_budget_fraction, chunk_size,
        speculation_depth, quantization, scheduler, spec_acceptance, max_tokens_per_iter,
        watermark_fraction``. Applied at each replica's next iteration boundary. A quantization
        change reloads the weights: the replica pauses ``weight_bytes_per_gpu / host_to_gpu_gb_s``;
        if the new KV capacity is smaller than what is in use, the most recently admitted requests
        are preempted. Returns ``{replica_id: pause_s}`` for replicas that pause."""
        ids = list(range(len(self.replicas))) if replica is None else [int(replica)]
        for i in ids:
            if not 0 <= i < len(self.replicas):
                raise ValueError(f"replica must be None or in 0..{len(self.replicas) - 1}, got {replica!r}")
        # every replica's new config is validated before any changes
        changes = changed_configs([(i, self.replicas[i].target_config) for i in ids], knobs)
        pauses: dict[str, float] = {}
        for i, cur, new in changes:
            rep = self.replicas[i]
            model = self.models.model_for(new)
            reload_s = reload_time_s(cur, new, model)
            if new.quantization != cur.quantization:
                pauses[str(i)] = reload_s
            reload_s = max(reload_s, rep.pending_reload_s)
            rep.now = self.now_s
            end = rep.request_config(new, model, reload_s)
            if end is not None:
                self._push_step(rep, end)
            elif rep.state == IDLE:  # its next plan (now) applies the change
                self._schedule(rep)
        return pauses
