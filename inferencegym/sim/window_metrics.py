"""Run totals and window aggregates of a cluster: the counters the event loop feeds, and the
``WindowStats`` computed from them and from the replicas' window counters.

One job: metrics. The event loop (``cluster.py``) reports arrivals, rejections and completions to a
:class:`RunLedger`; :func:`collect_window` turns the ledger's window and the replicas'
``ReplicaWindow`` counters into a :class:`~inferencegym.sim.metrics.WindowStats`. Whether a request
met its SLO is ``slo.meets_slo`` (the one rule).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .metrics import TBTRecorder, TenantWindowStats, WindowStats, pdict, weighted_arith_percentiles
from .slo import meets_slo
from .tbt_small import one_value_figures, pct, small_mean, small_percentiles
from .interpreted import mypyc_attr

if TYPE_CHECKING:
    from .config import TenantSpec
    from .replica import Replica
    from .request import Request


def first_token_split(reqs: list[Request]) -> tuple[list[Request], list[Request]]:
    """``reqs`` split, in their order, into those whose first token came out (``first_token_s``
    set) and those still waiting for it and not rejected (the cluster env's reward ledger sweeps
    its dispatched requests with it at every router decision; compiled with the simulator core)."""
    firsts: list[Request] = []
    keep: list[Request] = []
    for r in reqs:
        ft = r.first_token_s
        if ft == ft:
            firsts.append(r)
        elif r.rejected_reason is None:
            keep.append(r)
    return firsts, keep


def settled_split(reqs: list[Request], now: float) -> tuple[list[Request], list[Request], bool]:
    """``reqs`` split, in their order, into those that left the system by ``now`` (completed at or
    before it, or rejected) and those still in it, and whether one still in it is already complete
    (its completion, the client's last token, comes after ``now``). The cluster env's reward
    ledger sweeps its requests in the system with it (compiled with the simulator core)."""
    gone: list[Request] = []
    keep: list[Request] = []
    later = False
    for r in reqs:
        c = r.completion_s
        if c == c:
            if c > now:
                keep.append(r)
                later = True
            else:
                gone.append(r)
        elif r.rejected_reason is not None:
            gone.append(r)
        else:
            keep.append(r)
    return gone, keep, later


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # deep-copied (sim/interpreted.py)
class RunLedger:
    """Run totals (submitted, completed, rejected) and the current window's arrivals, rejections and
    completed requests with their SLO outcome (decided once, at completion, by ``slo.meets_slo``).
    The event loop is its only writer; ``closed_done`` / ``closed_ok`` keep the last closed window's
    completions for the envs (they read them instead of keeping their own ledgers)."""

    __slots__ = ("tenants", "submitted", "completed", "rejected", "win_start_s", "win_arrivals",
                 "win_rejections", "win_done", "win_ok", "closed_done", "closed_ok")

    def __init__(self, tenants: Sequence[TenantSpec]) -> None:
        self.tenants = tuple(tenants)
        self.closed_done: list[Request] = []
        self.closed_ok: list[bool] = []
        self.submitted = 0
        self.completed = 0
        self.rejected = 0
        self.win_start_s = 0.0
        self.win_arrivals = 0
        self.win_rejections = 0
        self.win_done: list[Request] = []
        self.win_ok: list[bool] = []

    def settled(self) -> bool:
        """Every submitted request completed or was rejected."""
        return self.completed + self.rejected >= self.submitted

    def reject(self, r: Request, why: str) -> None:
        """The one place a rejection is recorded (reason on the request, counted once)."""
        r.rejected_reason = why
        self.rejected += 1
        self.win_rejections += 1

    def complete(self, done: list[Request]) -> None:
        """The one place completions are counted and their SLO outcome decided."""
        self.completed += len(done)
        self.win_done.extend(done)
        ten = self.tenants
        self.win_ok.extend([meets_slo(r, ten[r.tenant]) for r in done])

    def reset_window(self, now_s: float) -> None:
        self.closed_done = self.win_done
        self.closed_ok = self.win_ok
        self.win_start_s = now_s
        self.win_arrivals = 0
        self.win_rejections = 0
        self.win_done = []
        self.win_ok = []


def _mean(xs: list) -> float:
    """``float(np.mean(xs))``; one value (one replica) is returned as numpy returns it (x / 1), and
    fewer than 8 values are summed in order as numpy's pairwise sum does below its 8-wide blocks
    (bit-equal, ``tests/sim/test_sim_hot_path.py``) without its reduction set-up."""
    n = len(xs)
    if n == 1:
        return xs[0] / 1.0
    if 1 < n < 8:
        return sum(xs) / n
    return float(np.mean(xs))


def _arith_mean(d0, step, n, w) -> float:
    tw = (n * w).sum()
    if tw <= 0:
        return math.nan
    return float((w * (n * d0 + step * n * (n - 1) / 2)).sum() / tw)


_NAN3 = [math.nan, math.nan, math.nan]
"""The percentiles of a figure left out of a brief readout (copied: ``pdict`` builds its own dict)."""


def collect_window(replicas: Sequence[Replica], tenants: Sequence[TenantSpec], ledger: RunLedger,
                   now: float, brief: bool = False) -> WindowStats:
    """Aggregates of the window from ``ledger.win_start_s`` to ``now`` (replicas synced to now).

    ``brief``: only what an env step reads (``LLMServeEnv``): the TBT mean, the end-to-end, TPOT
    and queueing-delay percentiles and every tenant's latency percentiles are NaN, not computed
    (the rest is the full readout's, bit for bit)."""
    start = ledger.win_start_s
    dur = now - start
    # one replica: its recorder is read in place (the readout only reads it), else the replicas'
    # records concatenated in replica order
    tbt = replicas[0].win.tbt if len(replicas) == 1 else TBTRecorder()
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
    for rep in replicas:
        w = rep.window_close(now)
        if tbt is not w.tbt:
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
    first = [r for rep in replicas for r in rep.win.first]
    # a small window's figures in plain Python, a window of one-value records (speculative steps)
    # from its values and weights only (bit for bit numpy's, ``tbt_small.py``), else numpy
    d0s, steps, ns, ws = tbt.d0, tbt.step, tbt.n, tbt.w
    tbt_mean: float | None
    tbt_p = small_percentiles(d0s, steps, ns, ws, (50, 90, 99))
    ov = None if tbt_p is not None else one_value_figures(d0s, steps, ns, ws, (50, 90, 99), not brief)
    if ov is not None:
        tbt_p, tbt_mean = ov
    else:
        tbt_mean = math.nan if brief else small_mean(d0s, steps, ns, ws)
        if tbt_p is None or tbt_mean is None:
            tbt_arrays = tbt.arrays()
            if tbt_p is None:
                tbt_p = weighted_arith_percentiles(*tbt_arrays, (50, 90, 99))
            if tbt_mean is None:
                tbt_mean = _arith_mean(*tbt_arrays)
    done = ledger.win_done
    slo_ok = ledger.win_ok
    ttft_p = pct([r.first_token_s - r.arrival_s for r in first])
    if brief:
        e2e_p = tpot_p = q_p = _NAN3
    else:
        e2e_p = pct([r.completion_s - r.arrival_s for r in done])
        tpot_p = pct([r.tpot_s for r in done if r.output_tokens > 1])
        q_p = pct([r.first_scheduled_s - r.arrival_s for r in first])
    tstats = {}
    for ti, ts in enumerate(tenants):
        if len(tenants) == 1:  # every request is tenant 0's: the window's own figures
            n_done, ok, t_ttft, t_tpot, t_e2e, ttb_p = len(done), slo_ok, ttft_p, tpot_p, e2e_p, tbt_p
            if brief:
                t_ttft = ttb_p = _NAN3
        elif brief:  # the tenant's completions and SLO outcomes only
            ok = [k for r, k in zip(done, slo_ok) if r.tenant == ti]
            n_done = len(ok)
            t_ttft = t_tpot = t_e2e = ttb_p = _NAN3
        else:
            fd = [r for r in first if r.tenant == ti]
            dd = [r for r in done if r.tenant == ti]
            ok = [k for r, k in zip(done, slo_ok) if r.tenant == ti]
            n_done = len(dd)
            t_ttft = pct([r.first_token_s - r.arrival_s for r in fd])
            t_tpot = pct([r.tpot_s for r in dd if r.output_tokens > 1])
            t_e2e = pct([r.completion_s - r.arrival_s for r in dd])
            if any(rep.win.ttbt is None for rep in replicas):
                ttb_p = _NAN3  # (``ClusterReadout.skip_tenant_tbt``: not recorded)
            elif len(replicas) == 1:
                ttb_p = replicas[0].win.ttbt[ti].percentiles()  # type: ignore[index]  # per-tenant recorders
            else:
                ttb = TBTRecorder()
                for rep in replicas:
                    ttb.extend(rep.win.ttbt[ti])  # type: ignore[index]
                ttb_p = ttb.percentiles()
        tstats[ts.name] = TenantWindowStats(
            name=ts.name, completions=n_done,
            ttft_s=pdict(t_ttft),
            tbt_s=pdict(ttb_p),
            tpot_s=pdict(t_tpot),
            e2e_s=pdict(t_e2e),
            slo_attainment=(sum(ok) / len(ok)) if ok else math.nan)
    return WindowStats(
        start_s=start, end_s=now, arrivals=ledger.win_arrivals, completions=len(done),
        rejections=ledger.win_rejections, preemptions=preempt,
        ttft_s=pdict(ttft_p),
        tbt_s=pdict(tbt_p),
        e2e_s=pdict(e2e_p),
        tpot_s=pdict(tpot_p),
        queueing_delay_s=pdict(q_p),
        tbt_mean_s=tbt_mean,
        throughput_tok_s=tokens / dur if dur > 0 else 0.0,
        throughput_req_s=len(done) / dur if dur > 0 else 0.0,
        goodput_req_s=sum(slo_ok) / dur if dur > 0 else 0.0,
        slo_attainment=(sum(slo_ok) / len(slo_ok)) if slo_ok else math.nan,
        kv_occupancy_mean=_mean(occ) if occ else 0.0,
        kv_occupancy_max=occ_max,
        kv_fragmentation=(alloc - used_tok) / alloc if alloc else 0.0,
        gpu_memory_used_gb=mem,
        queue_depth=sum(rep.queued() for rep in replicas),
        running=sum(len(rep.running) for rep in replicas),
        output_tokens=tokens, gpu_seconds=gpu_s, cost_usd=cost,
        cost_per_1k_tokens=cost / (tokens / 1000.0) if tokens else math.nan,
        spec_acceptance_rate=acc / prop if prop else math.nan,
        quality_delta=qsum / tokens if tokens else _mean([r.quality for r in replicas]),
        prefix_hit_rate=hit_tok / q_tok if q_tok else math.nan,
        prefix_cached_tokens=hit_tok,
        prefix_cache_occupancy=_mean(cache_occ),
        replica_prefix_hit_rate=rep_hit,
        tenants=tstats)
