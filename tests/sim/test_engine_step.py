"""The vLLM-V1 engine step (issue 23): asynchronous scheduling, the API-server front end and
CUDA-graph padding, each a field of the engine profile (``EngineParams``); other profiles unchanged."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from inferencegym.sim import Cluster, ClusterConfig, ReplicaConfig, Request
from inferencegym.sim.execution import ExecutionModel
from inferencegym.sim.execution_params import cudagraph_padded_tokens, engine_params


def test_vllm_v1_profile_carries_the_v1_engine_and_the_others_do_not():
    v1 = engine_params("vllm-v1")
    assert v1.async_scheduling and v1.cudagraph_max_tokens == 512 and 0 < v1.frontend_s < 0.02
    for name in ("vllm-2023", "kernel-only"):
        e = engine_params(name)
        assert not e.async_scheduling and e.frontend_s == 0.0 and e.cudagraph_max_tokens == 0


def test_cudagraph_capture_sizes_are_vllms_default_list():
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))
    for n in range(1, 513):
        assert cudagraph_padded_tokens(n, 512) == min(s for s in sizes if s >= n), n
    assert cudagraph_padded_tokens(600, 512) == 600  # beyond the largest graph: eager, unpadded
    assert cudagraph_padded_tokens(0, 512) == 0


def test_async_step_is_the_longer_of_kernels_and_cpu_and_stays_affine():
    m = ExecutionModel.from_preset(model="llama-2-7b", gpu="h100-80gb")
    k = m._replace(engine_overhead=False)  # its own kernels (kernel-only keeps H100's 2024 GEMMs)
    sync = m._replace(engine=m.engine.synchronous())
    e = m.engine
    cpu = e.fixed_s + e.per_seq_s * 32
    gpu = e.gpu_fixed_s + 32 * e.gpu_per_layer_s + e.sampler_s_per_logit * 32000 * 32  # never hidden
    a, b = m.decode_coeffs(32)
    ka, kb = k.decode_coeffs(32)
    assert a == pytest.approx(max(ka + gpu, cpu)) and b == kb  # 32 is a capture size: same kernels
    sa, _ = sync.decode_coeffs(32)
    assert sa == pytest.approx(ka + gpu + cpu)
    assert m.iteration_time_s((), 32, 32 * 700) == a + b * 32 * 700  # closed-form runs stay exact
    # an engine whose CPU work outlasts the kernels is CPU-bound
    slow = m._replace(engine=dataclasses.replace(m.engine, fixed_s=1.0))
    assert slow.iteration_time_s([(128, 0)], 4, 4000) == pytest.approx(1.0 + m.engine.per_seq_s * 5)


def _steady(profile: str, n: int = 400, seed: int = 0):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / 6.0, n))
    reqs = [Request(req_id=i, arrival_s=float(a), prompt_tokens=64, output_tokens=200) for i, a in enumerate(t)]
    rc = ReplicaConfig(model="llama-2-7b", gpu="h100-80gb", scheduler="sarathi", chunk_size=2048,
                       engine_profile=profile)
    cl = Cluster(ClusterConfig(replica=rc), rng=np.random.default_rng(seed))
    cl.submit(reqs)
    cl.drain()
    return cl, reqs


def test_async_scheduling_delays_the_first_token_by_one_step_under_load():
    """vLLM V1: a request that arrives while step k runs first runs in step k+2 (k+1 was fixed when
    k started); a synchronous engine runs it in k+1. TPOT is unchanged; TTFT grows by ~one step."""
    cl, reqs = _steady("vllm-v1")
    rep = cl.replicas[0]
    m = rep.model
    fe = m.frontend_s
    ttft = np.mean([r.ttft_s for r in reqs]) - fe
    tpot = np.mean([r.tpot_s for r in reqs])
    # the same engine scheduling synchronously
    sm = m._replace(engine=m.engine.synchronous())
    sync_cl = Cluster(ClusterConfig(replica=rep.cfg), rng=np.random.default_rng(0))
    for x in sync_cl.replicas:
        x._set_config(x.cfg, sm)
    reqs2 = [Request(req_id=r.req_id, arrival_s=r.arrival_s, prompt_tokens=64, output_tokens=200) for r in reqs]
    sync_cl.submit(reqs2)
    sync_cl.drain()
    ttft_sync = np.mean([r.ttft_s for r in reqs2]) - sm.frontend_s
    tpot_sync = np.mean([r.tpot_s for r in reqs2])
    step = tpot  # a decode step (the async engine's CPU work is hidden, the synchronous one's is not)
    assert tpot < tpot_sync
    assert 0.6 * step < ttft - (ttft_sync - (tpot_sync - tpot)) < 1.4 * step


def test_an_idle_engine_takes_a_request_at_once():
    m = ExecutionModel.from_preset(model="llama-2-7b", gpu="h100-80gb")
    r = Request(req_id=0, arrival_s=2.0, prompt_tokens=500, output_tokens=3)
    cl = Cluster(ClusterConfig(replica=ReplicaConfig(model="llama-2-7b", gpu="h100-80gb")),
                 rng=np.random.default_rng(0))
    cl.submit([r])
    cl.drain()
    assert r.first_scheduled_s == 2.0
    assert r.ttft_s == pytest.approx(m.prefill_time_s(500) + m.frontend_s, rel=1e-12)
    # the front end is in TTFT and E2E, not in the gaps between tokens
    assert r.e2e_s - r.ttft_s == pytest.approx(r.tbt_sum_s, rel=1e-12)


def test_other_profiles_schedule_synchronously():
    for prof in ("vllm-2023", "kernel-only"):
        cl, reqs = _steady(prof, n=100)
        rep = cl.replicas[0]
        assert not rep.async_sched and rep.frontend_s == 0.0
        # a synchronous engine admits an arrival at the next iteration boundary
        assert all(r.first_scheduled_s - r.arrival_s < 0.05 for r in reqs)


def test_calibration_error_reports_served_latency_bands():
    e = ExecutionModel.from_preset(model="llama-3-70b", gpu="h200-141gb", tensor_parallel=2).calibration_error()
    s = e["serving"]
    for k in ("ttft", "tpot", "e2e"):
        # within the goals for measured V1 serving (TTFT 20 %, TPOT 15 %); the TTFT max is
        # DigitalOcean's 70B FP8 H200 point at 1 req/s (+15 %, docs/bench/fidelity.md, fifth session)
        assert 0 < s[k]["mape_pct"] <= s[k]["max_ape_pct"] <= (20.0 if k == "ttft" else 15.0) and s[k]["n"] >= 5, \
            (k, s[k])
        assert s[k]["mape_pct"] <= 10.0, (k, s[k])
    v0 = ExecutionModel.from_preset(engine_profile="vllm-v0").calibration_error()["serving"]
    # V0's multi-step wait and in-process API server are modelled, but its 70B multi-step rows still
    # miss by a third (docs/bench/fidelity.md): its band stays well wider than V1's
    assert v0["ttft"]["mape_pct"] > 1.5 * s["ttft"]["mape_pct"]  # 13.3 vs 7.2 % (was 13.3 vs 5.6)
    assert ExecutionModel.from_preset(engine_profile="kernel-only").calibration_error()["serving"] is None


def test_serve_env_reset_info_carries_the_bands():
    from inferencegym.envs.serve_env import LLMServeEnv

    env = LLMServeEnv("static_workload", episode_windows=3)
    _, info = env.reset(seed=0)
    ce = info["calibration_error"]
    assert ce["engine_profile"] == "vllm-v1" and ce["serving"]["ttft"]["max_ape_pct"] > 0
