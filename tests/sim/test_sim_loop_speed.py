"""Speed paths of the event loop that must not change a result (issue 24, sixth pass): a replica's
next step handled without the queue when it is the next event anyway, and the memoised time of a
one-prompt iteration."""

from __future__ import annotations

import random

import numpy as np
import pytest

from inferencegym.sim import Cluster, ClusterConfig, ExecutionModel, ReplicaConfig, Request, TenantSpec
from inferencegym.sim.events import EV_ARRIVAL, EV_STEP, EV_TRANSFER, EventQueue


def test_claim_first_takes_a_sequence_number_only_for_the_very_next_event():
    q = EventQueue()
    q.schedule(1.0, EV_STEP, "a")
    q.schedule(2.0, EV_ARRIVAL, "r")
    assert not q.claim_first(1.0)  # a tie with a queued event: queue it (seq decides)
    assert not q.claim_first(1.5)
    assert q.claim_first(0.5)  # before everything: handled at once, its seq (3) used up
    q.schedule(0.7, EV_STEP, "b")
    assert [e[2] for e in (q.pop(), q.pop(), q.pop())] == [4, 1, 2]
    assert q.claim_first(5.0) and not q
    q.schedule(3.0, EV_TRANSFER, "x", 1)
    assert not q.claim_first(3.0) and q.claim_first(2.9)


def _run(reqs, **kw):
    rc = ReplicaConfig(model="llama-2-7b", gpu="a100-80gb", scheduler="vllm", batch_cap=64)
    cl = Cluster(ClusterConfig(replica=rc, num_replicas=3, router="round_robin", tenants=(TenantSpec(),)),
                 rng=np.random.default_rng(3), **kw)
    cl.submit(reqs)
    for t in (5.0, 5.0, 17.25, 40.0):  # window boundaries split the inline chains
        cl.run_until(t)
    ws = cl.window_stats()
    cl.drain()
    return cl, ws


def _requests(seed):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(0.08, 600))
    return [Request(req_id=i, arrival_s=float(t[i]), prompt_tokens=int(rng.integers(16, 1500)),
                    output_tokens=int(rng.integers(1, 300))) for i in range(len(t))]


@pytest.mark.python_internals  # patches EventQueue.claim_first (the queued-path reference)
def test_the_inline_steps_give_the_results_of_the_queued_path(monkeypatch):
    fast, ws_fast = _run(_requests(1))
    monkeypatch.setattr(EventQueue, "claim_first", lambda self, time: False)  # every step queued
    slow, ws_slow = _run(_requests(1))
    assert ws_fast == ws_slow or repr(ws_fast) == repr(ws_slow)  # (NaN fields compare by repr)
    for a, b in zip(fast.requests, slow.requests):
        assert (a.first_token_s, a.completion_s, a.tbt_sum_s, a.tbt_max_s, a.replica_id) == \
               (b.first_token_s, b.completion_s, b.tbt_sum_s, b.tbt_max_s, b.replica_id)
    assert repr(fast.run_stats()) == repr(slow.run_stats())


def test_the_inline_steps_keep_the_invariants():
    cl, _ = _run(_requests(2), check_invariants=True)
    assert cl.n_completed == 600


@pytest.mark.python_internals  # numpy integers: the compiled core takes Python ints only
def test_a_memoised_one_prompt_iteration_equals_the_computed_one():
    m = ExecutionModel.from_preset(model="llama-2-7b", gpu="a100-80gb")
    rng = random.Random(5)
    keys = [(rng.randint(1, 8192), rng.choice([0, 0, rng.randint(0, 4000)])) for _ in range(400)]
    for n, c in keys + keys:  # the second pass is served from the memo
        want = m._iteration_time_s(((n, c),), 0, 0, 0)
        assert m.iteration_time_s(((n, c),), 0, 0, 0) == want
        assert m.iteration_time_s([(n, c)], 0, 0, 3) == want  # depth plays no part without decodes
        assert m.prefill_time_s(n) == m._iteration_time_s(((n, 0),), 0, 0, 0)
    assert len(m._prefill1_cache) <= len(set(keys)) + 400
    # numpy integers are computed, never served from (or stored in) the memo
    before = len(m._prefill1_cache)
    assert m.iteration_time_s(((np.int64(9001), np.int64(7)),)) == m._iteration_time_s(((np.int64(9001), np.int64(7)),), 0, 0, 0)
    assert len(m._prefill1_cache) == before


