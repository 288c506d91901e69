"""Cost side of the serving techniques (issue 4) at the execution-model level:
speculative decoding, quantization tiers, prices and quality."""

from __future__ import annotations

import numpy as np
import pytest

from inferencegym.sim.execution import ExecutionModel
from inferencegym.sim.execution_spec import expected_tokens_per_step
from inferencegym.sim.presets import get_quantization, list_gpus, list_quantizations

ALPHA, K = 0.8, 4


def per_token_speedup(m: ExecutionModel, batch: int, context: int, alpha=ALPHA, k=K) -> float:
    """Tokens per second with speculation / without (expected accepted tokens per step)."""
    t0 = m.decode_step_time_s(batch, context)
    tk = m.speculative_step_time_s(batch, context, k)
    return expected_tokens_per_step(alpha, k) * t0 / tk


def test_expected_tokens_formula_and_monte_carlo():
    assert expected_tokens_per_step(0.8, 0) == 1.0
    assert expected_tokens_per_step(1.0, 4) == 5.0
    assert expected_tokens_per_step(0.0, 4) == 1.0
    assert expected_tokens_per_step(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)
    # Monte Carlo: accept each draft token with prob alpha until the first rejection (+1 bonus/fix)
    rng = np.random.default_rng(7)
    acc = rng.random((200_000, K)) < ALPHA
    first_reject = np.where(acc.all(axis=1), K, np.argmin(acc, axis=1))
    assert (first_reject + 1).mean() == pytest.approx(expected_tokens_per_step(ALPHA, K), rel=0.01)
    with pytest.raises(ValueError):
        expected_tokens_per_step(1.2, 3)


@pytest.mark.parametrize("model,gpu,tp", [("llama-2-70b", "a100-80gb", 4),
                                          ("llama-2-70b", "h100-80gb", 4),
                                          ("llama-3-70b", "h100-80gb", 8)])
def test_speculation_wins_at_batch_1(model, gpu, tp):
    m = ExecutionModel.from_preset(model=model, gpu=gpu, tensor_parallel=tp)
    s = per_token_speedup(m, 1, 1024)
    assert s >= 1.8
    assert s < expected_tokens_per_step(ALPHA, K)  # the draft and verification cost something


@pytest.mark.parametrize("model,gpu,tp", [("llama-2-70b", "a100-80gb", 4),
                                          ("llama-2-70b", "h100-80gb", 4),
                                          ("llama-3-70b", "h100-80gb", 8),
                                          ("llama-3-8b", "a100-80gb", 1)])
def test_speculation_loses_at_large_batch(model, gpu, tp):
    # figures of the 2023 calibration (engine overhead per sequence also paid by every draft pass)
    m = ExecutionModel.from_preset(model=model, gpu=gpu, tensor_parallel=tp, engine_profile="vllm-2023")
    ctx = 512
    assert 256 * ctx <= m.kv_capacity_tokens()  # a batch that really fits
    assert per_token_speedup(m, 256, ctx) < 1.0
    # today's engine (vllm-v1): at best break-even at batch 256, far below the batch-1 gain
    v1 = ExecutionModel.from_preset(model=model, gpu=gpu, tensor_parallel=tp)
    assert per_token_speedup(v1, 256, ctx) < 1.05
    assert per_token_speedup(v1, 256, ctx) < 0.6 * per_token_speedup(v1, 1, ctx)


def test_speculation_gain_shrinks_with_batch():
    m = ExecutionModel.from_preset(model="llama-2-70b", gpu="h100-80gb", tensor_parallel=4)
    s = [per_token_speedup(m, b, 512) for b in (1, 4, 16, 64, 256)]
    assert all(x > y for x, y in zip(s, s[1:]))


def test_verification_pass_is_compute_heavier():
    m = ExecutionModel.from_preset(model="llama-2-7b", gpu="a100-80gb", draft_model=None,
                                   engine_overhead=False)
    # at batch 1 verifying 5 tokens costs about as much as 1 (memory-bound) ...
    assert m._token_time(5) < 1.1 * m._token_time(1)
    # ... at batch 256 it costs several times as much (compute-bound)
    assert m._token_time(256 * 5) > 3.0 * m._token_time(256)


def test_draft_cost_counts():
    m = ExecutionModel.from_preset(model="llama-2-7b", gpu="a100-80gb")
    assert m.draft_model_name == "tinyllama-1.1b"
    t1 = m.speculative_step_time_s(1, 1024, 1)
    t4 = m.speculative_step_time_s(1, 1024, 4)
    t0 = m.decode_step_time_s(1, 1024)
    # at batch 1 verification is memory-bound (~free), so each extra draft token adds one draft pass
    assert t4 > t1 > t0
    assert (t4 - t1) / (t1 - t0) == pytest.approx(3.0, rel=0.1)
    # a 1.1B draft on a 7B target is relatively expensive: the gain is smaller than on a 70B target
    big = ExecutionModel.from_preset(model="llama-2-70b", gpu="a100-80gb", tensor_parallel=4)
    assert per_token_speedup(m, 1, 1024) < per_token_speedup(big, 1, 1024)


