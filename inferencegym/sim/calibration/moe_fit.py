"""Fit the Triton fused-MoE compute efficiency on a published measured MoE layer; check it on another.

``python -m inferencegym.sim.calibration.moe_fit`` compares the modelled time of the routed experts
of one MoE layer (two grouped GEMMs and the SiLU-and-mul, :class:`~inferencegym.sim.moe.MoECost`,
no router, shared experts or all-to-all) with kernel times measured by vLLM's
``benchmarks/kernels/benchmark_moe.py`` and published in vLLM pull requests:

* **fit**: #44818 (H200, BF16, 128 experts of 2816 x 704, top-8, tuned configs), the compute-bound
  rows (>= 1,024 tokens): the one number fitted is the grouped GEMMs' compute efficiency relative
  to the calibrated dense GEMM (``moe.MOE_KERNEL_COMPUTE_EFFICIENCY["triton"]``);
* **check** (out of sample: another GPU, data type and model): #24700 (H100, Qwen3-30B-A3B at TP1,
  FP8 W8A8, the configs of vLLM's main branch of September 2025), every row;
* **the layer's fixed time** (``moe.MOE_LAYER_FIXED_S``: routing top-k, token sort, top-k sum):
  the median residual of the 1-token rows of three H100 layers (:data:`FIXED_ROWS_H100`), where a
  layer reads 8-200 MB of weights and the rest of its time is fixed; checked on the 8-token rows
  and on #39902's gpt-oss-shaped layer at every batch.

It prints the fitted figure and the per-row ratios; the figure is committed in ``sim/moe.py``.
No GPU or reference file is needed (the published figures are in this module).
"""

from __future__ import annotations

import math
from functools import cache

from scipy.optimize import minimize_scalar

FIT_ROWS_H200_BF16 = {1: 185.1, 8: 204.4, 64: 384.1, 256: 419.6, 512: 442.3, 1024: 528.4,
                      2048: 728.2, 4096: 1189.6}
"""Tokens -> measured microseconds, vLLM PR #44818 (Gemma 4 MoE shape E=128, N=704, K=2816, top-8,
BF16, H200, tuned)."""
CHECK_ROWS_H100_FP8 = {1: 44.54, 8: 129.77, 64: 262.73, 256: 355.49, 512: 391.86, 1024: 536.33,
                       2048: 911.64, 4096: 1647.57}
"""Tokens -> measured microseconds, vLLM PR #24700 ("Main" rows: Qwen3-30B-A3B TP1, FP8 W8A8, H100)."""
FIT_MIN_TOKENS = 1024
GPT_OSS_BF16_H100_TUNED = {1: 85.24, 8: 501.58, 256: 2130.23, 512: 2199.61, 1024: 2314.23}
"""Tokens -> measured microseconds, vLLM PR #39902 (gpt-oss-120b's MoE shape, E=128, N=2880,
top-4, Triton ``fused_moe`` on one H100 with the tuned configs; the weights read at 8 and 1,024
tokens, 1.4 and 6.4 GB in 0.50 and 2.3 ms, are BF16 ones)."""


def _qwen3_next_layer():
    from inferencegym.sim.presets import ModelPreset

    # Qwen3-Next-80B-A3B at TP4: 512 experts of 2048 x 512/4, top-10 (vLLM PR #44830's E=512, N=128)
    return ModelPreset(name="qwen3-next-tp4-moe-layer", num_layers=1, hidden_size=2048, num_heads=16,
                       num_kv_heads=2, ffn_size=512, vocab_size=151936, num_experts=512,
                       experts_per_token=10, moe_ffn_size=128)


def fixed_rows():
    """``(label, model, gpu, quantization, measured us)`` of the 1-token rows the fixed time is fitted on."""
    from inferencegym.sim.presets import get_model

    return (("Qwen3-Next TP4 FP8, H100 (PR #44830)", _qwen3_next_layer(), "h100-80gb", "fp8", 29.45),
            ("Qwen3-30B-A3B FP8, H100 (PR #24700)", "qwen3-30b-a3b", "h100-80gb", "fp8", CHECK_ROWS_H100_FP8[1]),
            ("gpt-oss-120b shape BF16, H100 (PR #39902)", get_model("gpt-oss-120b"), "h100-80gb", "fp16",
             GPT_OSS_BF16_H100_TUNED[1]))


def _gemma_moe():
    from inferencegym.sim.presets import ModelPreset

    return ModelPreset(name="gemma-4-moe-layer", num_layers=1, hidden_size=2816, num_heads=16, num_kv_heads=8,
                       ffn_size=2816, vocab_size=262144, num_experts=128, experts_per_token=8, moe_ffn_size=704)


GEMM_STAGE = "vllm-v1"
"""The engine profile whose dense GEMM fit the MoE figures are relative to: the one the serving
simulations use (``vllm-v1``: on the H100 today's measured GEMMs, not the 2024 ``kernel-only`` fit)."""


