"""Merged TBT records give the same percentiles. ``Cluster.percentiles_only_tbt`` (what
``LLMServeEnv`` calls) lets the speculative steps record an iteration's sequences of equal value as
one record with their integer weights summed: the weighted multiset of values is the same, so every
inverted-CDF percentile the brief readout takes is the same float (whatever path reads the window:
plain Python for small windows, the one-value path, numpy's expansion or its bisection). Checked on
random record sets against the unmerged ones, and on whole runs against a cluster that does not
merge (the same results, random streams and brief readouts, with fewer records). A full readout
(with the TBT mean, which would round differently) refuses such a cluster."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from inferencegym.sim import Cluster
from inferencegym.sim.metrics import TBTRecorder, weighted_arith_percentiles
from inferencegym.sim import spec_step
from inferencegym.sim.spec_step import merged_records
from inferencegym.sim.tbt_small import one_value_figures, small_percentiles

from sim_util import clone, results_equal, same_bits, tenant_mix

QS = (50, 90, 99)


def _brief_percentiles(r: TBTRecorder, expand_max: int = 20_000) -> list[float]:
    """The TBT percentiles as ``collect_window(brief=True)`` takes them (its three paths)."""
    p = small_percentiles(r.d0, r.step, r.n, r.w, QS)
    if p is not None:
        return p
    ov = one_value_figures(r.d0, r.step, r.n, r.w, QS, False)
    if ov is not None:
        return ov[0]
    return weighted_arith_percentiles(*r.arrays(), QS, expand_max)


def _bits(xs: list[float]) -> list[str]:
    """Bit patterns of the values, with -0.0 read as 0.0: the same value (a zero gap is recorded
    as +0.0 or -0.0 by the generator below, and which zero a percentile lands on depends on the
    records' order, not on merging)."""
    return [(float(x) + 0.0).hex() for x in xs]


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), iters=st.integers(1, 40), batch=st.integers(1, 60),
       depth=st.integers(1, 6), runs=st.integers(0, 5), zero_gaps=st.booleans(),
       expand_max=st.sampled_from([20_000, 40, 10**9]))
def test_merging_equal_values_keeps_every_percentile(seed, iters, batch, depth, runs, zero_gaps, expand_max):
    rng = random.Random(seed)
    plain, merged = TBTRecorder(), TBTRecorder()
    for _ in range(iters):
        gc = 0.0 if zero_gaps and rng.random() < 0.2 else rng.uniform(1e-3, 0.1)
        hist: dict[float, int] = {}
        for _ in range(rng.randint(1, batch)):
            g = gc if rng.random() < 0.8 else rng.choice([gc * 3.0, 0.0, -0.0, rng.uniform(0, 0.2)])
            n = rng.randint(1, depth + 1)
            plain.add(g / n, 0.0, 1, n)
            if g == gc and g != 0.0:  # the writers' rule: the common nonzero gap is merged
                hist[g / n] = hist.get(g / n, 0) + n
            else:
                merged.add(g / n, 0.0, 1, n)
        items = list(hist.items())
        rng.shuffle(items)  # (record order does not matter: a multiset)
        for v, w in items:
            merged.add(v, 0.0, 1, w)
    for _ in range(runs):  # the closed-form runs' records (several values, float counts)
        d0, stp, k, w = rng.uniform(1e-3, 0.1), rng.choice([0.0, 1e-4]), rng.randint(1, 30), float(rng.randint(1, 9))
        plain.add(d0, stp, k, w)
        merged.add(d0, stp, k, w)
    assert len(merged) <= len(plain)
    got, want = _bits(_brief_percentiles(merged, expand_max)), _bits(_brief_percentiles(plain, expand_max))
    if sum(plain.n) > expand_max and got != want:
        # the unmerged window was read by bisection, which may end an ulp off the exact value
        # (its count of a run of step > 0 rounds), the merged one (fewer values) by an exact
        # path: the merged answer is the exact one (an env window holds ~1,200 values, the
        # bisection starts above 20,000; ``expand_max`` 40 here makes the case happen)
        assert expand_max < 20_000 and got == _bits(_brief_percentiles(plain, 10**9))
    else:
        assert got == want
    assert _bits(merged.percentiles()) == _bits(plain.percentiles())


@settings(max_examples=200, deadline=None)
@given(gap=st.floats(1e-6, 1.0), ns=st.lists(st.integers(1, 9), min_size=1, max_size=80),
       kcap=st.integers(2, 10))
def test_merged_records_are_the_steps_sequences_as_their_multiset(gap, ns, kcap):
    plain, merged = TBTRecorder(), TBTRecorder()
    for n in ns:
        plain.add(gap / n, 0.0, 1, n)
    ok = merged_records(gap, ns, kcap, merged.d0, merged.w, merged.step, merged.n)
    assert ok == all(n <= 3 or n < kcap for n in ns)
    if not ok:
        assert len(merged) == 0  # (nothing recorded: the caller records per sequence)
        return
    assert len(merged) == len(set(ns)) and sum(merged.w) == sum(ns)
    assert sorted(zip(merged.d0, merged.w)) == sorted((gap / n, ns.count(n) * n) for n in set(ns))
    assert _bits(_brief_percentiles(merged)) == _bits(_brief_percentiles(plain))


@pytest.mark.parametrize("tenants,replicas,spec,seed", [(3, 2, 3, 1), (1, 1, 2, 2), (3, 1, 4, 3)])
def test_a_merging_cluster_reads_the_same_brief_windows(tenants, replicas, spec, seed):
    cfg, reqs = tenant_mix(tenants, replicas, spec, seed)
    runs = []
    for merge in (False, True):
        c = Cluster(cfg, np.random.default_rng(seed), check_invariants=True)
        c.skip_tenant_tbt()
        if merge:
            c.percentiles_only_tbt()
        c.submit(clone(reqs))
        stats, records = [], 0
        t = 0.0
        while c.n_completed + c.n_rejected < c.n_submitted:
            t += 0.7
            c.run_until(t)
            records += sum(len(rep.win.tbt) for rep in c.replicas)
            stats.append(dataclasses.asdict(c.window_stats(reset=True, brief=True)))
        runs.append((c, stats, records))
    (plain, ps, pr), (merged, ms, mr) = runs
    assert results_equal(plain.results(), merged.results())
    for x, y in zip(plain.replicas, merged.replicas):
        assert x.rng.bit_generator.state == y.rng.bit_generator.state
    assert len(ps) == len(ms) > 5 and all(same_bits(a, b) for a, b in zip(ps, ms))
    assert mr < pr if spec_step.NATIVE else mr == pr  # (merged when compiled: ``spec_step.NATIVE``)
    with pytest.raises(ValueError, match="brief=True"):
        merged.window_stats(reset=False)
    with pytest.raises(ValueError, match="percentiles_only_tbt"):
        merged.run_stats()
