"""Knobs turned between windows (as an agent does): invariants and conservation must survive any sequence."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferencegym.sim import Cluster, TenantSpec

from sim_util import cfg, poisson_requests

knob = st.one_of(
    st.fixed_dictionaries({"quantization": st.sampled_from(["fp16", "int8", "int4"])}),
    st.fixed_dictionaries({"kv_budget_fraction": st.sampled_from([0.01, 0.03, 0.2, 1.0])}),
    st.fixed_dictionaries({"batch_cap": st.sampled_from([1, 8, 64])}),
    st.fixed_dictionaries({"scheduler": st.sampled_from(["vllm", "sarathi", "static"])}),
    st.fixed_dictionaries({"chunk_size": st.sampled_from([64, 512])}),
    st.fixed_dictionaries({"speculation_depth": st.sampled_from([0, 2, 5])}),
    st.fixed_dictionaries({"priority": st.booleans()}),
    st.fixed_dictionaries({"disagg": st.booleans()}),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), replicas=st.integers(2, 3),
       actions=st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 2)), knob), min_size=1, max_size=8),
       router=st.sampled_from(["round_robin", "least_kv_load", "clairvoyant"]))
def test_random_knob_sequences_keep_invariants(seed, replicas, actions, router):
    rng = np.random.default_rng(seed)
    ten = (TenantSpec(name="be"), TenantSpec(name="prio", priority=1, spec_acceptance=0.9))
    reqs = poisson_requests(rng, rate=15.0, duration_s=8.0, prompt=(1, 1200), output=(1, 200), tenants=2,
                            priority_tenant=1)
    cl = Cluster(cfg(num_replicas=replicas, router=router, tenants=ten, kv_budget_fraction=0.05),
                 np.random.default_rng(seed), check_invariants=True)
    cl.submit(reqs)
    t = 0.0
    for target, kn in actions:
        t += 1.0
        cl.run_until(t)
        if "priority" in kn:
            cl.set_priority_routing(kn["priority"])
        elif "disagg" in kn:
            cl.set_disaggregation(kn["disagg"], prefill_replicas=1)
        else:
            cl.apply_replica_config(replica=None if target is None else target % replicas, **kn)
        cl.check_invariants()
        ws = cl.window_stats(reset=True)
        assert 0.0 <= ws.kv_occupancy_mean <= 1.0 + 1e-9
    cl.drain()
    for rep in cl.replicas:
        assert rep.kv.used_blocks == 0 and not rep.running and not rep.queued()
    for r in reqs:
        assert (r.done and r.generated_tokens == r.output_tokens) != (r.rejected_reason is not None), r
    assert cl.n_completed + cl.n_rejected == len(reqs)


def test_shrinking_kv_rejects_requests_that_can_never_fit_instead_of_looping():
    from inferencegym.sim import Request

    big = Request(req_id=0, arrival_s=0.0, prompt_tokens=1000, output_tokens=3000)
    small = Request(req_id=1, arrival_s=0.0, prompt_tokens=100, output_tokens=100)
    cl = Cluster(cfg(), np.random.default_rng(0), check_invariants=True)
    cl.submit([big, small])
    cl.run_until(0.5)
    cl.apply_replica_config(kv_budget_fraction=0.02)  # ~2,300 tokens: big can never finish
    cl.drain()
    assert big.rejected_reason is not None and "KV blocks" in big.rejected_reason
    assert small.done


def test_switching_scheduler_mid_prefill_finishes_the_prompt():
    from inferencegym.sim import Request

    for to in ("vllm", "static"):
        reqs = [Request(req_id=0, arrival_s=0.0, prompt_tokens=100, output_tokens=500),
                Request(req_id=1, arrival_s=0.2, prompt_tokens=3000, output_tokens=20)]
        cl = Cluster(cfg(scheduler="sarathi", chunk_size=64), np.random.default_rng(0), check_invariants=True)
        cl.submit(reqs)
        cl.run_until(0.5)
        assert any(0 < r.prefilled_tokens < r.prefill_target for r in cl.replicas[0].running)
        cl.apply_replica_config(scheduler=to)
        cl.drain()
        assert all(r.done for r in reqs), to


def test_request_that_exactly_fits_finishes_with_speculation():
    """Speculative reservations never ask for more than a request's full length (no self-preemption loop)."""
    from inferencegym.sim import Request

    cl0 = Cluster(cfg(kv_budget_fraction=0.01, block_size=16), np.random.default_rng(0))
    cap_tokens = cl0.replicas[0].kv.capacity_blocks * 16
    r = Request(req_id=0, arrival_s=0.0, prompt_tokens=cap_tokens - 100, output_tokens=101)  # max KV = capacity
    cl = Cluster(cfg(kv_budget_fraction=0.01, speculation_depth=8, spec_acceptance=0.9), np.random.default_rng(0),
                 check_invariants=True)
    cl.submit([r])
    cl.drain(max_t_s=600.0)
    assert r.done and r.preemptions == 0
