"""Engine-overhead profiles: what a serving engine adds per iteration to the kernel time.

* ``vllm-2023``: fitted on SplitwiseSim's end-to-end times (2023 engines: eager decode, synchronous
  scheduling), see ``fit.fit_engine``.
* ``vllm-v1``: today's vLLM (V1 engine: piecewise CUDA graphs, asynchronous scheduling, its own
  all-reduce kernel for small tensor-parallel messages), fitted on the fixed-batch latencies of
  vLLM's performance CI (``VLLM_CI_LATENCY``) and the decode steps of the BLIS vLLM-V1 (v0.15)
  H100 serving runs (``blis.decode_anchors``): a fixed per-iteration cost (the TP1 CI rows, where
  no all-reduce runs) and the engine's all-reduce latency (every row at TP > 1: the CI's TP4 rows
  and the BLIS TP2/TP4 anchors); the per-sequence cost is not identifiable from batch-8 runs and is
  set (``VLLM_V1_PER_SEQ_S``, 10 us).
* ``kernel-only``: zero overhead (kernel profiles).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from inferencegym.sim.calibration.blis import DecodeAnchor
from inferencegym.sim.execution import ExecutionModel
from inferencegym.sim.execution_params import EngineParams

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
"""Per sequence and iteration (CPU bookkeeping: scheduling, sampling metadata, outputs)."""
VLLM_V1_ASYNC_SCHEDULING = True
"""vLLM >= 0.14 schedules asynchronously by default (``SchedulerConfig.async_scheduling`` None ->
True in ``VllmConfig``; "Async scheduling is now enabled by default", vllm-project/vllm#27614;
the design: vllm-project/vllm#19970, "the scheduler operate[s] one step ahead of the current
execution"). The fit itself evaluates every row synchronously: the CI's fixed-batch latencies come
from the offline ``LLM`` class at TP 1 (``UniProcExecutor``, on which vLLM reset async scheduling
to off until it gained ``supports_async_scheduling``; vllm-project/tpu-inference#3456), so their
per-step CPU cost is visible in them and is what ``fixed_s`` measures."""
VLLM_V1_GPU_FIXED_S = 1.76e-4
"""Per-iteration GPU time outside the model kernels (``EngineParams.gpu_fixed_s``): the part of
vLLM V1's PyTorch top-p sampler (temperature 0.6, top-p 0.9: the Llama-2/3 checkpoints' generation
config, which vLLM applies to requests that set no sampling parameters) that does not grow with the
batch. Fitted with ``VLLM_V1_SAMPLER_S_PER_LOGIT`` (least squares on the relative error,
``benchmarks/sampler_fit.py``) on the 24 graph-replayed top-p rows of a lent H100's sweep
(``benchmarks/gpu_sampler_sweep.py``, ``benchmarks/results/gpu_h100_2026-11-26/sampler_sweep.json``:
batch 1-1,024 x vocabularies 32,000 / 128,256 / 151,936 / 201,088): 176.0 us. Rows within
-26 % .. +33 % (median 4 %); at >= 256 sequences within +1.8 % .. +6.5 % on every vocabulary; batch
16 the worst below (-23 .. -26 % at >= 128k entries), batch 1 at 32,000 entries the worst above
(+33 %, 45 us). Was 177 us from two points (12 and 64 sequences over 32,000 entries)."""
VLLM_V1_SAMPLER_S_PER_LOGIT = 1.43e-10
"""GPU seconds per sequence and vocabulary entry of that sampler (``EngineParams.sampler_s_per_logit``;
the same fit's slope, 1.428e-10: 29.6 ms at 1,024 sequences over 201,088 entries, measured 28.4).
Was 1.11e-10 from the two 32,000-entry points, 19 % short at every vocabulary from 256 sequences."""
VLLM_V1_SAMPLER_S_PER_LOGIT_GPU: tuple[tuple[str, float], ...] = (("h200-141gb", 1.21e-10),)
"""The same slope on GPUs timed separately (``EngineParams.sampler_s_per_logit_gpu``; others use the
H100's): the H200 sweep (``benchmarks/results/gpu_h200_2026-11-26/sampler_sweep.json``, same script,
24 top-p graph rows) fits 177.7 us + 1.211e-10 s (the fixed part within 1 % of the H100's, so shared):
0.85x the H100's slope, rows >= 256 sequences within +1.8 .. +7.1 % (the H100 slope there: +19 .. +25 %)."""
VLLM_V1_GPU_PER_LAYER_S = 1.3e-5
"""Per-layer GPU time of a CUDA-graphed decode step beyond the per-op kernel rows
(``EngineParams.gpu_per_layer_s``), from the same H100 run (Llama-2-7B, 12 sequences, context 911,
whole step replayed as one graph and every kernel profiled): the four GEMMs run 2.4 us a layer
slower inside the step than timed alone (150.4 vs 148.0 us), each kernel boundary costs 0.63 us
(graph time - sum of kernel times over 483 kernels) x ~12 kernels a layer in vLLM's fused graph,
and vLLM's five small kernels a layer (two fused residual-add RMSNorms, RoPE, KV-cache write,
SiLU x up; 12.6 us at the measured durations) exceed the elementwise model's 9.3 us by 3.3 us:
2.4 + 7.6 + 3.3 = 13.3 us. Attention is left out (the measured step ran cuDNN SDPA, not vLLM's
FlashAttention: 7.7 % slower than the model in the graph, not transferable). A second run timed the
three BLIS decode anchors' shards with every layer compiled (Inductor fusing norms with residual
adds, as vLLM's graph does): 10.4 / 10.3 / 18.8 us a layer beyond the per-op rows (7B TP1, 34B TP2
and 70B TP4 shards), mean 13.2 (``benchmarks/results/decode_step/``)."""
VLLM_V1_GPU = (VLLM_V1_GPU_FIXED_S, VLLM_V1_GPU_PER_LAYER_S, VLLM_V1_SAMPLER_S_PER_LOGIT)
"""The three GPU-side terms, as ``_v1`` and ``fit_vllm_v1`` take them."""
VLLM_V1_ALLREDUCE_PER_DEGREE = True
"""Fit the engine's all-reduce latency per tensor-parallel degree (``fit_vllm_v1``): vLLM's one-shot
custom all-reduce reads every peer's buffer, so it is slower at TP4 than at TP2 (measured on H100 at
0.5 MB: ~7 us at TP2, vllm-project/vllm#24111; ~10 us at TP4, vllm-project/vllm#24532)."""
VLLM_V1_CUDAGRAPH_MAX_TOKENS = 512
"""vLLM's default ``max_cudagraph_capture_size``: ``min(max_num_seqs * (1 + k) * 2, 512)`` (512 at
the default 1024 sequences per H100/H200, 256 at A100's 256 -> 512 as well; ``vllm/config/vllm.py``)."""
VLLM_V1_FRONTEND_S = 5.5e-3
"""API-server latency per request outside the engine steps (``EngineParams.frontend_s``: HTTP,
chat template and tokenisation, IPC to the engine core, detokenisation, streaming). Not separable
in any published figure we have, so estimated: the least-squares constant (0.5 ms grid) over the
eight vLLM-V1 serving points with every other figure fixed, the five unsaturated BLIS v0.15 H100
runs (mean TTFT, ``benchmarks/engine_validation.py``) and DigitalOcean's three vLLM 0.14.1 H200
points (median TTFT, ``benchmarks/vllm_published.py``): ``python benchmarks/engine_steps.py
--fit-frontend``. 6.5 ms before the GPU-side step terms (issue 23, fifth session), 5.5 ms with them
(residuals -7 % .. +15 %; docs/bench/fidelity.md)."""


def fixed_batch_latency_s(m: ExecutionModel, batch: int, prompt: int, output: int) -> float:
    """vLLM ``benchmark_latency``: one prefill iteration of the whole batch (it yields the first
    token), then ``output - 1`` decode iterations at growing context."""
    t = m.iteration_time_s([(prompt, 0)] * batch, 0, 0, 0)
    a, b = m.decode_coeffs(batch, 0)
    steps = output - 1
    ctx_sum = batch * (steps * prompt + steps * (steps + 1) / 2)
    return t + steps * a + b * ctx_sum


AR_LATENCY_GRID_S = tuple(float(x) for x in np.geomspace(2e-6, 60e-6, 121))
"""Candidate all-reduce latencies of the engine's own kernel (2-60 us, log-spaced)."""


def decode_step_s(m: ExecutionModel, anchor: DecodeAnchor) -> float:
    """Predicted pure-decode iteration of ``anchor``'s batch at its mean context."""
    a, b = m.decode_coeffs(anchor.batch, 0)
    return a + b * anchor.batch * anchor.context_tokens


def _v1(fixed: float, lat: float | None, asynchronous: bool = False,
        gpu: tuple[float, float, float] = VLLM_V1_GPU,
        lat_tp: tuple[tuple[int, float], ...] = ()) -> EngineParams:
    """The ``vllm-v1`` engine with these fitted figures, scheduling synchronously (how the CI rows
    ran) or as today's vLLM serves (``asynchronous``: how the BLIS v0.15 runs ran); ``gpu``: its GPU
    time outside the kernel profiles (per iteration, per layer, per sampled logit; with a sampler, its
    per-GPU slopes ``VLLM_V1_SAMPLER_S_PER_LOGIT_GPU``); ``lat_tp``: all-reduce latencies of particular
    tensor-parallel degrees."""
    return EngineParams(fixed_s=fixed, per_layer_s=0.0, per_layer_tp_s=0.0, per_seq_s=VLLM_V1_PER_SEQ_S,
                        per_token_s=0.0, kernel_slowdown_per_token=0.0, allreduce_latency_s=lat,
                        allreduce_latency_tp_s=lat_tp, async_scheduling=asynchronous and VLLM_V1_ASYNC_SCHEDULING,
                        frontend_s=VLLM_V1_FRONTEND_S, cudagraph_max_tokens=VLLM_V1_CUDAGRAPH_MAX_TOKENS,
                        gpu_fixed_s=gpu[0], gpu_per_layer_s=gpu[1], sampler_s_per_logit=gpu[2],
                        sampler_s_per_logit_gpu=VLLM_V1_SAMPLER_S_PER_LOGIT_GPU if gpu[2] else ())


def _fit_allreduce(make_model, fixed: float, rows, anchors, gpu) -> float:
    """The candidate of ``AR_LATENCY_GRID_S`` with the smallest sum of squared relative errors over
    ``rows`` (CI fixed-batch rows, synchronous) and ``anchors`` (BLIS decode steps, served
    asynchronously as vLLM v0.15 did), each weighted alike."""
    best = None
    for lat in AR_LATENCY_GRID_S:
        eng = _v1(fixed, lat, gpu=gpu)
        err = sum((fixed_batch_latency_s(make_model(mo, g, tp, eng), b, p, o) / ms - 1.0) ** 2
                  for mo, g, tp, b, p, o, ms in rows)
        served = _v1(fixed, lat, asynchronous=True, gpu=gpu)
        err += sum((decode_step_s(make_model(a.model, "h100-80gb", a.tp, served), a) / a.step_s - 1.0) ** 2
                   for a in anchors)
        if best is None or err < best[0]:
            best = (err, lat)
    return best[1]


def fit_vllm_v1(make_model, anchors: Sequence[DecodeAnchor] = (),
                gpu: tuple[float, float, float] = VLLM_V1_GPU,
                per_degree: bool = VLLM_V1_ALLREDUCE_PER_DEGREE) -> EngineParams:
    """``make_model(model, gpu, tp, engine)`` -> ExecutionModel with ``engine``'s overhead.

    1. The fixed per-iteration CPU cost: least squares (relative error, >= 0) on the TP1 CI rows,
       which run no all-reduce, with ``gpu`` (the GPU-side per-step terms) in place: the rows ran
       synchronously, so they fix the sum of the two and the CPU share is what remains.
    2. The engine's all-reduce latency (``_fit_allreduce``) over every row at TP > 1 (the CI's TP4
       rows and ``anchors``, the BLIS decode steps at TP2 and TP4); ``per_degree``: one latency per
       degree, each on its own rows (the largest degree's is the default for degrees without rows).

    The per-layer CPU cost is not identifiable next to the all-reduce latency on these rows (0); the
    per-sequence cost is set (``VLLM_V1_PER_SEQ_S``)."""
    tp1 = [r for r in VLLM_CI_LATENCY if r[2] == 1]
    meas = np.array([r[-1] for r in tp1])
    iters = np.array([r[5] for r in tp1], float)  # one prefill + (output - 1) decodes
    base = np.array([fixed_batch_latency_s(make_model(mo, g, tp, _v1(0.0, None, gpu=gpu)), b, p, o)
                     for mo, g, tp, b, p, o, _ in tp1])
    x, y = iters / meas, (meas - base) / meas
    fixed = max(0.0, float(x @ y / (x @ x)))
    multi = [r for r in VLLM_CI_LATENCY if r[2] > 1]
    served = [a for a in anchors if a.tp > 1]
    if not per_degree:
        return _v1(fixed, _fit_allreduce(make_model, fixed, multi, served, gpu), asynchronous=True, gpu=gpu)
    degrees = sorted({r[2] for r in multi} | {a.tp for a in served})
    lat = {d: _fit_allreduce(make_model, fixed, [r for r in multi if r[2] == d],
                             [a for a in served if a.tp == d], gpu) for d in degrees}
    top = degrees[-1]
    return _v1(fixed, lat[top], asynchronous=True, gpu=gpu,
               lat_tp=tuple((d, lat[d]) for d in degrees if d != top))
