"""Fit the Triton fused-MoE compute efficiency on a published measured MoE layer; check it on another.

``python -m inferencegym.sim.calibration.moe_fit`` compares the modelled time of the routed experts
of one MoE layer (two grouped GEMMs and the SiLU-and-mul, :class:`~inferencegym.sim.moe.MoECost`,
no router, shared experts or all-to-all) with kernel times measured by vLLM's
``benchmarks/kernels/benchmark_moe.py`` and published in vLLM pull requests:

* **fit**: #44818 (H200, BF16, 128 experts of 2816 x 704, top-8, tuned configs), the compute-bound
  rows (>= 1,024 tokens): the one number fitted is the grouped GEMMs' compute efficiency relative
  to the calibrated dense GEMM (``moe.MOE_KERNEL_COMPUTE_EFFICIENCY["triton"]``);
* **check** (out of sample: another GPU, data type and model): #24700 (H100, Qwen3-30B-A3B at TP1,
  FP8 W8A8, the configs of vLLM's main branch of September 2025), every row.

It prints the fitted figure and the per-row ratios; the figure is committed in ``sim/moe.py``.
No GPU or reference file is needed (the published figures are in this module).
"""

from __future__ import annotations

import math

from scipy.optimize import minimize_scalar

FIT_ROWS_H200_BF16 = {1: 185.1, 8: 204.4, 64: 384.1, 256: 419.6, 512: 442.3, 1024: 528.4,
                      2048: 728.2, 4096: 1189.6}
"""Tokens -> measured microseconds, vLLM PR #44818 (Gemma 4 MoE shape E=128, N=704, K=2816, top-8,
BF16, H200, tuned)."""
CHECK_ROWS_H100_FP8 = {1: 44.54, 8: 129.77, 64: 262.73, 256: 355.49, 512: 391.86, 1024: 536.33,
                       2048: 911.64, 4096: 1647.57}
"""Tokens -> measured microseconds, vLLM PR #24700 ("Main" rows: Qwen3-30B-A3B TP1, FP8 W8A8, H100)."""
FIT_MIN_TOKENS = 1024


def _gemma_moe():
    from inferencegym.sim.presets import ModelPreset

    return ModelPreset(name="gemma-4-moe-layer", num_layers=1, hidden_size=2816, num_heads=16, num_kv_heads=8,
                       ffn_size=2816, vocab_size=262144, num_experts=128, experts_per_token=8, moe_ffn_size=704)


def experts_time_us(model, gpu: str, quantization: str, efficiency: float, n_tokens: int) -> float:
    """Modelled routed-expert time of one layer for ``n_tokens`` at grouped-GEMM ``efficiency``."""
    from inferencegym.sim.execution import ExecutionModel
    from inferencegym.sim.presets import get_model

    base = ExecutionModel.from_preset(model="qwen3-30b-a3b", gpu=gpu, quantization=quantization,
                                      engine_profile="kernel-only")
    mp = get_model(model) if isinstance(model, str) else model
    em = base._replace(model=mp, check_memory=False)
    moe = em._moe
    scale = efficiency / moe.grouped_compute_efficiency
    up = (moe.up[0] / scale, moe.up[1], moe.up[2])
    down = (moe.down[0] / scale, moe.down[1], moe.down[2])
    pairs = n_tokens * moe.k * moe.pair_share
    active = moe.experts_gpu * (1.0 - (1.0 - moe.k / moe.E) ** n_tokens)
    t = moe._gemm(up, pairs, active) + moe._gemm(down, pairs, active) + moe.elem_floor + moe.act_per_pair * pairs
    return 1e6 * t


def fit() -> float:
    """The efficiency minimising the squared log time ratio on the fit rows >= FIT_MIN_TOKENS."""
    rows = {n: us for n, us in FIT_ROWS_H200_BF16.items() if n >= FIT_MIN_TOKENS}
    m = _gemma_moe()

    def loss(e: float) -> float:
        return sum(math.log(experts_time_us(m, "h200-141gb", "fp16", e, n) / us) ** 2 for n, us in rows.items())

    return float(minimize_scalar(loss, bounds=(0.05, 1.5), method="bounded").x)


def main() -> None:
    e = fit()
    print(f"fitted grouped-GEMM compute efficiency (Triton fused MoE), relative to the dense fit: {e:.3f}")
    for label, model, gpu, quant, rows in (
            ("fit   H200 BF16 (PR #44818)", _gemma_moe(), "h200-141gb", "fp16", FIT_ROWS_H200_BF16),
            ("check H100 FP8 Qwen3 (PR #24700)", "qwen3-30b-a3b", "h100-80gb", "fp8", CHECK_ROWS_H100_FP8)):
        for n, us in rows.items():
            sim = experts_time_us(model, gpu, quant, e, n)
            before = experts_time_us(model, gpu, quant, 1.0, n)
            print(f"{label} {n:5d} tokens: measured {us:7.1f} us, model {sim:7.1f} ({100 * (sim / us - 1):+.0f}%), "
                  f"dense efficiency {before:7.1f} ({100 * (before / us - 1):+.0f}%)")


if __name__ == "__main__":
    main()
