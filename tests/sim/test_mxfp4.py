"""MXFP4 expert weights (gpt-oss): 4.25 bits per expert weight, BF16 elsewhere; on Hopper the weights
are upconverted to BF16 in the kernel (the weight-bound decode gains the bytes, pays the dequant),
on a GPU with FP4 tensor cores they feed the MMA directly."""

from dataclasses import replace

import pytest

from inferencegym.sim.execution import ExecutionModel
from inferencegym.sim.moe import dequant_weight_factor
from inferencegym.sim.presets import get_gpu, get_model, get_quantization


def _oss(quant: str = "mxfp4", **kw) -> ExecutionModel:
    return ExecutionModel.from_preset(model="gpt-oss-120b", gpu="h100-80gb", quantization=quant, **kw)


def _native_fp4(m: ExecutionModel) -> ExecutionModel:
    return m._replace(gpu=replace(get_gpu("h100-80gb"), name="h100-fp4", fp4_tflops=3958.0))


def test_mxfp4_is_4_25_bits_per_expert_weight_and_bf16_elsewhere():
    q = get_quantization("mxfp4")
    assert q.weight_bytes_per_param == pytest.approx(4.25 / 8)
    m = get_model("gpt-oss-120b")
    g = _native_fp4(_oss())  # FP4 tensor cores: the checkpoint's layout, no padding
    experts = m.moe_layers * m.num_experts * m.expert_params
    rest = m.num_params - experts  # attention, router, norms, embeddings, LM head: BF16
    assert g.weight_bytes_per_gpu == pytest.approx(experts * 4.25 / 8 + rest * 2.0, rel=0.01)
    assert 60e9 < g.weight_bytes_per_gpu < 68e9  # the 120b checkpoint is ~65 GB
    # the int4 stand-in quantised the attention too: mxfp4 holds more bytes, hence less KV
    assert _oss().weight_bytes_per_gpu > _oss("int4").weight_bytes_per_gpu
    assert _oss().kv_capacity_tokens() < _oss("int4").kv_capacity_tokens()


def test_hopper_holds_the_experts_in_marlin_s_padded_layout():
    """vLLM's Marlin MXFP4 MoE pads hidden 2880 -> 3072 and the expert width 2880 -> 2944; it logged
    65.97 GiB loading gpt-oss-120b on one H100 (vllm-project/vllm#23278)."""
    m = get_model("gpt-oss-120b")
    hopper, native = _oss(), _native_fp4(_oss())
    experts = m.moe_layers * m.num_experts * 3 * 3072 * 2944 * 4.25 / 8
    rest = m.num_params - m.moe_layers * m.num_experts * m.expert_params
    assert hopper.weight_bytes_per_gpu == pytest.approx(experts + rest * 2.0, rel=0.01)
    assert hopper.weight_bytes_per_gpu == pytest.approx(65.97 * 2**30, rel=0.01)
    assert hopper.kv_capacity_tokens() < 0.8 * native.kv_capacity_tokens()
    # the fused-MoE buffers of the largest batch are reserved ahead of the KV cache
    ws = 8192 * 4 * (2 * 2944 + 2944) * 2
    assert hopper.memory.forward_peak_bytes - native.memory.forward_peak_bytes == pytest.approx(
        ws - 8192 * 4 * (2 * 2880 + 2880) * 2)
    dense = ExecutionModel.from_preset(model="llama-3-8b", gpu="h100-80gb")
    assert dense.memory.forward_peak_bytes == pytest.approx(8192 * (4096 + 40 * 128 + 3 * 14336) * 2)


def test_mxfp4_is_refused_on_dense_models():
    with pytest.raises(ValueError, match="dense"):
        ExecutionModel.from_preset(model="llama-3-8b", gpu="h100-80gb", quantization="mxfp4")


def test_dequant_factor_is_the_non_overlapped_conversion_time():
    assert dequant_weight_factor(instr_per_weight=0.0, weight_bytes=0.5, achieved_bytes_per_s=3e12,
                                 instr_per_s=3e13) == 1.0
    # 2 instructions per weight, 6e12 weights/s from memory, 3e13 instructions/s: 1 + 12/30
    f = dequant_weight_factor(instr_per_weight=2.0, weight_bytes=0.5, achieved_bytes_per_s=3e12,
                              instr_per_s=3e13)
    assert f == pytest.approx(1.4)


def test_hopper_pays_the_dequant_where_fp4_tensor_cores_do_not():
    hopper = _oss()
    native = _native_fp4(hopper)
    # weight-bound decode (batch 1-8): the Hopper step is slower, by less than the dequant factor of
    # the experts' weight stream alone (attention, LM head and overheads are the same)
    for b in (1, 4, 8):
        ratio = hopper.decode_step_time_s(b, 400) / native.decode_step_time_s(b, 400)
        assert 1.05 < ratio < 1.45
    # compute-bound prefill: native runs the experts at the FP8 rate without the W4A16 overhead
    assert native.prefill_time_s(8192) < hopper.prefill_time_s(8192)


