"""Grading of cluster episodes: the shared grader plus the cluster's latency and balance report.

A cluster episode is graded by the same :func:`inferencegym.tasks.graders.grade` as the single-agent
tasks: its :class:`~inferencegym.tasks.graders.EpisodeLog` holds one
:class:`~inferencegym.tasks.graders.WindowRecord` per control window, with per tenant the output tokens
*offered* by the requests that arrived in that window and the *good* tokens of those requests that met
their tenant's SLO (:func:`inferencegym.sim.slo.meets_slo`: TTFT <= ``ttft_slo_s`` and mean time per
output token <= ``tbt_slo_s``), plus each tenant's p99 TTFT over the episode
(``tenant_ttft_tail_s``). The log is built after draining the in-flight requests (no new arrivals),
so a request that a bad router left in a long queue is judged on its real latency instead of being
cut off. Cluster tasks use ``GraderSpec(w_slo=0.5, w_cost=0, w_quality=0, w_latency=0.5)``: the
hardware is fixed and the replica knobs carry no quantization, so (w_t = tenant grade_weight)

    score = 0.5 * sum_t w_t good_t / sum_t w_t offered_t
          + 0.5 * sum_t w_t clip(ln(2 SLO_t / p99_t) / ln 8, 0, 1) / sum_t w_t     (in [0, 1])

The SLO share alone saturated (round-robin 0.991, least-outstanding 1.000 on ``cluster_routing``
while their p99 TTFT differed 2.8x); the latency term is 1 at a p99 of a quarter of the SLO and 0 at
twice the SLO, so the tail separates a good router from a great one.

``EpisodeLog.metrics`` adds the cluster report (not graded): p50/p90/p99 of TTFT, TBT (per-request
largest gap) and E2E (``cluster/ttft_p99_s`` ...), SLO attainment per tenant
(``cluster/slo_attainment/<tenant>``), throughput (``cluster/throughput_tok_s``: output tokens /
time from the first arrival to the last completion), and load imbalance across replicas
(``cluster/load_imbalance``: max over replicas of served tokens / capacity, divided by the mean, minus
1; 0 = perfectly proportional to capacity) and ``cluster/cost_per_1k_tokens`` (GPU-hour prices of all
replicas from time 0 to the last completion, per 1k output tokens).
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np

from inferencegym.sim.slo import meets_slo_table
from inferencegym.tasks.graders import EpisodeLog, GradeResult, WindowRecord, grade
from inferencegym.tasks.spec import TaskSpec, get_task


def request_table(requests: Iterable) -> dict[str, np.ndarray]:
    """Per-request arrays from simulator ``Request`` objects (NaN where a time is missing)."""
    rs = list(requests)
    f = lambda name, dt=np.float64: np.array([getattr(r, name) for r in rs], dtype=dt)  # noqa: E731
    return {
        "arrival_s": f("arrival_s"), "first_token_s": f("first_token_s"),
        "completion_s": f("completion_s"), "prompt_tokens": f("prompt_tokens", np.int64),
        "output_tokens": f("output_tokens", np.int64), "tenant": f("tenant", np.int64),
        "replica_id": f("replica_id", np.int64), "tbt_max_s": f("tbt_max_s"),
        "tbt_sum_s": f("tbt_sum_s"),
        "preemptions": f("preemptions", np.int64),
        "rejected": np.array([r.rejected_reason is not None for r in rs], dtype=bool),
    }


def _p(a: np.ndarray, q: float) -> float:
    return float(np.percentile(a, q)) if a.size else math.nan


def cluster_metrics(task: TaskSpec, table: dict[str, np.ndarray],
                    capacity_rps: list[float] | None = None,
                    usd_per_s: float | None = None) -> dict[str, float]:
    """The cluster report of one episode (see the module docstring)."""
    arr, ft, comp = table["arrival_s"], table["first_token_s"], table["completion_s"]
    done = ~np.isnan(comp)
    ttft = (ft - arr)[~np.isnan(ft)]
    tbt = table["tbt_max_s"][done & (table["output_tokens"] > 1)]
    e2e = (comp - arr)[done]
    m: dict[str, float] = {}
    for name, a in (("ttft", ttft), ("tbt", tbt), ("e2e", e2e)):
        for q in (50, 90, 99):
            m[f"cluster/{name}_p{q}_s"] = _p(a, q)
    m["cluster/requests"] = float(arr.size)
    m["cluster/completed"] = float(done.sum())
    m["cluster/rejected"] = float(table["rejected"].sum())
    m["cluster/preemptions"] = float(table["preemptions"].sum())
    out_tok = float(table["output_tokens"][done].sum())
    span = (float(np.nanmax(comp)) - float(arr.min())) if done.any() else math.nan
    m["cluster/throughput_tok_s"] = out_tok / span if span and span > 0 else 0.0
    # GPU cost of the cluster from time 0 to the last completion, per 1k output tokens
    end = float(np.nanmax(comp)) if done.any() else task.episode_s
    m["cluster/cost_per_1k_tokens"] = (usd_per_s * max(end, task.episode_s) / (out_tok / 1000.0)
                                       if usd_per_s is not None and out_tok > 0 else math.nan)
    good = _good(task, table)
    for i, t in enumerate(task.tenants):
        sel = table["tenant"] == i
        m[f"cluster/slo_attainment/{t.name}"] = float(good[sel].mean()) if sel.any() else math.nan
    n = task.replicas
    served = np.bincount(table["replica_id"][done], weights=table["output_tokens"][done].astype(float),
                         minlength=n)[:n] if done.any() else np.zeros(n)
    cap = np.asarray(capacity_rps if capacity_rps is not None else [1.0] * n, dtype=float)
    u = served / cap
    m["cluster/load_imbalance"] = float(u.max() / u.mean() - 1.0) if u.mean() > 0 else 0.0
    return m


def _good(task: TaskSpec, table: dict[str, np.ndarray]) -> np.ndarray:
    ten = table["tenant"]
    return meets_slo_table(arrival_s=table["arrival_s"], first_token_s=table["first_token_s"],
                           completion_s=table["completion_s"], output_tokens=table["output_tokens"],
                           tbt_sum_s=table["tbt_sum_s"],
                           ttft_slo_s=np.array([t.ttft_slo_s for t in task.tenants])[ten],
                           tbt_slo_s=np.array([t.tbt_slo_s for t in task.tenants])[ten])


def tenant_ttft_tails(task: TaskSpec, table: dict[str, np.ndarray]) -> list[float | None]:
    """Each tenant's ``grader.latency_quantile`` TTFT (requests with no first token are infinitely
    late; None when the quantile falls on one of them). An observed value, never interpolated."""
    ttft = table["first_token_s"] - table["arrival_s"]
    ttft = np.where(np.isnan(ttft), np.inf, ttft)
    out: list[float | None] = []
    for i in range(len(task.tenants)):
        sel = ttft[table["tenant"] == i]
        if sel.size == 0:
            out.append(0.0)
            continue
        q = float(np.percentile(sel, task.grader.latency_quantile, method="higher"))
        out.append(q if math.isfinite(q) else None)
    return out


def episode_log_from_requests(task: TaskSpec | str, requests: Iterable, *, policy: str | None = None,
                              seed: int | None = None,
                              capacity_rps: list[float] | None = None,
                              usd_per_s: float = 0.0) -> EpisodeLog:
    """Build the grader's :class:`EpisodeLog` of a (drained) cluster episode."""
    task = get_task(task)
    table = request_table(requests)
    W, n_t = task.episode_windows, len(task.tenants)
    win = np.minimum((table["arrival_s"] // task.window_s).astype(np.int64), W - 1)
    good = _good(task, table)
    out = table["output_tokens"].astype(np.float64)
    idx = win * n_t + table["tenant"]
    offered = np.bincount(idx, weights=out, minlength=W * n_t).reshape(W, n_t)
    good_tok = np.bincount(idx, weights=out * good, minlength=W * n_t).reshape(W, n_t)
    done = ~np.isnan(table["completion_s"])
    produced = np.bincount(win[done], weights=out[done], minlength=W)
    windows = [WindowRecord(step=w, offered_tokens=offered[w].tolist(), good_tokens=good_tok[w].tolist(),
                            produced_tokens=float(produced[w]), window_usd=usd_per_s * task.window_s,
                            quality_delta=0.0)
               for w in range(W)]
    return EpisodeLog(task_id=task.task_id, seed=seed, policy=policy, windows=windows,
                      metrics=cluster_metrics(task, table, capacity_rps, usd_per_s),
                      tenant_ttft_tail_s=tenant_ttft_tails(task, table))


def grade_cluster(task_id: str | TaskSpec, episode_log: EpisodeLog | dict | str) -> GradeResult:
    """The shared grader on a cluster episode log (score = tenant-weighted in-SLO token share)."""
    return grade(task_id, episode_log)
