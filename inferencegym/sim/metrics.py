"""Metrics: weighted time-between-token samples, window aggregates (``WindowStats``) and helpers.

TBT is recorded without per-token objects: a run of ``n`` back-to-back decode iterations whose
durations form the arithmetic sequence ``d0, d0 + step, ...`` with ``w`` sequences each is one
record ``(d0, step, n, w)``. Percentiles over all records are exact (inverted-CDF definition, the
smallest duration whose cumulative weight reaches q) and are found by bisection on the value.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .tbt_small import one_value_figures, small_percentiles
from .interpreted import mypyc_attr

NAN = math.nan


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # deep-copied (sim/interpreted.py)
class TBTRecorder:
    """Weighted arithmetic-sequence samples of time between tokens."""

    __slots__ = ("d0", "step", "n", "w")

    def __init__(self) -> None:
        self.d0: list[float] = []
        self.step: list[float] = []
        self.n: list[int] = []
        self.w: list[float] = []

    def add(self, d0: float, step: float, n: int, w: float) -> None:
        if n > 0 and w > 0:
            self.d0.append(d0)
            self.step.append(step)
            self.n.append(n)
            self.w.append(w)

    def clear(self) -> None:
        self.d0.clear()
        self.step.clear()
        self.n.clear()
        self.w.clear()

    def extend(self, other: "TBTRecorder") -> None:
        self.d0.extend(other.d0)
        self.step.extend(other.step)
        self.n.extend(other.n)
        self.w.extend(other.w)

    def __len__(self) -> int:
        return len(self.d0)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        # (``np.fromiter``: each value as ``float(x)``, the values ``np.asarray(x, float)`` gives,
        # without its per-element type sniffing of a list that mixes ints and floats)
        m = len(self.d0)
        return (np.fromiter(self.d0, float, m), np.fromiter(self.step, float, m),
                np.fromiter(self.n, float, m), np.fromiter(self.w, float, m))

    def total_weight(self) -> float:
        d0, st, n, w = self.arrays()
        return float((n * w).sum())

    def mean(self) -> float:
        d0, st, n, w = self.arrays()
        tw = (n * w).sum()
        if tw <= 0:
            return NAN
        # sum_i (d0 + step*i) for i < n = n*d0 + step*n(n-1)/2
        return float((w * (n * d0 + st * n * (n - 1) / 2)).sum() / tw)

    def percentiles(self, qs: tuple[float, ...] = (50, 90, 99)) -> list[float]:
        small = small_percentiles(self.d0, self.step, self.n, self.w, qs)  # (numpy's floats)
        if small is not None:
            return small
        ov = one_value_figures(self.d0, self.step, self.n, self.w, qs, False)
        return ov[0] if ov is not None else weighted_arith_percentiles(*self.arrays(), qs)


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # deep-copied (sim/interpreted.py)
class ReplicaWindow:
    """A replica's counters over the current metrics window; ``reset()`` starts a new window.

    ``tbt`` holds every time-between-token sample of the replica; ``ttbt`` one recorder per tenant
    (only with several tenants, so the single-tenant hot path skips it). ``add_tbt`` is the one way
    samples are recorded, whatever the advance mode (closed-form run, iteration, speculation, token).
    ``merge_tbt`` (``ClusterReadout.percentiles_only_tbt``): the compiled speculative steps record the
    sequences of an iteration that share its common gap and token count as one record, their
    weights summed (the same weighted multiset of values, so the same inverted-CDF percentiles; a
    TBT mean from them would round differently, so such a window is read by the brief readout only).
    """

    __slots__ = ("tbt", "ttbt", "merge_tbt", "first", "tokens_out", "quality_token_sum", "preemptions",
                 "spec_proposed", "spec_accepted", "kv_area", "kv_t", "kv_max",
                 "prefix_query_tokens", "prefix_hit_tokens")

    def __init__(self, n_tenants: int) -> None:
        self.ttbt = [TBTRecorder() for _ in range(n_tenants)] if n_tenants > 1 else None
        self.merge_tbt = False
        self.reset(0.0, 0.0)

    def reset(self, now: float, kv_fraction: float) -> None:
        """Start a window at ``now`` with KV occupancy ``kv_fraction``."""
        self.tbt = TBTRecorder()
        if self.ttbt is not None:
            self.ttbt = [TBTRecorder() for _ in self.ttbt]
        self.first: list = []
        """Requests whose first token came out in the window."""
        self.tokens_out = 0
        self.quality_token_sum = 0.0
        self.preemptions = 0
        self.spec_proposed = 0
        self.spec_accepted = 0
        self.kv_area = 0.0
        """Integral of KV occupancy (blocks in use / capacity of the time) over the window (s)."""
        self.kv_t = now
        self.kv_max = kv_fraction
        self.prefix_query_tokens = 0
        """Prompt tokens of requests admitted for the first time in the window."""
        self.prefix_hit_tokens = 0
        """Of those, tokens found in the prefix cache."""

    def add_tbt(self, d0: float, step: float, n: int, w: float, tenant: int = 0, tenant_w=None) -> None:
        """Record ``w`` sequences' gaps ``d0, d0 + step, ..`` (``n`` of them). Per tenant: all ``w``
        to ``tenant``, ``tenant_w[i]`` of them to tenant ``i`` when ``tenant_w`` is given, none
        when ``tenant`` is -1."""
        if n > 0 and w > 0:
            rec = self.tbt
            rec.d0.append(d0)
            rec.step.append(step)
            rec.n.append(n)
            rec.w.append(w)
            ttbt = self.ttbt
            if ttbt is not None:
                if tenant_w is None:
                    if tenant >= 0:
                        ttbt[tenant].add(d0, step, n, w)
                else:
                    for ti, c in enumerate(tenant_w):
                        ttbt[ti].add(d0, step, n, c)

    def add_run(self, d0: float, step: float, k: int, back: int, B: int, gaps: dict | None, t_back, t_all) -> None:
        """``B`` sequences decoded ``k`` iterations back to back (gaps ``d0, d0 + step, ..``); the
        first gap counts only for the ``back`` of them that also produced the previous iteration's
        token; the others' first gaps are ``gaps`` (None: none stalled; gap -> count, or -> per-tenant counts with
        several tenants; sequences stalled together share one weighted sample). ``t_back`` /
        ``t_all``: ``back`` / ``B`` per tenant (None with one tenant)."""
        rec = self.tbt
        ttbt = self.ttbt
        if gaps:
            for g0, c in gaps.items():
                if ttbt is None:
                    rec.add(g0, 0.0, 1, float(c))
                else:
                    self.add_tbt(g0, 0.0, 1, float(sum(c)), 0, c)
        if back == B:
            rec.d0.append(d0)
            rec.step.append(step)
            rec.n.append(k)
            rec.w.append(B)
        else:
            rec.add(d0, 0.0, 1, back)
            rec.add(d0 + step, step, k - 1, B)
        if ttbt is not None:
            for ti, c in enumerate(t_all):
                if c:
                    cb = t_back[ti]
                    if cb == c:
                        ttbt[ti].add(d0, step, k, c)
                    else:
                        ttbt[ti].add(d0, 0.0, 1, cb)
                        ttbt[ti].add(d0 + step, step, k - 1, c)


def weighted_arith_percentiles(d0: np.ndarray, step: np.ndarray, n: np.ndarray, w: np.ndarray,
                               qs: tuple[float, ...], expand_max: int = 20_000) -> list[float]:
    """Inverted-CDF percentiles of the multiset {d0_j + step_j * i, weight w_j : i < n_j}.

    Bisection on the value; records entirely below the bracket are folded into a base count and
    records entirely above it are dropped as the bracket narrows, so long runs stay cheap.
    """
    if d0.size == 0:
        return [NAN for _ in qs]
    step = np.maximum(step, 0.0)
    ntot = n.sum()
    if ntot <= expand_max:  # small windows (an env step): expand, sort, search
        if ntot == d0.size and n.min() == 1.0:  # one value per record (speculative steps): no expansion
            vals = d0 + step * 0.0  # (the expansion's value at i = 0, bit for bit)
            ws = w
        else:
            ni = n.astype(np.int64)
            rec = np.repeat(np.arange(d0.size), ni)
            first = np.repeat(np.cumsum(ni) - ni, ni)
            vals = d0[rec] + step[rec] * (np.arange(rec.size) - first)
            ws = w[rec]
        order = np.argsort(vals, kind="stable")
        vals = vals[order]
        cw = np.cumsum(ws[order])
        tot = cw[-1]
        idx = np.searchsorted(cw, tot * np.asarray(qs, dtype=np.float64) / 100.0, side="left")
        top = vals.size - 1
        return [float(vals[i if i < top else top]) for i in idx.tolist()]
    last = d0 + step * (n - 1)
    total = float((n * w).sum())
    lo0 = float(d0.min())
    hi0 = float(last.max())
    out = []
    # The quantiles bisect from the same bracket: while two of them take the same turns they hold
    # the same (iteration, lo, hi), hence the same base and records, and the same counts; each
    # count (and each pruning) is computed once per such state (``memo``), the comparisons per
    # quantile as before: the same answers, bit for bit.
    memo: dict = {}
    full = (d0, step, n, w, last, step > 0)
    c_lo0 = _count_le(lo0, d0, step, n, w, full[5])
    for q in qs:
        target = total * q / 100.0
        # count(x) = base + sum over active records of w * clip(floor((x - d0)/step) + 1, 0, n)
        act = full
        base = 0.0
        lo, hi = lo0, hi0
        if c_lo0 >= target:
            out.append(lo)
            continue
        for it in range(200):
            mid = 0.5 * (lo + hi)
            if mid <= lo or mid >= hi:
                break
            key = (it, lo, hi)
            c = memo.get(key)
            if c is None:
                c = memo[key] = _count_le(mid, act[0], act[1], act[2], act[3], act[5])
            if base + c >= target:
                hi = mid
            else:
                lo = mid
            if it % 4 == 3:  # prune records outside (lo, hi]
                pkey = (it, lo, hi, "prune")
                pr = memo.get(pkey)
                if pr is None:
                    a_d0, a_st, a_n, a_w, a_last, a_pos = act
                    below = a_last <= lo
                    add = float((a_n[below] * a_w[below]).sum()) if below.any() else None
                    keep = ~below & (a_d0 <= hi)
                    pr = memo[pkey] = (add, (a_d0[keep], a_st[keep], a_n[keep], a_w[keep], a_last[keep],
                                             a_pos[keep]))
                if pr[0] is not None:
                    base += pr[0]
                act = pr[1]
        out.append(hi)
    return out


def _count_le(x: float, d0, step, n, w, pos=None) -> float:
    """``sum(w * clip(floor((x - d0) / step) + 1, 0, n))`` over the records (a record of step 0:
    ``n`` when ``d0 <= x``, else 0); ``pos`` is ``step > 0`` when the caller has it."""
    if d0.size == 0:
        return 0.0
    if pos is None:
        pos = step > 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        k = np.subtract(x, d0)  # (in place from here: the same elementwise values, fewer arrays)
        np.divide(k, step, out=k)
        np.floor(k, out=k)
        k += 1.0
    k = np.where(pos, k, np.where(d0 <= x, n, 0.0))
    np.maximum(k, 0.0, out=k)
    np.minimum(k, n, out=k)
    k *= w
    return float(k.sum())


def pdict(values: list[float]) -> dict[str, float]:
    return {"p50": values[0], "p90": values[1], "p99": values[2]}


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # deep-copied (sim/interpreted.py)
@dataclass(frozen=True, kw_only=True)
class TenantWindowStats:
    """Aggregates of one tenant over a window."""

    name: str
    """Tenant name."""
    completions: int
    """Requests of this tenant completed in the window."""
    ttft_s: dict[str, float]
    """TTFT percentiles (p50/p90/p99) of requests whose first token came out in the window."""
    tbt_s: dict[str, float]
    """TBT percentiles over this tenant's tokens of the window (exact weighted samples)."""
    tpot_s: dict[str, float]
    """TPOT (per-request mean TBT) percentiles of this tenant's completed requests."""
    e2e_s: dict[str, float]
    """End-to-end latency percentiles of the completed requests."""
    slo_attainment: float
    """Fraction of completed requests that met both SLOs (TTFT and mean TBT); NaN if none completed."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # deep-copied (sim/interpreted.py)
@dataclass(frozen=True, kw_only=True)
class WindowStats:
    """Cluster aggregates over ``[start_s, end_s)``; every field has a unit in its name or is a count."""

    start_s: float
    """Window start (simulated seconds)."""
    end_s: float
    """Window end."""
    arrivals: int
    """Requests that arrived at the router."""
    completions: int
    """Requests that produced their last token."""
    rejections: int
    """Requests rejected (never served; each has a reason)."""
    preemptions: int
    """Recompute preemptions (KV shortage, priority, capacity change)."""
    ttft_s: dict[str, float]
    """p50/p90/p99 time to first token of requests whose first token came out in the window."""
    tbt_s: dict[str, float]
    """p50/p90/p99 time between tokens over all tokens of the window (exact weighted samples)."""
    e2e_s: dict[str, float]
    """p50/p90/p99 end-to-end latency of completed requests."""
    tpot_s: dict[str, float]
    """p50/p90/p99 time per output token (mean TBT) of completed requests."""
    queueing_delay_s: dict[str, float]
    """p50/p90/p99 arrival-to-first-scheduled delay of the requests whose first token came out in the window."""
    tbt_mean_s: float
    """Mean time between tokens over all tokens of the window."""
    throughput_tok_s: float
    """Output tokens generated per second."""
    throughput_req_s: float
    """Completed requests per second."""
    goodput_req_s: float
    """Completed requests meeting their tenant's SLOs, per second."""
    slo_attainment: float
    """Fraction of completed requests meeting their SLOs (NaN when none completed)."""
    kv_occupancy_mean: float
    """Time-averaged fraction of KV blocks in use, mean over replicas."""
    kv_occupancy_max: float
    """Largest fraction of KV blocks in use seen at an event in the window, over replicas."""
    kv_fragmentation: float
    """Unused token slots in allocated blocks / allocated slots, at the window end."""
    gpu_memory_used_gb: float
    """Weights plus KV in use over all GPUs at the window end, GB (1e9 bytes)."""
    queue_depth: int
    """Requests waiting in replica queues at the window end."""
    running: int
    """Requests admitted (holding KV) at the window end."""
    output_tokens: int
    """Output tokens generated in the window."""
    gpu_seconds: float
    """GPU-seconds the cluster was provisioned for in the window."""
    cost_usd: float
    """GPU cost of the window (gpu_hour_usd x GPUs x time)."""
    cost_per_1k_tokens: float
    """cost_usd per 1000 output tokens of the window (NaN when none)."""
    spec_acceptance_rate: float
    """Accepted draft tokens / proposed draft tokens (NaN when speculation was off)."""
    quality_delta: float
    """Output-token-weighted quality cost of the quantization tiers in use (0 for FP16)."""
    prefix_hit_rate: float = NAN
    """Prompt tokens found in the prefix cache / prompt tokens, over the requests first admitted in
    the window (token-weighted; NaN when none was admitted)."""
    prefix_cached_tokens: int = 0
    """Prompt tokens served from the prefix cache (first admissions in the window)."""
    prefix_cache_occupancy: float = 0.0
    """Fraction of KV blocks holding cached prefix blocks (referenced or evictable) at the window
    end, mean over replicas."""
    replica_prefix_hit_rate: dict[str, float] = field(default_factory=dict)
    """``prefix_hit_rate`` per replica, keyed by replica index."""
    tenants: dict[str, TenantWindowStats] = field(default_factory=dict)
    """Per-tenant aggregates, keyed by tenant name."""

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        return d

    def flat_metrics(self, prefix: str = "sim/") -> dict[str, float]:
        """Namespaced scalars for MLflow (``sim/p99_ttft_s`` etc.)."""
        out: dict[str, float] = {}
        for k, v in dataclasses.asdict(self).items():
            if k == "tenants":
                for tn, td in v.items():
                    for kk in ("ttft_s", "tbt_s"):
                        for p, x in td[kk].items():
                            out[f"{prefix}{tn}/{p}_{kk}"] = x
                    out[f"{prefix}{tn}/slo_attainment"] = td["slo_attainment"]
            elif isinstance(v, dict):
                for p, x in v.items():
                    out[f"{prefix}{p}_{k}"] = x
            else:
                out[f"{prefix}{k}"] = float(v)
        return out