def test_mxfp4_weight_bound_decode_reads_fewer_bytes_than_bf16_would():
    g = _oss()
    one = g.decode_step_time_s(1, 100)
    # top-4 of 128 experts x 36 layers at 4.25 bits + the BF16 attention/LM head: ~1.0 GB per token;
    # at 3.35 TB/s that is ~0.3 ms of pure reads, so the step is dominated by fixed costs but stays
    # well under what BF16 experts (4x the expert bytes) would take
    assert one < 6e-3
    assert g.decode_step_time_s(256, 400) > 5 * one  # all 128 experts read at batch 256


def test_cli_config_accepts_mxfp4():
    from inferencegym.sim.config import QUANTIZATION_TIERS, ReplicaConfig

    assert "mxfp4" in QUANTIZATION_TIERS
    rc = ReplicaConfig(model="gpt-oss-120b", gpu="h100-80gb", quantization="mxfp4")
    assert rc.quantization == "mxfp4"


def test_triton_grouped_gemm_efficiency_reproduces_the_published_moe_layer():
    """vLLM's benchmark_moe.py on an H200 (BF16, 128 experts top-8, PR #44818): the compute-bound
    rows are the fit's input, within 15 %; the memory-bound middle is not fitted and holds too."""
    from inferencegym.sim.calibration.moe_fit import FIT_ROWS_H200_BF16, _gemma_moe, experts_time_us
    from inferencegym.sim.moe import MOE_KERNEL_COMPUTE_EFFICIENCY

    e = MOE_KERNEL_COMPUTE_EFFICIENCY["triton"]
    for n in (64, 256, 512, 1024, 2048, 4096):
        sim = experts_time_us(_gemma_moe(), "h200-141gb", "fp16", e, n)
        assert abs(sim / FIT_ROWS_H200_BF16[n] - 1) < 0.15, n
    # at dense-GEMM efficiency the 4,096-token layer would be ~40 % too fast
    assert experts_time_us(_gemma_moe(), "h200-141gb", "fp16", 1.0, 4096) < 0.65 * FIT_ROWS_H200_BF16[4096]


def test_moe_kernel_family_sets_the_expert_compute_efficiency():
    from inferencegym.sim.moe import moe_kernel_efficiency

    assert get_model("deepseek-v3").moe_kernel == "deepgemm"
    assert get_model("qwen3-30b-a3b").moe_kernel == "triton"
    assert moe_kernel_efficiency("deepgemm") == 1.0 > moe_kernel_efficiency("triton")
    with pytest.raises(ValueError, match="unknown moe_kernel"):
        moe_kernel_efficiency("cutlass9")
    q = ExecutionModel.from_preset(model="qwen3-30b-a3b", gpu="h100-80gb", engine_profile="kernel-only")
    fast = q._replace(model=replace(q.model, moe_kernel="deepgemm"))
    # prefill (compute-bound experts) pays the Triton efficiency; batch-1 decode (weight reads) does not
    assert q.prefill_time_s(8192) > 1.2 * fast.prefill_time_s(8192)
    assert q.decode_step_time_s(1, 100) == pytest.approx(fast.decode_step_time_s(1, 100), rel=0.02)


def test_moe_layer_fixed_time_is_fitted_on_the_one_token_layers_and_holds_at_eight():
    """Three published H100 MoE layers at 1 token (8-200 MB of weights): the BF16 one fits the
    layer's fixed time, the two FP8 ones the extra of the FP8 activation quantization; the 8-token
    rows and the gpt-oss-shaped layer at every batch are checks."""
    from inferencegym.sim.calibration.moe_fit import (
        CHECK_ROWS_H100_FP8,
        GPT_OSS_BF16_H100_TUNED,
        experts_time_us,
        fit_fixed,
        fixed_rows,
    )
    from inferencegym.sim.moe import MOE_FP8_ACT_QUANT_FIXED_S, MOE_KERNEL_COMPUTE_EFFICIENCY, MOE_LAYER_FIXED_S

    base, fp8 = fit_fixed()
    assert base == pytest.approx(MOE_LAYER_FIXED_S, abs=0.5e-6)
    assert fp8 == pytest.approx(MOE_FP8_ACT_QUANT_FIXED_S, abs=0.5e-6)
    e = MOE_KERNEL_COMPUTE_EFFICIENCY["triton"]
    for _label, m, g, q, us in fixed_rows():
        assert abs(experts_time_us(m, g, q, e, 1) / us - 1) < 0.2
        assert experts_time_us(m, g, q, e, 1, fixed_s=0.0) < 0.9 * us  # without it: 13-84 % short
    assert abs(experts_time_us("qwen3-30b-a3b", "h100-80gb", "fp8", e, 8) / CHECK_ROWS_H100_FP8[8] - 1) < 0.25
    for n, us in GPT_OSS_BF16_H100_TUNED.items():
        assert abs(experts_time_us("gpt-oss-120b", "h100-80gb", "fp16", e, n) / us - 1) < 0.1, n
