"""What an env step skips of the window readout changes nothing else. A brief readout
(``Cluster.window_stats(brief=True)``) is the full one bit for bit but for the figures it leaves out
(NaN): the TBT mean, the end-to-end / TPOT / queueing-delay percentiles and every tenant's latency
percentiles (checked on the same windows: brief without reset, then the full readout with reset,
across tenants, replicas, speculation on and off, a knob change). ``Cluster.skip_tenant_tbt``
gives the same run (results, random streams, window statistics) but the tenants' ``tbt_s``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from inferencegym.sim import Cluster

from sim_util import clone, results_equal, same_bits, tenant_mix

LEFT_OUT = ("tbt_mean_s", "e2e_s", "tpot_s", "queueing_delay_s")
"""Cluster-level figures a brief readout does not compute."""
TENANT_LEFT_OUT = ("ttft_s", "tbt_s", "tpot_s", "e2e_s")
"""Per-tenant figures a brief readout does not compute."""


def _all_nan(x) -> bool:
    return all(v != v for v in x.values()) if isinstance(x, dict) else x != x


@pytest.mark.parametrize("tenants,replicas,spec,seed", [
    (3, 2, 3, 1),   # speculating tenant mix over two replicas (the adversarial task's shape)
    (3, 1, 2, 2),   # one replica: its recorders read in place
    (1, 1, 0, 3),   # one tenant, no speculation (arithmetic-run records)
    (2, 3, 0, 4),
])
def test_brief_readout_is_the_full_one_without_the_left_out_figures(tenants, replicas, spec, seed):
    cfg, reqs = tenant_mix(tenants, replicas, spec, seed)
    c = Cluster(cfg, np.random.default_rng(seed), check_invariants=True)
    c.submit(reqs)
    t = 0.0
    windows = computed = 0
    while c.n_completed + c.n_rejected < c.n_submitted:
        t += 0.7
        c.run_until(t)
        if round(t / 0.7) == 4:
            c.apply_replica_config(None, speculation_depth=max(spec - 1, 0), batch_cap=16)
        brief = dataclasses.asdict(c.window_stats(reset=False, brief=True))
        full = dataclasses.asdict(c.window_stats(reset=True))
        windows += 1
        for k, v in full.items():
            if k in LEFT_OUT:
                assert _all_nan(brief[k]), k
                computed += not _all_nan(v)
            elif k == "tenants":
                assert v.keys() == brief[k].keys()
                for name, tv in v.items():
                    for kk, x in tv.items():
                        if kk in TENANT_LEFT_OUT:
                            assert _all_nan(brief[k][name][kk]), (name, kk)
                        else:
                            assert same_bits(brief[k][name][kk], x), (name, kk)
            else:
                assert same_bits(brief[k], v), k
    assert windows > 5 and computed > 0  # (the full readout had those figures to leave out)


@pytest.mark.parametrize("replicas,spec,seed", [(2, 3, 5), (1, 2, 6), (2, 0, 7)])
def test_skipping_tenant_tbt_changes_nothing_but_the_tenants_tbt(replicas, spec, seed):
    """``Cluster.skip_tenant_tbt`` (what ``LLMServeEnv`` calls): the same per-request results, random
    streams and window statistics as a cluster that records them, but every tenant's ``tbt_s`` NaN."""
    cfg, reqs = tenant_mix(3, replicas, spec, seed)
    runs = []
    for skip in (False, True):
        c = Cluster(cfg, np.random.default_rng(seed), check_invariants=True)
        if skip:
            c.skip_tenant_tbt()
        c.submit(clone(reqs))
        stats = []
        t = 0.0
        while c.n_completed + c.n_rejected < c.n_submitted:
            t += 0.7
            c.run_until(t)
            stats.append(dataclasses.asdict(c.window_stats(reset=True)))
        runs.append((c, stats))
    (full, fs), (skipped, ss) = runs
    assert results_equal(full.results(), skipped.results())
    for x, y in zip(full.replicas, skipped.replicas):
        assert x.rng.bit_generator.state == y.rng.bit_generator.state and y.win.ttbt is None
    assert len(fs) == len(ss) > 5
    recorded = 0
    for a, b in zip(fs, ss):
        for name in a["tenants"]:
            assert _all_nan(b["tenants"][name]["tbt_s"])
            recorded += not _all_nan(a["tenants"][name]["tbt_s"])
            a["tenants"][name]["tbt_s"] = b["tenants"][name]["tbt_s"]
        assert same_bits(a, b)
    assert recorded > 0


def test_a_fresh_replica_keeps_the_slots_recording_modes():
    """A replaced replica (a new node in the same slot) records as its predecessor did: no tenant TBT
    after ``skip_tenant_tbt``, merged records after ``percentiles_only_tbt``."""
    from inferencegym.sim.fleet_ops import fresh_replica

    cfg, _ = tenant_mix(3, 2, 2, 8)
    for skip in (False, True):
        c = Cluster(cfg, np.random.default_rng(8))
        if skip:
            c.skip_tenant_tbt()
            c.percentiles_only_tbt()
        fresh_replica(c, 1, np.random.default_rng(9))
        new, kept = c.replicas[1].win, c.replicas[0].win
        assert (new.ttbt is None, new.merge_tbt) == (kept.ttbt is None, kept.merge_tbt) == (skip, skip)
