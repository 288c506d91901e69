"""Published relationships, checked on the simulator itself (Orca/vLLM, Sarathi-Serve, vLLM preemption,
speculative decoding, quantization, Splitwise/DistServe, priority scheduling)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from inferencegym.sim import Cluster, Request, TenantSpec
from inferencegym.sim.execution_spec import expected_tokens_per_step

from sim_util import cfg, clone, poisson_requests, run


def _mixed_with_mega_prompts(seed=0, duration_s=60.0):
    # one 3.5-4k-token prompt a second: its generation stall hits every running sequence, > 1 % of
    # all gaps (at 0.5 a second, today's shorter decode steps leave the stalls just under p99)
    rng = np.random.default_rng(seed)
    base = poisson_requests(rng, rate=4.0, duration_s=duration_s, prompt=(128, 512), output=(128, 512))
    mega = poisson_requests(rng, rate=1.0, duration_s=duration_s, prompt=(3500, 4000), output=(8, 32),
                            first_id=100_000)
    return sorted(base + mega, key=lambda r: r.arrival_s)


def test_iteration_level_batching_doubles_throughput_at_same_p99_ttft_budget():
    """Orca / vLLM: iteration-level batching sustains >= 2x the throughput of request-level (static)
    batching under the same p99 TTFT budget."""
    budget_s = 10.0  # static batching qualifies at some rate (p99 TTFT 5.5 s even at 0.25 req/s)
    rates = [0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]  # vllm-v1 sustains more than 6 req/s
    best = {}
    for sched in ("vllm", "static"):
        best[sched] = 0.0
        for rate in rates:
            rng = np.random.default_rng(0)
            reqs = poisson_requests(rng, rate=rate, duration_s=120.0, prompt=(64, 1024), output=(16, 512))
            ws = run(cfg(scheduler=sched), reqs).run_stats()
            if ws.ttft_s["p99"] <= budget_s:
                best[sched] = max(best[sched], ws.throughput_req_s)
    assert best["static"] > 0  # the comparison is not against zero
    assert best["vllm"] >= 2.0 * best["static"], best


def test_chunked_prefill_cuts_p99_tbt_under_mega_prompts():
    """Sarathi-Serve: chunked prefill bounds the generation stall of long prompts (>= 3x lower p99 TBT)."""
    reqs = _mixed_with_mega_prompts()
    v = run(cfg(scheduler="vllm"), clone(reqs)).run_stats()
    s = run(cfg(scheduler="sarathi", chunk_size=512), clone(reqs)).run_stats()
    assert v.tbt_s["p99"] >= 3.0 * s.tbt_s["p99"], (v.tbt_s, s.tbt_s)


def test_unchunked_long_prompt_stalls_every_running_decode():
    m_cl = Cluster(cfg(scheduler="vllm"), np.random.default_rng(0))
    short = [Request(req_id=i, arrival_s=0.01 * i, prompt_tokens=100, output_tokens=400) for i in range(4)]
    long = Request(req_id=99, arrival_s=2.0, prompt_tokens=4000, output_tokens=4)
    m_cl.submit(short + [long])
    m_cl.drain()
    stall = m_cl.base_model.prefill_time_s(4000)
    for r in short:  # each running decode waited the whole 4k-token prefill between two tokens
        assert r.tbt_max_s >= stall * (1 - 1e-9)  # equal in exact arithmetic: a rounding tolerance
    c_cl = Cluster(cfg(scheduler="sarathi", chunk_size=256), np.random.default_rng(0))
    short2 = clone(short)
    c_cl.submit(short2 + clone([long]))
    c_cl.drain()
    assert max(r.tbt_max_s for r in short2) < stall / 3


def test_memory_pressure_causes_preemptions_that_show_in_latency():
    rng = np.random.default_rng(1)
    reqs = poisson_requests(rng, rate=6.0, duration_s=40.0, prompt=(256, 1024), output=(128, 512))
    roomy = run(cfg(kv_budget_fraction=1.0), clone(reqs))
    tight = run(cfg(kv_budget_fraction=0.06), clone(reqs))
    rr, rt = roomy.results(), tight.results()
    assert rr["preemptions"].sum() == 0
    assert rt["preemptions"].sum() > 10
    assert not rt["rejected"].any()
    # a preempted request waits at least its recompute (a prefill of prompt + generated tokens)
    m = tight.base_model
    pre = [r for r in tight.requests if r.preemptions > 0]
    assert all(r.tbt_max_s >= m.prefill_time_s(r.prompt_tokens) * (1 - 1e-9) for r in pre)
    assert np.percentile(rt["e2e_s"], 99) > 1.5 * np.percentile(rr["e2e_s"], 99)
    assert tight.run_stats().kv_occupancy_mean > roomy.run_stats().kv_occupancy_mean


# ----------------------------------------------------------------------------- issue 4
def _lone_request_tpot(k: int, alpha: float, seed: int = 0) -> tuple[float, float]:
    r = Request(req_id=0, arrival_s=0.0, prompt_tokens=512, output_tokens=1500)
    cl = run(cfg(speculation_depth=k, spec_acceptance=alpha), [r], seed=seed)
    return r.tpot_s, cl.run_stats().spec_acceptance_rate


def test_speculative_decoding_speeds_up_batch_one_and_reports_acceptance():
    """At batch 1 the simulated speed-up is the model's: E[tokens/step] / (spec step / plain step).
    (The >= 1.8x size of the effect is the cost model's property, tested in test_techniques_cost.py.)"""
    base, _ = _lone_request_tpot(0, 0.8)
    spec, acc = _lone_request_tpot(4, 0.8)
    m = run(cfg(), [Request(req_id=0, arrival_s=0.0, prompt_tokens=8, output_tokens=1)]).base_model
    ctx = 512 + 750  # mid-generation context
    want_speedup = expected_tokens_per_step(0.8, 4) / (
        m.speculative_step_time_s(1, ctx, 4) / m.decode_step_time_s(1, ctx))
    assert base / spec > 1.0
    assert base / spec == pytest.approx(want_speedup, rel=0.06), (base / spec, want_speedup)
    # measured acceptance = accepted / proposed draft tokens; E[accepted] = sum_{i=1..k} alpha^i
    want = sum(0.8**i for i in range(1, 5)) / 4
    assert acc == pytest.approx(want, abs=0.04)
    assert expected_tokens_per_step(0.8, 4) == pytest.approx(1 + 4 * want)


def test_speculative_decoding_loses_at_large_batch():
    # The 2023 relationship (per-sequence engine overhead paid by every draft pass): pinned to the
    # engine profile it was measured with. With vllm-v1 at batch 128 and ~450-token contexts the KV
    # read dominates and verification amortises it over ~3.4 tokens, so speculation wins there
    # (MagicDec, Chen et al. 2024, reports the same for long contexts); checked below.
    reqs = [Request(req_id=i, arrival_s=0.0, prompt_tokens=256, output_tokens=400) for i in range(128)]
    t0 = run(cfg(batch_cap=128, engine_profile="vllm-2023"), clone(reqs)).now_s
    t4 = run(cfg(batch_cap=128, speculation_depth=4, spec_acceptance=0.8, engine_profile="vllm-2023"),
             clone(reqs)).now_s
    assert t4 > t0, (t0, t4)
    # vllm-v1: short contexts (weights dominate) keep the 2023 relationship
    short = [Request(req_id=i, arrival_s=0.0, prompt_tokens=16, output_tokens=48) for i in range(128)]
    s0 = run(cfg(batch_cap=128), clone(short)).now_s
    s4 = run(cfg(batch_cap=128, speculation_depth=4, spec_acceptance=0.8), clone(short)).now_s
    assert s4 > s0, (s0, s4)


def test_tenant_acceptance_rate_overrides_replica_default():
    ten = (TenantSpec(name="chat", spec_acceptance=0.9), TenantSpec(name="code", spec_acceptance=0.3))
    reqs = [Request(req_id=i, arrival_s=0.0, prompt_tokens=64, output_tokens=600, tenant=i % 2) for i in range(2)]
    run(cfg(speculation_depth=4, spec_acceptance=0.5, tenants=ten), reqs)
    assert reqs[0].tpot_s < 0.7 * reqs[1].tpot_s


def test_int4_quantization_speeds_decode_raises_kv_capacity_and_costs_quality():
    r16 = Request(req_id=0, arrival_s=0.0, prompt_tokens=128, output_tokens=300)
    r4 = clone([r16])[0]
    c16 = run(cfg(quantization="fp16"), [r16])
    c4 = run(cfg(quantization="int4"), [r4])
    m16, m4 = c16.base_model, c4.base_model
    want = m16.decode_step_time_s(1, 278) / m4.decode_step_time_s(1, 278)
    assert want > 1.5 and r16.tpot_s / r4.tpot_s == pytest.approx(want, rel=0.03)
    assert c4.replicas[0].kv.capacity_blocks > c16.replicas[0].kv.capacity_blocks
    q = {t: run(cfg(quantization=t), clone([r16])).run_stats().quality_delta for t in ("fp16", "int8", "int4")}
    assert q["int4"] > q["int8"] > q["fp16"] == 0.0


def test_quantization_switch_pauses_for_reload_and_keeps_kv_when_it_fits():
    r = Request(req_id=0, arrival_s=0.0, prompt_tokens=200, output_tokens=2000)
    cl = Cluster(cfg(), np.random.default_rng(0))
    cl.submit([r])
    cl.run_until(5.0)
    pauses = cl.apply_replica_config(quantization="int4")
    reload_s = pauses["0"]
    w = cl.base_model.weight_bytes_per_gpu / 25e9
    assert reload_s == pytest.approx(cl.models.model_for(dataclasses.replace(cl.config.replica, quantization="int4")).weight_bytes_per_gpu / 25e9)
    assert 0 < reload_s < w  # int4 weights are smaller than fp16 ones
    cl.drain()
    assert r.preemptions == 0 and r.done
    assert r.tbt_max_s >= reload_s * (1 - 1e-9)
    # back to fp16 with the cache nearly full (int4 holds more): in-flight requests get preempted
    reqs = [Request(req_id=i, arrival_s=0.0, prompt_tokens=1000, output_tokens=3000) for i in range(120)]
    cl2 = Cluster(cfg(quantization="int4", batch_cap=128), np.random.default_rng(0))
    cl2.submit(reqs)
    cl2.run_until(60.0)
    used_before = cl2.replicas[0].kv.used_blocks
    assert used_before > cl2.models.model_for(dataclasses.replace(cl2.config.replica, quantization="fp16")).kv_capacity_tokens(1.0) // 16
    cl2.apply_replica_config(quantization="fp16")
    cl2.drain()
    assert sum(r.preemptions for r in reqs) > 0 and all(r.done for r in reqs)


def test_disaggregation_cuts_decode_tbt_and_costs_ttft_by_the_transfer():
    rng = np.random.default_rng(3)
    base = poisson_requests(rng, rate=10.0, duration_s=60.0, prompt=(128, 512), output=(128, 512))
    mega = poisson_requests(rng, rate=2.0, duration_s=60.0, prompt=(3000, 4000), output=(8, 64),
                            first_id=100_000)
    reqs = sorted(base + mega, key=lambda r: r.arrival_s)
    colo = run(cfg(num_replicas=4, router="round_robin"), clone(reqs)).run_stats()
    dis_cl = run(cfg(num_replicas=4, router="round_robin", disaggregate=True, prefill_replicas=2), clone(reqs))
    dis = dis_cl.run_stats()
    assert dis.completions == colo.completions == len(reqs)
    assert colo.tbt_s["p99"] >= 2.0 * dis.tbt_s["p99"], (colo.tbt_s, dis.tbt_s)
    assert dis.cost_usd == pytest.approx(colo.cost_usd, rel=0.05)  # same GPUs: not free, not cheaper
    # an isolated request: TTFT grows by exactly the KV transfer time of its prompt
    lone = [Request(req_id=0, arrival_s=0.0, prompt_tokens=2000, output_tokens=20)]
    a = run(cfg(num_replicas=2), clone(lone)).requests[0]
    b_cl = run(cfg(num_replicas=2, disaggregate=True, prefill_replicas=1), clone(lone))
    b = b_cl.requests[0]
    xfer = b_cl.base_model.kv_transfer_time_s(2000)
    assert b.kv_transfer_s == pytest.approx(xfer)
    assert b.ttft_s - a.ttft_s == pytest.approx(xfer, rel=1e-9)
    assert b.prefill_replica_id == 0 and b.replica_id == 1


def test_disaggregation_switch_between_windows_keeps_every_request():
    rng = np.random.default_rng(5)
    reqs = poisson_requests(rng, rate=8.0, duration_s=40.0, prompt=(64, 2048), output=(16, 256))
    cl = Cluster(cfg(num_replicas=3), np.random.default_rng(0), check_invariants=True)
    cl.submit(reqs)
    for i, t in enumerate(np.arange(5.0, 45.0, 5.0)):
        cl.set_disaggregation(i % 2 == 0, prefill_replicas=1)
        cl.run_until(float(t))
    cl.drain()
    assert all(r.done for r in reqs)
    moved = [r for r in reqs if r.prefill_replica_id >= 0]
    assert moved and all(r.prefill_replica_id == 0 and r.replica_id != 0 for r in moved)


def test_priority_routing_helps_priority_tenant_at_best_efforts_expense():
    ten = (TenantSpec(name="best_effort", priority=0), TenantSpec(name="priority", priority=1))
    rng = np.random.default_rng(2)
    reqs = poisson_requests(rng, rate=7.0, duration_s=60.0, prompt=(256, 1024), output=(64, 256), tenants=2,
                            priority_tenant=1)
    off = run(cfg(tenants=ten, kv_budget_fraction=0.15), clone(reqs)).run_stats()
    on = run(cfg(tenants=ten, kv_budget_fraction=0.15, priority_routing=True), clone(reqs)).run_stats()
    p_off, p_on = off.tenants["priority"].ttft_s["p99"], on.tenants["priority"].ttft_s["p99"]
    b_off, b_on = off.tenants["best_effort"].ttft_s["p99"], on.tenants["best_effort"].ttft_s["p99"]
    assert p_on < 0.8 * p_off, (p_off, p_on)
    assert b_on > b_off, (b_off, b_on)
    assert on.tenants["priority"].slo_attainment >= off.tenants["priority"].slo_attainment
