"""GEMM rates of a quantization tier on a GPU: what a weight byte and a FLOP cost.

One job: turn a :class:`~inferencegym.sim.presets.QuantizationTier` and a GPU preset into the
per-GEMM coefficients the kernel model (``execution_kernels.py``) multiplies by shapes:

* dense weights: FP16/BF16, W8A8 (INT8 tensor cores, 1-byte activations), FP8 (FP8 tensor cores
  at the tier's efficiency), W4A16 (FP16 compute with the tier's dequantisation overhead);
* mixture-of-experts weights of an experts-only tier (MXFP4, gpt-oss): native FP4 operands with
  MXFP8 activations at the FP8 MMA rate where the GPU has FP4 tensor cores (``fp4_tflops``),
  otherwise upconverted to BF16 inside the kernel (W4A16, dequantisation on the CUDA cores:
  ``moe.dequant_weight_factor``). The dense weights of such a checkpoint stay FP16.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferencegym.sim.execution_params import KernelParams
from inferencegym.sim.moe import dequant_weight_factor
from inferencegym.sim.presets import FP8_COMPUTE_EFFICIENCY, GPUPreset, QuantizationTier, get_quantization

ACT_BYTES = 2.0
"""Bytes of one FP16/BF16 activation element."""


@dataclass(frozen=True, kw_only=True)
class GemmRates:
    """Per-element costs of a GEMM's operands under one weight format on one GPU."""

    weight_bytes: float
    """Bytes per weight parameter."""
    act_in_bytes: float
    """Bytes per input activation element (1 with 8-bit activations, else 2)."""
    inv_c: float
    """Seconds per FLOP: tier overhead / (achieved peak of the GEMM's tensor cores)."""
    inv_m: float
    """Seconds per byte moved: 1 / (bandwidth x the kernel's memory efficiency)."""
    weight_time_factor: float = 1.0
    """Weight-read time multiplier (in-kernel dequantisation slower than the read; 1 otherwise)."""


def dense_tier(quantization: QuantizationTier) -> QuantizationTier:
    """The tier of the dense (attention, shared) weights: FP16 under an experts-only tier."""
    return get_quantization("fp16") if quantization.experts_only else quantization


def dense_gemm_rates(q: QuantizationTier, gpu: GPUPreset, kernel: KernelParams) -> GemmRates:
    """Rates of the dense GEMMs at tier ``q`` (a dense tier, see :func:`dense_tier`)."""
    g, k = gpu, kernel
    peak_gemm = (g.fp8_tflops * q.compute_efficiency if q.fp8_compute
                 else g.int8_tops if q.int8_compute else g.fp16_tflops) * 1e12
    bw = g.mem_gbytes_per_s * 1e9
    return GemmRates(
        weight_bytes=q.weight_bytes_per_param,
        act_in_bytes=1.0 if (q.int8_compute or q.fp8_compute) else ACT_BYTES,
        inv_c=q.gemm_compute_overhead / (peak_gemm * k.gemm_eff_compute),
        inv_m=1.0 / (bw * k.gemm_eff_mem))


def expert_gemm_rates(qx: QuantizationTier, dense: GemmRates, gpu: GPUPreset,
                      kernel: KernelParams) -> GemmRates:
    """Rates of the expert GEMMs: the dense rates, or those of an experts-only tier (MXFP4)."""
    if not qx.experts_only:
        return dense
    g, k = gpu, kernel
    peak_fp16 = g.fp16_tflops * 1e12
    bw = g.mem_gbytes_per_s * 1e9
    if g.fp4_tflops > 0:  # native FP4 operands, MXFP8 activations: the FP8 MMA rate
        return GemmRates(weight_bytes=qx.weight_bytes_per_param, act_in_bytes=1.0,
                         inv_c=1.0 / (g.fp8_tflops * FP8_COMPUTE_EFFICIENCY * 1e12 * k.gemm_eff_compute),
                         inv_m=dense.inv_m)
    # upconverted to BF16 in the kernel (W4A16)
    return GemmRates(
        weight_bytes=qx.weight_bytes_per_param, act_in_bytes=dense.act_in_bytes,
        inv_c=qx.gemm_compute_overhead / (peak_fp16 * k.gemm_eff_compute), inv_m=dense.inv_m,
        weight_time_factor=dequant_weight_factor(
            instr_per_weight=qx.dequant_instr_per_weight, weight_bytes=qx.weight_bytes_per_param,
            achieved_bytes_per_s=bw * k.gemm_eff_mem, instr_per_s=g.cuda_core_tflops * 1e12 / 2.0))