# ----------------------------------------------------------------------------- quantization
def test_int4_halves_decode_kernel_time_at_batch_1():
    """GPU time of a batch-1 decode step, for every single-GPU model/GPU preset that fits."""
    checked = 0
    for gpu in list_gpus():
        for model in ("llama-2-7b", "llama-2-13b", "llama-3-8b"):
            try:
                m = ExecutionModel.from_preset(model=model, gpu=gpu, engine_overhead=False)
            except ValueError:
                continue
            fp16 = m.decode_step_time_s(1, 1024)
            assert fp16 >= 2.0 * m.with_quantization("int4").decode_step_time_s(1, 1024), (model, gpu)
            checked += 1
    assert checked >= 10


def test_int4_halves_end_to_end_decode_step_at_batch_1():
    m = ExecutionModel.from_preset(model="llama-2-13b", gpu="a100-80gb")
    assert m.decode_step_time_s(1, 1024) >= 2.0 * m.with_quantization("int4").decode_step_time_s(1, 1024)


@pytest.mark.parametrize("model,gpu,tp", [("llama-2-7b", "a100-80gb", 1), ("llama-2-70b", "h100-80gb", 4)])
def test_quantization_tiers_order(model, gpu, tp):
    # the integer tiers against FP16 (FP8 needs Hopper, MXFP4 a MoE model: tests/sim/test_moe_fp8.py, test_mxfp4.py)
    m = {q: ExecutionModel.from_preset(model=model, gpu=gpu, tensor_parallel=tp, quantization=q)
         for q in list_quantizations() if q not in ("fp8", "mxfp4")}
    # memory: weights shrink, KV capacity grows
    assert m["fp16"].weight_bytes_per_gpu > m["int8"].weight_bytes_per_gpu > m["int4"].weight_bytes_per_gpu
    assert m["int4"].kv_capacity_tokens() > m["int8"].kv_capacity_tokens() > m["fp16"].kv_capacity_tokens()
    # KV cache stays FP16
    assert m["int4"].kv_bytes_per_token == m["fp16"].kv_bytes_per_token
    # decode at batch 1 (memory-bound): int4 < int8 < fp16
    d = {q: mm.decode_step_time_s(1, 1024) for q, mm in m.items()}
    assert d["int4"] < d["int8"] < d["fp16"]
    # prefill (compute-bound): W8A8 gains from INT8 tensor cores, W4A16 gains ~nothing
    p = {q: mm.prefill_time_s(4096) for q, mm in m.items()}
    assert p["fp16"] / p["int8"] >= 1.25
    assert 0.85 <= p["fp16"] / p["int4"] <= 1.1
    # large-batch decode: int4 gains little
    big = {q: mm.decode_step_time_s(256, 128) for q, mm in m.items()}
    assert big["fp16"] / big["int4"] < 1.3


def test_quality_order_and_switch():
    q = {name: get_quantization(name).quality_delta for name in list_quantizations()}
    assert q["fp16"] == 0.0
    assert q["int4"] > q["int8"] > q["fp16"]
    m = ExecutionModel.from_preset(model="llama-2-70b", gpu="h100-80gb", tensor_parallel=4)
    m4 = m.with_quantization("int4")
    assert m4 is not m and m.quality_delta == 0.0 and m4.quality_delta == q["int4"]
    assert m4.to_dict()["quantization"] == "int4"
    # the switch makes an otherwise infeasible deployment feasible
    with pytest.raises(ValueError):
        ExecutionModel.from_preset(model="llama-2-70b", gpu="h100-80gb", tensor_parallel=1)
    assert ExecutionModel.from_preset(model="llama-2-70b", gpu="h100-80gb", tensor_parallel=1,
                                      quantization="int4").kv_capacity_tokens() > 0


def test_cost_per_token_more_gpus_not_free():
    """At batch 1 more TP lowers latency a little but raises the price per token."""
    price_per_tok = {}
    for tp in (4, 8):  # SplitwiseSim's 2023 engines: TP8 barely faster than TP4 at batch 1
        m = ExecutionModel.from_preset(model="llama-2-70b", gpu="a100-80gb", tensor_parallel=tp,
                                       engine_profile="vllm-2023")
        price_per_tok[tp] = m.gpu_hour_usd / 3600 * m.decode_step_time_s(1, 1024)
    assert price_per_tok[8] > 1.5 * price_per_tok[4]