def _reference_percentiles(d0, step, n, w, qs):
    """``weighted_arith_percentiles``' bisection as it was before the shared counts (fifth pass)."""
    step = np.maximum(step, 0.0)
    last = d0 + step * (n - 1)
    total = float((n * w).sum())
    lo0 = float(d0.min())
    hi0 = float(last.max())

    def count_le(x, d0, step, n, w):
        if d0.size == 0:
            return 0.0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            k = np.where(step > 0, np.floor((x - d0) / step) + 1.0, np.where(d0 <= x, n, 0.0))
        k = np.minimum(np.maximum(k, 0.0), n)
        return float((k * w).sum())

    out = []
    for q in qs:
        target = total * q / 100.0
        a_d0, a_st, a_n, a_w, a_last = d0, step, n, w, last
        base = 0.0
        lo, hi = lo0, hi0
        if count_le(lo, a_d0, a_st, a_n, a_w) >= target:
            out.append(lo)
            continue
        for it in range(200):
            mid = 0.5 * (lo + hi)
            if mid <= lo or mid >= hi:
                break
            if base + count_le(mid, a_d0, a_st, a_n, a_w) >= target:
                hi = mid
            else:
                lo = mid
            if it % 4 == 3:
                below = a_last <= lo
                if below.any():
                    base += float((a_n[below] * a_w[below]).sum())
                keep = ~below & (a_d0 <= hi)
                a_d0, a_st, a_n, a_w, a_last = a_d0[keep], a_st[keep], a_n[keep], a_w[keep], a_last[keep]
        out.append(hi)
    return out


def test_the_shared_bisection_counts_give_the_old_percentiles_bit_for_bit():
    from inferencegym.sim.metrics import TBTRecorder, weighted_arith_percentiles

    rng = np.random.default_rng(11)
    qs_sets = [(50, 90, 99), (99, 50, 90), (50, 50, 99.9), (0.1, 10, 25, 75, 100)]
    for trial in range(60):
        m = int(rng.integers(50, 3000))
        d0 = np.round(rng.gamma(2.0, 0.01, m), int(rng.integers(3, 12)))  # ties at low precision
        step = np.where(rng.random(m) < 0.3, 0.0, rng.gamma(1.0, 1e-5, m))
        n = rng.integers(1, 400, m).astype(float)
        w = np.where(rng.random(m) < 0.5, rng.integers(1, 9, m), rng.random(m) * 3).astype(float)
        qs = qs_sets[trial % len(qs_sets)]
        got = weighted_arith_percentiles(d0, step, n, w, qs, expand_max=0)  # always the bisection
        want = _reference_percentiles(d0, np.asarray(step), n, w, qs)
        assert got == want, (trial, got, want)
    rec = TBTRecorder()
    for _ in range(500):
        rec.add(float(rng.random()), 0.0, int(rng.integers(1, 5)), int(rng.integers(1, 4)))
        rec.add(float(rng.random()), float(rng.random()) * 1e-3, 7, 2.5)
    a = rec.arrays()
    assert all(x.dtype == np.float64 for x in a)
    assert [x.tolist() for x in a] == [np.asarray(v, float).tolist() for v in (rec.d0, rec.step, rec.n, rec.w)]


def test_long_list_percentiles_equal_numpy_bit_for_bit():
    from inferencegym.sim.tbt_small import pct

    rng = np.random.default_rng(8)
    for trial in range(600):
        n = int(rng.choice([65, 100, 1000, 1001, 4096, int(rng.integers(65, 20000))]))
        v = [rng.gamma(2.0, 0.05, n), np.round(rng.random(n) * 10, 2), rng.lognormal(0, 3, n),
             rng.integers(0, 50, n) * 0.013][trial % 4]
        qs = [(50, 90, 99), (1, 25, 50, 75, 99.9), (0, 100, 33.3)][trial % 3]
        assert pct(v.tolist(), qs) == [float(x) for x in np.percentile(v, qs)], (trial, n, qs)
    with_nan = [0.1] * 70 + [float("nan")]
    assert all(x != x for x in pct(with_nan))  # numpy decides (NaN)