def experts_time_us(model, gpu: str, quantization: str, efficiency: float, n_tokens: int,
                    fixed_s: float | None = None, fp8_factor: float | None = None,
                    stream: float | None = None, tile_k0: float | None = None) -> float:
    """Modelled routed-expert time of one layer for ``n_tokens`` at grouped-GEMM ``efficiency``
    (what ``benchmark_moe.py`` times: the grouped GEMMs, activation and the layer's fixed kernels,
    ``fixed_s``, default ``moe.MOE_LAYER_FIXED_S``; no router GEMM, shared experts or all-to-all),
    relative to the :data:`GEMM_STAGE` dense fit of ``gpu``. Under ``quantization="fp8"`` the
    grouped GEMMs run at ``efficiency * fp8_factor`` (default: the committed
    ``moe.MOE_KERNEL_FP8_FACTOR`` of the model's kernel family); ``stream`` (bytes per SM cycle)
    and ``tile_k0`` default to the family's committed figures."""
    from inferencegym.sim.moe import MOE_KERNEL_FP8_FACTOR
    from inferencegym.sim.presets import get_model

    mp = get_model(model) if isinstance(model, str) else model
    if quantization == "fp8":
        efficiency *= MOE_KERNEL_FP8_FACTOR[mp.moe_kernel] if fp8_factor is None else fp8_factor
    kw = {"grouped_compute_efficiency": efficiency}
    if stream is not None:
        kw["stream_bytes_per_sm_cycle"] = stream
    if tile_k0 is not None:
        kw["tile_k0"] = tile_k0
    return 1e6 * _layer(mp, gpu, quantization).retuned(**kw).experts_time_s(n_tokens, fixed_s)


@cache
def _layer(mp, gpu: str, quantization: str):
    from inferencegym.sim.execution import ExecutionModel

    base = ExecutionModel.from_preset(model="qwen3-30b-a3b", gpu=gpu, quantization=quantization,
                                      engine_profile=GEMM_STAGE)
    return base._replace(model=mp, check_memory=False)._moe


def fit_fixed() -> tuple[float, float]:
    """The layer's fixed times (seconds): the BF16 layer's (the mean residual of the BF16 rows of
    :func:`fixed_rows`, measured minus modelled without it, at the committed grouped-GEMM
    efficiency) and the FP8 activation quantization's (the median excess of the FP8 rows' residuals
    over the BF16 one)."""
    from statistics import mean, median

    from inferencegym.sim.moe import MOE_KERNEL_COMPUTE_EFFICIENCY

    e = MOE_KERNEL_COMPUTE_EFFICIENCY["triton"]
    res = [(q, us - experts_time_us(m, g, q, e, 1, fixed_s=0.0)) for _l, m, g, q, us in fixed_rows()]
    base = mean(r for q, r in res if q != "fp8")
    return 1e-6 * base, 1e-6 * (median(r for q, r in res if q == "fp8") - base)


def fit() -> float:
    """The efficiency minimising the squared log time ratio on the fit rows >= FIT_MIN_TOKENS."""
    rows = {n: us for n, us in FIT_ROWS_H200_BF16.items() if n >= FIT_MIN_TOKENS}
    m = _gemma_moe()

    def loss(e: float) -> float:
        return sum(math.log(experts_time_us(m, "h200-141gb", "fp16", e, n) / us) ** 2 for n, us in rows.items())

    return float(minimize_scalar(loss, bounds=(0.05, 1.5), method="bounded").x)


def main() -> None:
    fx, f8 = fit_fixed()
    print(f"fitted MoE layer fixed time (1-token BF16 row): {1e6 * fx:.1f} us; FP8 activation quantization: "
          f"+{1e6 * f8:.1f} us (1-token FP8 rows, median excess)")
    for label, m, g, q, us in fixed_rows():
        print(f"  {label}: measured {us:.1f} us, model without it "
              f"{experts_time_us(m, g, q, 0.44, 1, fixed_s=0.0):.1f} us")
    e = fit()
    print(f"fitted grouped-GEMM compute efficiency (Triton fused MoE), relative to the dense fit: {e:.3f}")
    for label, model, gpu, quant, rows in (
            ("fit   H200 BF16 (PR #44818)", _gemma_moe(), "h200-141gb", "fp16", FIT_ROWS_H200_BF16),
            ("check H100 FP8 Qwen3 (PR #24700)", "qwen3-30b-a3b", "h100-80gb", "fp8", CHECK_ROWS_H100_FP8),
            ("check H100 BF16 gpt-oss shape (PR #39902)", "gpt-oss-120b", "h100-80gb", "fp16",
             GPT_OSS_BF16_H100_TUNED)):
        for n, us in rows.items():
            sim = experts_time_us(model, gpu, quant, e, n)
            before = experts_time_us(model, gpu, quant, 1.0, n)
            print(f"{label} {n:5d} tokens: measured {us:7.1f} us, model {sim:7.1f} ({100 * (sim / us - 1):+.0f}%), "
                  f"dense efficiency {before:7.1f} ({100 * (before / us - 1):+.0f}%)")


if __name__ == "__main__":
    main()
