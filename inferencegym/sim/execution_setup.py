"""What a replica's execution model may be built with: argument checks and the GPU memory budget.

One job: decide whether a model, a GPU, a quantization tier and the parallel degrees make a
buildable replica (one clear message per refusal: :func:`check_model_args`), and split one GPU's
memory between weights, the activation reserve and the KV cache (:func:`memory_budget`).
"""

from __future__ import annotations

from dataclasses import dataclass

from inferencegym.sim.execution_rates import ACT_BYTES
from inferencegym.sim.pipeline import PP_DEGREES
from inferencegym.sim.presets import GIB, GPUPreset, ModelPreset, QuantizationTier

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


@dataclass(frozen=True, kw_only=True)
class MemoryBudget:
    """One GPU's memory of a replica."""

    weight_bytes_per_gpu: float
    """Weights on the GPU (with pipeline stages: the largest stage's layers, embedding or LM head)."""
    kv_bytes_per_token: float
    """KV-cache bytes per token on the GPU (its heads' share of its stage's layers)."""
    activation_reserve_bytes: float
    """Reserved for activations: 1 GiB plus ``max_batched_tokens`` tokens of the widest tensors."""
    kv_free_bytes: float
    """What is left for the KV cache (0 when nothing is)."""


def memory_budget(*, model: ModelPreset, gpu: GPUPreset, quantization_name: str, tensor_parallel: int,
                  pipeline_parallel: int, gemms: list[tuple[int, int]], weight_bytes_per_param: float,
                  moe_weight_bytes_gpu: float | None, kv_bytes_per_token_layer: float,
                  q_heads: int, kv_heads: int, max_batched_tokens: int,
                  gpu_memory_utilization: float, check: bool, kv_layers: int | None = None,
                  moe_workspace_bytes: float = 0.0) -> MemoryBudget:
    """Split one GPU's memory; ValueError when the weights and the reserve do not fit (``check``).

    ``gemms``: the ``(K, N)`` shapes of one dense layer's GEMMs on one GPU (QKV, O, gate+up, down);
    ``moe_weight_bytes_gpu``: one MoE layer's expert weights on one GPU (None: dense model);
    ``kv_layers``: layers whose KV grows with the context (None: all; sliding-window layers hold
    their window only, ``sim/sliding_window.py``); ``moe_workspace_bytes``: the fused-MoE buffers of
    the largest batch, reserved beside the activations.
    """
    m, g, t, wb, pp = model, gpu, tensor_parallel, weight_bytes_per_param, pipeline_parallel
    h = m.hidden_size
    lin_params_gpu = sum(kk * nn for kk, nn in gemms)
    attn_params_gpu = sum(kk * nn for kk, nn in gemms[:2])
    emb_params_gpu = m.vocab_size * h / t * (1 if m.tied_embeddings else 2)
    moe_bytes = (m.moe_layers * (attn_params_gpu * wb + moe_weight_bytes_gpu)
                 if moe_weight_bytes_gpu is not None else 0.0)
    # pipeline stages: the largest stage holds ceil(L / P) layers and the embedding or the LM head
    stage_frac = -(-m.num_layers // pp) / m.num_layers
    emb_gpu = emb_params_gpu if (pp == 1 or m.tied_embeddings) else emb_params_gpu / 2
    weights = float(
        ((m.num_layers - m.moe_layers) * lin_params_gpu * wb + moe_bytes
         + m.num_layers * 2 * h * ACT_BYTES) * stage_frac + emb_gpu * ACT_BYTES + h * ACT_BYTES)
    kv_per_token = float((m.num_layers if kv_layers is None else kv_layers) * kv_bytes_per_token_layer
                         * stage_frac)
    f_g = m.ffn_size / t
    qk = (q_heads + kv_heads) * m.head_dim
    reserve = float(GIB + max_batched_tokens * (h + qk + 3 * f_g) * ACT_BYTES)
    if moe_workspace_bytes:
        reserve += moe_workspace_bytes
    free = g.memory_bytes * gpu_memory_utilization - weights - reserve
    if free <= 0 and check:
        raise ValueError(
            f"{m.name} ({quantization_name}) needs {weights / 1e9:.1f} GB of weights per GPU "
            f"at tensor_parallel={t}, which with the activation reserve exceeds the "
            f"{g.memory_gbytes:.0f} GB of {g.name} (x{gpu_memory_utilization} usable); "
            f"use a larger tensor_parallel{' or expert_parallel' if m.is_moe else ''} or a "
            f"lower-bit quantization")
    return MemoryBudget(weight_bytes_per_gpu=weights, kv_bytes_per_token=kv_per_token,
                        activation_reserve_bytes=reserve, kv_free_bytes=max(free, 0.0))
