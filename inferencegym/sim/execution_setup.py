"""What a replica's execution model may be built with: argument checks and the GPU memory budget.

One job: decide whether a model, a GPU, a quantization tier and the parallel degrees make a
buildable replica (one clear message per refusal: :func:`check_model_args`). The GPU memory budget
(weights, the profiling run's peak, non-torch memory, the KV cache) is ``gpu_memory.py``'s.
"""

from __future__ import annotations

from inferencegym.sim.pipeline import PP_DEGREES
from inferencegym.sim.presets import GPUPreset, ModelPreset, QuantizationTier

VALID_TP = (1, 2, 4, 8)
VALID_EP = (1, 2, 4, 8, 16, 32, 64)
KV_CACHE_DTYPES = ("auto", "fp8")


def check_model_args(*, model: ModelPreset, gpu: GPUPreset, quantization: QuantizationTier,
                     tensor_parallel: int, expert_parallel: int, pipeline_parallel: int,
                     kv_cache_dtype: str, gpu_memory_utilization: float,
                     gpu_hour_usd: float | None) -> None:
    """Raise ValueError (what is wrong, what was given, how to fix) for an unbuildable replica."""
    quant = quantization
    if pipeline_parallel not in PP_DEGREES or pipeline_parallel > model.num_layers:
        raise ValueError(f"pipeline_parallel must be one of {PP_DEGREES} and at most the "
                         f"{model.num_layers} layers of {model.name}, got {pipeline_parallel!r}")
    if expert_parallel not in VALID_EP:
        raise ValueError(f"expert_parallel must be one of {VALID_EP}, got {expert_parallel!r}")
    if expert_parallel > 1 and not model.is_moe:
        raise ValueError(f"expert_parallel={expert_parallel} needs a mixture-of-experts model; "
                         f"{model.name} is dense (use tensor_parallel or more replicas)")
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype must be one of {KV_CACHE_DTYPES}, got {kv_cache_dtype!r}")
    if quant.experts_only and not model.is_moe:
        raise ValueError(f"quantization {quant.name!r} is the expert-weight format of "
                         f"mixture-of-experts checkpoints (gpt-oss); {model.name} is dense: use int4 "
                         f"(W4A16) or fp8")
    if quant.dequant_instr_per_weight > 0 and gpu.fp4_tflops <= 0 and gpu.cuda_core_tflops <= 0:
        raise ValueError(f"quantization {quant.name!r} on {gpu.name} needs the GPU's "
                         f"cuda_core_tflops (dequantisation rate) or fp4_tflops (native FP4); "
                         f"the preset gives neither: set one in the GPUPreset")
    if quant.fp8_compute and gpu.fp8_tflops <= 0:
        raise ValueError(f"quantization 'fp8' needs FP8 tensor cores (Hopper/Ada or later); "
                         f"{gpu.name} has none: use h100-80gb, h200-141gb or l40s-48gb, or int8")
    if tensor_parallel not in VALID_TP:
        raise ValueError(f"tensor_parallel must be one of {VALID_TP}, got {tensor_parallel!r}")
    if model.num_heads % tensor_parallel:
        raise ValueError(f"{model.name} has {model.num_heads} heads, not divisible by "
                         f"tensor_parallel={tensor_parallel}")
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization!r}")
    if gpu_hour_usd is not None and not gpu_hour_usd >= 0:
        raise ValueError(f"gpu_hour_usd must be >= 0 (USD per GPU-hour) or None for the preset "
                         f"price, got {gpu_hour_usd!r}")
