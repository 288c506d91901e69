"""Engine-overhead profiles: what a serving engine adds per iteration to the kernel time.

* ``vllm-2023``: fitted on SplitwiseSim's end-to-end times (2023 engines: eager decode, synchronous
  scheduling), see ``fit.fit_engine``.
* ``vllm-v1``: today's vLLM (V1 engine: piecewise CUDA graphs, asynchronous scheduling), fitted on
  the fixed-batch latencies of vLLM's performance CI (``VLLM_CI_LATENCY``): a fixed per-iteration
  cost and a per-layer cost (attention runs outside the CUDA graph pieces, one launch per layer);
  the per-sequence cost is not identifiable from batch-8 runs and is taken from the measured BLIS
  vLLM-V1 runs' gap between inter-token time and kernel time (``VLLM_V1_PER_SEQ_S``).
* ``kernel-only``: zero overhead (kernel profiles).
"""

from __future__ import annotations

import numpy as np

from inferencegym.sim.execution import EngineParams, ExecutionModel

# vLLM performance CI, fixed-batch latency test (``benchmark_latency``: 8 prompts of 32 tokens,
# 128 output tokens each, ignore_eos), seconds per batch; figures quoted in issue 15 from vLLM's
# performance dashboard (A100-80GB SXM, H100-80GB SXM, H200 SXM). Llama-3.1-8B has the
# Llama-3-8B shape; Llama-3-70B at TP4.
VLLM_CI_LATENCY: tuple[tuple[str, str, int, int, int, int, float], ...] = (
    # model, gpu, tp, batch, prompt tokens, output tokens, measured seconds
    ("llama-3-8b", "a100-80gb", 1, 8, 32, 128, 1.579),
    ("llama-3-8b", "h100-80gb", 1, 8, 32, 128, 0.998),
    ("llama-3-8b", "h200-141gb", 1, 8, 32, 128, 0.834),
    ("llama-3-70b", "h100-80gb", 4, 8, 32, 128, 2.444),
    ("llama-3-70b", "h200-141gb", 4, 8, 32, 128, 2.075),
)
VLLM_V1_PER_SEQ_S = 1.0e-5
"""Per sequence and iteration (CPU bookkeeping the asynchronous scheduler does not hide)."""


def fixed_batch_latency_s(m: ExecutionModel, batch: int, prompt: int, output: int) -> float:
    """vLLM ``benchmark_latency``: one prefill iteration of the whole batch (it yields the first
    token), then ``output - 1`` decode iterations at growing context."""
    t = m.iteration_time_s([(prompt, 0)] * batch, 0, 0, 0)
    a, b = m.decode_coeffs(batch, 0)
    steps = output - 1
    ctx_sum = batch * (steps * prompt + steps * (steps + 1) / 2)
    return t + steps * a + b * ctx_sum


def _features(kernel_models: list[ExecutionModel]) -> np.ndarray:
    """Per CI row: iterations (fixed cost) and iterations x layers (per-layer cost)."""
    rows = []
    for m, (_, _, _, batch, _, out, _) in zip(kernel_models, VLLM_CI_LATENCY):
        rows.append([out, out * m.model.num_layers, out * batch])
    return np.array(rows, float)


def fit_vllm_v1(make_kernel_model) -> EngineParams:
    """``make_kernel_model(model, gpu, tp)`` -> kernel-only ExecutionModel. Least squares on the
    relative error of the CI latencies for (fixed_s, per_layer_s) >= 0; per_seq_s fixed."""
    from scipy.optimize import lsq_linear

    models = [make_kernel_model(mo, g, tp) for mo, g, tp, *_ in VLLM_CI_LATENCY]
    kern = np.array([fixed_batch_latency_s(m, b, p, o) for m, (_, _, _, b, p, o, _) in
                     zip(models, VLLM_CI_LATENCY)])
    meas = np.array([r[-1] for r in VLLM_CI_LATENCY])
    X = _features(models)
    resid = meas - kern - X[:, 2] * VLLM_V1_PER_SEQ_S
    # relative error: divide every row by its measurement
    sol = lsq_linear(X[:, :2] / meas[:, None], resid / meas, bounds=(0.0, np.inf))
    fixed, per_layer = (float(v) for v in sol.x)
    return EngineParams(fixed_s=fixed, per_layer_s=per_layer, per_layer_tp_s=0.0,
                        per_seq_s=VLLM_V1_PER_SEQ_S, per_token_s=0.0, kernel_slowdown_per_token=0.0)
