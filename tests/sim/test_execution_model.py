"""Execution-time model: API contract, presets, consistency and physical sanity."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from inferencegym.sim.execution import ExecutionModel
from inferencegym.sim.execution_params import load_calibration
from inferencegym.sim.presets import get_gpu, get_model, list_gpus, list_models

TARGETS = ["llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b"]


def fits(model: str, gpu: str, tp: int) -> bool:
    try:
        ExecutionModel.from_preset(model=model, gpu=gpu, tensor_parallel=tp)
    except ValueError:
        return False
    return True


def test_public_api_exact_names():
    m = ExecutionModel.from_preset(model="llama-2-70b", gpu="h100-80gb", tensor_parallel=4,
                                   quantization="fp16")
    p = m.prefill_time_s(prompt_tokens=2048)
    d = m.decode_step_time_s(batch_size=16, context_tokens=1024)
    assert 0.0 < d < p < 5.0
    it = m.iteration_time_s(prefill_chunks=[(512, 0), (256, 1024)], decode_batch=8,
                            decode_context_tokens=8000, speculation_depth=0)
    assert it > m.iteration_time_s((), 8, 8000, 0)
    a, b = m.decode_coeffs(decode_batch=16, speculation_depth=0)
    assert a > 0 and b > 0
    assert m.gpu_count == 4
    assert m.gpu_hour_usd == pytest.approx(4 * get_gpu("h100-80gb").gpu_hour_usd)
    assert m.quality_delta == 0.0
    assert isinstance(m.kv_capacity_tokens(kv_budget_fraction=0.5), int)
    assert m.kv_transfer_time_s(1000) > 0
    assert m.with_quantization("int4").quantization.name == "int4"
    json.dumps(m.to_dict())


def test_all_target_presets_have_public_config_shapes():
    # Public configs (Hugging Face): total parameter counts within 3% of the advertised sizes.
    sizes = {"llama-2-7b": 6.74e9, "llama-2-13b": 13.0e9, "llama-2-70b": 69.0e9,
             "llama-3-8b": 8.03e9, "llama-3-70b": 70.6e9, "tinyllama-1.1b": 1.1e9,
             "llama-3.2-1b": 1.24e9, "llama-3.2-3b": 3.21e9}
    for name, n in sizes.items():
        assert get_model(name).num_params == pytest.approx(n, rel=0.03), name


@pytest.mark.parametrize("kind,call", [
    ("model", lambda: ExecutionModel.from_preset(model="gpt-5", gpu="a100-80gb")),
    ("gpu", lambda: ExecutionModel.from_preset(model="llama-2-7b", gpu="tpu-v5")),
    ("quantization", lambda: ExecutionModel.from_preset(model="llama-2-7b", quantization="fp6")),
])
def test_unknown_names_list_valid_ones(kind, call):
    with pytest.raises(ValueError, match=rf"unknown {kind} .*valid: "):
        call()


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="tensor_parallel must be one of"):
        ExecutionModel.from_preset(model="llama-2-7b", tensor_parallel=3)
    with pytest.raises(ValueError, match="exceeds .*a100-80gb.*larger tensor_parallel"):
        ExecutionModel.from_preset(model="llama-2-70b", gpu="a100-80gb", tensor_parallel=1)
    m = ExecutionModel.from_preset()
    with pytest.raises(ValueError):
        m.prefill_time_s(0)
    with pytest.raises(ValueError):
        m.kv_capacity_tokens(1.5)
    with pytest.raises(ValueError):
        m.kv_transfer_time_s(10, link_gbytes_per_s=0)
    nodraft = ExecutionModel.from_preset(draft_model=None)
    with pytest.raises(ValueError, match="draft"):
        nodraft.decode_coeffs(4, 2)


def test_every_gpu_and_model_combination_builds_or_says_why():
    built = 0
    for g in list_gpus():
        for mdl in TARGETS:
            for tp in (1, 2, 4, 8):
                if fits(mdl, g, tp):
                    m = ExecutionModel.from_preset(model=mdl, gpu=g, tensor_parallel=tp)
                    assert m.kv_capacity_tokens() > 0
                    assert m.calibrated == get_gpu(g).calibrated
                    built += 1
    assert built >= 60


@pytest.mark.parametrize("model,gpu,tp", [("llama-2-7b", "a100-80gb", 1),
                                          ("llama-3-70b", "h100-80gb", 8),
                                          ("llama-2-13b", "l40s-48gb", 2)])
@pytest.mark.parametrize("k", [0, 1, 4])
def test_decode_coeffs_equal_iteration_time_exactly(model, gpu, tp, k):
    m = ExecutionModel.from_preset(model=model, gpu=gpu, tensor_parallel=tp)
    rng = np.random.default_rng(0)
    for B in (1, 3, 64, 200):
        a, b = m.decode_coeffs(B, k)
        for S in rng.integers(0, 500_000, size=20).tolist() + [0]:
            assert m.iteration_time_s((), B, S, k) == a + b * S
        # memoised: same tuple object
        assert m.decode_coeffs(B, k) is m.decode_coeffs(B, k)
    assert m.decode_step_time_s(8, 1000) == pytest.approx(sum(m.decode_coeffs(8, 0)) - m.decode_coeffs(8, 0)[1]
                                                          + m.decode_coeffs(8, 0)[1] * 8000)


def test_monotone_in_batch_context_and_prompt():
    m = ExecutionModel.from_preset(model="llama-3-8b", gpu="a100-80gb")
    prompts = [1, 16, 128, 512, 1024, 2048, 4096, 8192]
    pf = [m.prefill_time_s(p) for p in prompts]
    assert all(x < y for x, y in zip(pf, pf[1:]))
    for ctx in (16, 1024):
        dec = [m.decode_step_time_s(b, ctx) for b in (1, 2, 8, 32, 128, 256)]
        assert all(x < y for x, y in zip(dec, dec[1:]))
    for b in (1, 32):
        dec = [m.decode_step_time_s(b, c) for c in (0, 128, 1024, 4096)]
        assert all(x < y for x, y in zip(dec, dec[1:]))
    # a chunk with more cached context costs more attention
    assert m.iteration_time_s([(512, 3000)], 0, 0) > m.iteration_time_s([(512, 0)], 0, 0)
    # adding a prefill chunk to a decode batch costs time (generation stall)
    assert m.iteration_time_s([(2048, 0)], 16, 16_000) > m.iteration_time_s((), 16, 16_000) + 0.05


def test_decode_memory_bound_small_batch_compute_bound_large():
    m = ExecutionModel.from_preset(model="llama-2-7b", gpu="a100-80gb", engine_overhead=False)
    # memory-bound: 8x the sequences at tiny context cost < 15% more (weights read once)
    assert m.decode_step_time_s(8, 16) < 1.15 * m.decode_step_time_s(1, 16)
    # compute-bound: token-count-dependent part scales ~linearly at large batches
    t2k, t4k = m._token_time(2048), m._token_time(4096)
    assert 1.8 < t4k / t2k < 2.1
    t1, t8 = m._token_time(1), m._token_time(8)
    assert t8 / t1 < 1.1


def test_tensor_parallel_scaling_is_sensible():
    # the "TP8 no faster than TP4" fact is SplitwiseSim's (2023 engines): pin that profile
    pf = {tp: ExecutionModel.from_preset(model="llama-2-70b", gpu="a100-80gb", tensor_parallel=tp,
                                         engine_profile="vllm-2023")
          for tp in (2, 4, 8)}
    # prefill (compute-bound) speeds up with TP, sub-linearly (all-reduce)
    t = {tp: m.prefill_time_s(4096) for tp, m in pf.items()}
    assert t[8] < t[4] < t[2]
    assert t[2] / t[8] < 4.0
    # decode at batch 1: TP8 is not much faster than TP4 (SplitwiseSim: 45.0 vs 44.5 ms)
    d = {tp: m.decode_step_time_s(1, 600) for tp, m in pf.items()}
    assert d[8] > 0.8 * d[4]
    assert d[4] < d[2]
    # weights and KV per GPU split by TP
    assert pf[4].weight_bytes_per_gpu == pytest.approx(pf[2].weight_bytes_per_gpu / 2, rel=1e-3)  # norms replicated
    assert pf[4].kv_bytes_per_token == pytest.approx(pf[2].kv_bytes_per_token / 2, rel=1e-9)


def test_kv_sizes_and_capacity():
    m = ExecutionModel.from_preset(model="llama-2-7b", gpu="a100-80gb")
    # Llama-2-7B: 32 layers x 2 (K,V) x 4096 x 2 bytes = 512 KiB per token
    assert m.kv_bytes_per_token == 32 * 2 * 4096 * 2
    g = ExecutionModel.from_preset(model="llama-3-8b", gpu="a100-80gb")
    assert g.kv_bytes_per_token == 32 * 2 * 8 * 128 * 2  # GQA: 8 KV heads
    assert 12.5e9 < m.weight_bytes_per_gpu < 14e9
    cap = m.kv_capacity_tokens()
    mem = m.memory  # vLLM's rule: utilisation x memory - weights - profiling peak - non-torch
    expected = (m.gpu.memory_bytes * 0.9 - m.weight_bytes_per_gpu - mem.activation_peak_bytes(256)
                - mem.non_torch_bytes) / m.kv_bytes_per_token
    assert cap == math.floor(expected)
    assert m.kv_capacity_tokens(0.5) == pytest.approx(cap / 2, abs=1)
    small = ExecutionModel.from_preset(model="llama-2-7b", gpu="a10g-24gb")
    assert small.kv_capacity_tokens() < cap


def test_kv_transfer_time():
    m = ExecutionModel.from_preset(model="llama-2-70b", gpu="h100-80gb", tensor_parallel=4)
    t1, t2 = m.kv_transfer_time_s(1000), m.kv_transfer_time_s(2000)
    assert t2 > t1 > 0
    assert (t2 - t1) == pytest.approx(1000 * m.kv_bytes_per_token / (m.gpu.inter_node_gbytes_per_s * 1e9))
    assert m.kv_transfer_time_s(1000, link_gbytes_per_s=400) < t1
    assert m.kv_transfer_time_s(0) == 0.0


def test_prices_and_overrides():
    a = ExecutionModel.from_preset(model="llama-2-70b", gpu="a100-80gb", tensor_parallel=4)
    h = ExecutionModel.from_preset(model="llama-2-70b", gpu="h100-80gb", tensor_parallel=4)
    assert h.gpu_hour_usd > a.gpu_hour_usd > 0
    o = ExecutionModel.from_preset(model="llama-2-7b", gpu="a100-80gb", tensor_parallel=2, gpu_hour_usd=3.0)
    assert o.gpu_hour_usd == 6.0
    assert o.with_quantization("int8").gpu_hour_usd == 6.0


def test_calibration_loaded_once_and_used():
    ExecutionModel.from_preset()
    ExecutionModel.from_preset(model="llama-3-8b", gpu="h100-80gb")
    assert load_calibration.cache_info().misses <= 1
    cal = load_calibration()
    assert set(cal["gpus"]) == {"a100-80gb", "h100-80gb", "h200-141gb"}
    m = ExecutionModel.from_preset(gpu="h100-80gb")
    assert m.kernel.gemm_eff_compute == cal["gpus"]["h100-80gb"]["gemm_eff_compute"]
    assert m.engine_profile == "vllm-v1"
    assert m.engine.per_seq_s == cal["engines"]["vllm-v1"]["per_seq_s"]
    m23 = ExecutionModel.from_preset(gpu="h100-80gb", engine_profile="vllm-2023")
    assert m23.engine.per_seq_s == cal["engines"]["vllm-2023"]["per_seq_s"]


def test_mixed_iteration_is_order_independent_and_kernel_only_is_lower():
    m = ExecutionModel.from_preset(model="llama-2-13b", gpu="h100-80gb", tensor_parallel=2)
    c = [(512, 0), (128, 2000), (64, 64)]
    assert m.iteration_time_s(c, 10, 5000) == pytest.approx(m.iteration_time_s(c[::-1], 10, 5000))
    k = m._replace(engine_overhead=False)  # its own kernels (kernel-only keeps H100's 2024 GEMMs)
    # a synchronous engine pays its CPU work on top of the kernels (the asynchronous vllm-v1 hides
    # it, and its own all-reduce kernel can make it faster than kernel-only's NCCL figures)
    sync = m._replace(engine=m.engine.synchronous())
    assert k.iteration_time_s(c, 10, 5000) < sync.iteration_time_s(c, 10, 5000)
