"""Parameters of the execution-time model and where they come from.

``KernelParams`` (per-GPU kernel efficiencies), ``EngineParams`` (a serving engine's per-iteration
overhead), the engine profiles (``ENGINE_PROFILES``) and the loader of the committed calibration
(``inferencegym/data/calibration.json``, parsed once per process), plus the registry of GPUs fitted
at run time (``calibration.custom``). The model itself is ``execution.ExecutionModel``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

ENGINE_PROFILES = ("vllm-v1", "vllm-v0", "vllm-2023", "kernel-only")
"""Serving-engine overhead profiles (docs/calibration.md): ``vllm-v1`` (today's vLLM: CUDA-graphed
decode, asynchronous scheduling, its API server; fitted on vLLM's performance-CI latencies and the
BLIS v0.15 runs), ``vllm-v0`` (the same figures scheduling synchronously, CUDA graphs to batch 256,
the API server in the engine's process: vLLM's V0 engine of 2024, v0.5-v0.6; multi-step scheduling
is ``ReplicaConfig.num_scheduler_steps``), ``vllm-2023`` (the 2023 engines measured by
SplitwiseSim) and ``kernel-only`` (no overhead: what kernel profiles measure)."""
DEFAULT_ENGINE_PROFILE = "vllm-v1"
_V0_API_SERVER_PER_REQUEST_S = 3.0e-3
"""``vllm-v0``'s ``api_server_per_request_s`` (docs/bench/fidelity.md, "Issue 23: vLLM V0 mechanisms")."""

@dataclass(frozen=True, kw_only=True)
class KernelParams:
    """Fitted kernel efficiencies of one GPU type (all times in seconds)."""

    gemm_eff_compute: float = 0.70
    """Fraction of the tensor-core peak GEMMs reach when compute-bound."""
    gemm_eff_mem: float = 0.75
    """Fraction of the memory bandwidth GEMMs reach when memory-bound."""
    gemm_p: float = 2.0
    """Exponent of the smooth roofline max (large = hard max)."""
    gemm_floor_s: float = 6e-6
    """Fixed time of one GEMM kernel (launch, tail)."""
    norm_eff_mem: float = 0.4
    """Bandwidth fraction of an RMSNorm (reads and writes the hidden states)."""
    rope_eff_mem: float = 0.6
    """Bandwidth fraction of rotary embedding (reads and writes Q and K)."""
    act_eff_mem: float = 0.7
    """Bandwidth fraction of the MLP activation (SiLU(gate)*up: reads 2, writes 1)."""
    add_eff_mem: float = 0.8
    """Bandwidth fraction of the residual add (reads 2, writes 1 hidden states)."""
    elem_floor_s: float = 4e-6
    """Fixed time of one elementwise kernel."""
    attn_prefill_eff_compute: float = 0.45
    """Fraction of the FP16 peak reached by prefill attention among the chunk's own tokens
    (the causal triangle ``N*(N+1)/2``)."""
    attn_prefill_ctx_eff_compute: float = 0.45
    """Fraction of the FP16 peak reached by the chunk's queries attending to cached context
    (the ``N*C`` rectangle: chunked prefill, prefix-cache hits)."""
    attn_prefill_eff_mem: float = 0.6
    """Bandwidth fraction of prefill attention (reading cached KV)."""
    attn_prefill_floor_s: float = 1e-5
    """Fixed time of the prefill attention kernel(s) per layer and iteration."""
    attn_prefill_per_token_s: float = 5e-8
    """Per prefill token time (reshapes, KV-cache writes) per layer."""
    attn_decode_eff_mem: float = 0.85
    """Bandwidth fraction reached reading the KV cache in decode attention."""
    attn_decode_eff_compute: float = 0.3
    """Fraction of the FP16 peak for decode attention FLOPs (matters for k+1 queries)."""
    attn_decode_floor_s: float = 6e-6
    """Fixed time of the decode attention kernel per layer and iteration."""
    attn_decode_per_seq_kv_head_s: float = 3.0e-8
    """Per decode sequence and per KV head on the GPU, per layer (one work unit of the decode
    kernel's grid: block-table lookups, partition reductions). Scales with GQA and TP."""
    allreduce_latency_s: tuple[tuple[int, float], ...] = ((2, 1.5e-5), (4, 2.0e-5), (8, 2.5e-5))
    """All-reduce latency per TP degree."""
    allreduce_gbytes_per_s: tuple[tuple[int, float], ...] = ((2, 150.0), (4, 120.0), (8, 110.0))
    """All-reduce algorithm bandwidth (message bytes / transfer time) per TP degree, GB/s."""

    @classmethod
    def from_dict(cls, d: dict) -> KernelParams:
        kw = dict(d)
        for key in ("allreduce_latency_s", "allreduce_gbytes_per_s"):
            if key in kw and isinstance(kw[key], dict):
                kw[key] = tuple(sorted((int(t), float(v)) for t, v in kw[key].items()))
        known = set(cls.__dataclass_fields__)
        unknown = set(kw) - known
        if unknown:
            raise ValueError(f"unknown kernel calibration keys {sorted(unknown)}; valid: {sorted(known)}")
        return cls(**kw)

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["allreduce_latency_s"] = {str(t): v for t, v in self.allreduce_latency_s}
        d["allreduce_gbytes_per_s"] = {str(t): v for t, v in self.allreduce_gbytes_per_s}
        return d

    def allreduce(self, tp: int) -> tuple[float, float]:
        """(latency_s, bytes_per_s) of one all-reduce across ``tp`` GPUs (0, inf at TP 1)."""
        if tp <= 1:
            return 0.0, math.inf
        lat = dict(self.allreduce_latency_s)
        bw = dict(self.allreduce_gbytes_per_s)
        if tp in lat and tp in bw:
            return lat[tp], bw[tp] * 1e9
        # nearest degree available (presets only allow 1/2/4/8)
        best = min(lat, key=lambda t: abs(t - tp))
        return lat[best], bw[best] * 1e9


@dataclass(frozen=True, kw_only=True)
class EngineParams:
    """Serving-engine overhead per iteration (fitted on end-to-end times), seconds."""

    fixed_s: float = 2.0e-3
    """Per iteration: scheduling, input preparation, sampling launch."""
    per_layer_s: float = 1.5e-4
    """Per layer and iteration: kernel launches and synchronisation not in kernel profiles."""
    per_layer_tp_s: float = 0.0
    """Extra per layer and iteration for each GPU beyond the first (TP synchronisation)."""
    per_seq_s: float = 2.0e-5
    """Per sequence in the batch: sampling, detokenisation, bookkeeping."""
    per_token_s: float = 0.0
    """Per batched token (input preparation)."""
    gpu_fixed_s: float = 0.0
    """Per iteration: GPU time outside the profiled model kernels (the sampler's kernels over the
    vocabulary, the input-preparation copies and index kernels of each step). It runs on the GPU's
    stream, so asynchronous scheduling cannot hide it: it adds to the kernel time in both modes."""
    sampler_s_per_logit: float = 0.0
    """GPU seconds per sequence and vocabulary entry of the sampler that runs after every forward
    pass (vLLM V1's PyTorch top-p path sorts each sequence's logits, then softmax, cumsum, mask,
    scatter, softmax and ``probs / Exp(1)`` argmax over the vocabulary; every sequence of the
    iteration is sampled, every tensor-parallel rank samples the gathered logits). Its part that
    does not grow with the batch is in ``gpu_fixed_s``. GPU work: never hidden."""
    sampler_s_per_logit_gpu: tuple[tuple[str, float], ...] = ()
    """``(gpu_name, seconds)`` pairs overriding ``sampler_s_per_logit`` on those GPUs (the sampler's
    sort and scans are timed per GPU: an H200 runs them in 0.85x an H100's time); GPUs not listed use
    ``sampler_s_per_logit``."""
    gpu_per_layer_s: float = 0.0
    """Per layer and iteration: GPU time between a layer's dependent kernels when the whole step runs
    as one CUDA graph (each kernel waits for the previous one to drain and the next to be scheduled),
    which per-op timings of independent copies leave out. Like ``gpu_fixed_s``, never hidden."""
    kernel_slowdown_per_token: float = 0.0
    """Kernel time is multiplied by ``1 + kernel_slowdown_per_token * n`` for an iteration of n
    batched tokens: end-to-end engines lose efficiency on very large iterations (observed in the
    SplitwiseSim prefill times; ~0 below a few hundred tokens)."""
    allreduce_latency_s: float | None = None
    """Latency of one tensor-parallel all-reduce with the engine's own kernel (vLLM's custom
    all-reduce over NVLink), used where it is below the GPU's NCCL profile; None: NCCL only.
    Not applied on PCIe-only GPUs (the custom kernel needs NVLink)."""
    allreduce_latency_tp_s: tuple[tuple[int, float], ...] = ()
    """``(tensor_parallel, latency_s)`` pairs overriding ``allreduce_latency_s`` for those degrees
    (the engine's one-shot all-reduce reads every peer's buffer, so its latency grows with the
    degree); degrees not listed use ``allreduce_latency_s``."""
    async_scheduling: bool = False
    """Asynchronous scheduling (vLLM V1, on by default since v0.14): the batch of step k+1 is fixed
    while step k runs (``vllm/v1/engine/core.py`` ``step_with_batch_queue``, two batches in flight).
    (a) A request that reaches the replica after step k started first runs in step k+2 (one
    step later than a synchronous engine); (b) the CPU work of a step (``fixed_s``, ``per_seq_s``,
    ``per_token_s``) overlaps the GPU work of the previous one, so an iteration takes
    ``max(kernel time, CPU time)`` instead of their sum. False: synchronous (the two add)."""
    frontend_s: float = 0.0
    """Latency of the API server outside the engine steps, per request (HTTP, chat template and
    tokenisation, IPC to the engine core, detokenisation, streaming the token out): added to each
    request's time to first token and end-to-end latency, never to the gaps between tokens."""
    api_server_per_request_s: float = 0.0
    """CPU time of the API server per new request (HTTP, request validation, tokenisation,
    ``add_request``) when it runs in the engine's process and event loop, as vLLM V0 did up to v0.5.x
    (the OpenAI server and ``AsyncLLMEngine`` shared one Python process; the v0.6.0 blog, "Separating
    API server and inference engine into different processes", PR #6883): the requests that arrived
    during an engine step are handled before the next step starts, the GPU waiting, so a burst of N
    requests holds the engine for N x this time. Inside a multi-step block the work waits for the
    block's end. (v0.6 moved HTTP and tokenisation out; ``add_request`` stays in the engine's loop.)
    0: off (a separate front end; its latency is ``frontend_s``)."""
    cudagraph_max_tokens: int = 0
    """Largest CUDA-graph capture size (vLLM ``max_cudagraph_capture_size``): an iteration of
    ``n <= cudagraph_max_tokens`` batched tokens runs its token-dependent kernels (GEMMs,
    elementwise, all-reduce) padded to the next capture size, ``[1, 2, 4] + range(8, 256, 8) +
    range(256, max + 1, 16)`` (``vllm/config/vllm.py`` ``_set_cudagraph_sizes``); 0: no padding."""

    spec_batch_expansion: bool = False
    """Speculative verification by batch expansion (vLLM V0 of 2024, ``BatchExpansionTop1Scorer`` in
    ``vllm/spec_decode/batch_expansion.py``, the only scorer up to v0.6.1): each sequence with ``k``
    draft tokens becomes ``k + 1`` single-query sequences, so the engine's per-sequence work
    (``per_seq_s``) and the attention's per-sequence term are paid ``k + 1`` times; the copies read
    the same KV blocks back to back (L2 hits), so the KV bytes are read about once. That split is the
    one vLLM's measured scoring times support (vllm-project/vllm#5691: Llama-7B, A100, k = 5, batch
    4-128; ``docs/bench/fidelity.md``). False: one sequence with ``k + 1`` queries (MQA-style
    scoring, vLLM V1)."""

    spec_per_seq_s: float = 0.0
    """CPU time per sequence of each speculative step outside the GPU passes and the engine's
    per-sequence work (proposal bookkeeping, batch expansion and contraction, rejection-sampling
    outputs). vLLM V0 of 2024 (v0.6) sped up its plain decode path (object cache, asynchronous output
    processing, multi-step scheduling: the v0.6.0 blog's 1.8-2.7x) but ran speculation without them
    (``ModelConfig.verify_async_output_proc`` turns async output processing off under speculation;
    multi-step does not support it), so ``vllm-v0`` charges its speculative steps the per-sequence
    Python cost of the 2023 engines (``vllm-2023``'s ``per_seq_s``, fitted on SplitwiseSim's measured
    times): a hypothesis, with its evidence and sensitivity in docs/bench/fidelity.md. 0: none."""
    spec_chunked_prefill: bool = True
    """Whether the engine can chunk prefills while it speculates. vLLM V0 could not before v0.6.4
    (``SpecDecodeWorker`` scored decode-only batches; vllm-project/vllm#9291, opened 2024-10-11, first
    combined them), so a V0 replica that speculates prefills whole prompts first (``scheduler="vllm"``);
    ``sim/names.py`` refuses ``scheduler="sarathi"`` with ``speculation_depth > 0`` on such an engine.
    True: no constraint (V1 always chunks)."""
    ngram_per_seq_s: float | None = None
    """CPU time of the n-gram (prompt-lookup) proposer per sequence and speculative step; None: the
    engine's ``per_seq_s`` (vLLM V1's numba proposer, ~20 us a call). vLLM V0 (``NGramWorker.
    sampler_output``, v0.6.1) loops over the sequences in Python with eager torch ops: a host-to-GPU
    copy of the token ids, per n-gram size tried a compare / all / max and a blocking ``.item()``, on
    a match eight more ops building the proposal and its one-hot probabilities, and a zero logprobs
    tensor: ~15 ops, each at the eager per-op launch cost (``_EAGER_OP_S``)."""

    @classmethod
    def from_dict(cls, d: dict) -> EngineParams:
        known = set(cls.__dataclass_fields__)
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown engine calibration keys {sorted(unknown)}; valid: {sorted(known)}")
        d = dict(d)
        if "allreduce_latency_tp_s" in d:  # JSON lists -> hashable pairs
            d["allreduce_latency_tp_s"] = tuple((int(t), float(v)) for t, v in d["allreduce_latency_tp_s"])
        if "sampler_s_per_logit_gpu" in d:
            d["sampler_s_per_logit_gpu"] = tuple((str(g), float(v)) for g, v in d["sampler_s_per_logit_gpu"])
        return cls(**d)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    def engine_allreduce_latency_s(self, tp: int) -> float | None:
        """The engine's all-reduce latency at ``tp`` GPUs (None: the GPU's NCCL profile only)."""
        return dict(self.allreduce_latency_tp_s).get(int(tp), self.allreduce_latency_s)

    def sampler_s_per_logit_on(self, gpu_name: str) -> float:
        """The sampler's seconds per sequence and vocabulary entry on ``gpu_name``."""
        return dict(self.sampler_s_per_logit_gpu).get(gpu_name, self.sampler_s_per_logit)

    def synchronous(self) -> EngineParams:
        """The same engine scheduling synchronously (``async_scheduling=False``)."""
        return dataclasses.replace(self, async_scheduling=False)


def cudagraph_padded_tokens(n: int, max_tokens: int) -> int:
    """``n`` batched tokens rounded up to the next CUDA-graph capture size (vLLM's default list
    ``[1, 2, 4] + range(8, 256, 8) + range(256, max_tokens + 1, 16)``); ``n`` itself when it is
    above ``max_tokens`` (the iteration runs without a graph) or when padding is off (0)."""
    if n <= 0 or n > max_tokens:
        return n
    if n <= 2:
        return n
    if n <= 4:
        return 4
    if n < 256:
        return min(-(-n // 8) * 8, max_tokens)
    return min(256 + -(-(n - 256) // 16) * 16, max_tokens)


@lru_cache(maxsize=1)
def load_calibration() -> dict:
    """The committed calibration (``inferencegym/data/calibration.json``), parsed once per process."""
    try:
        text = resources.files("inferencegym").joinpath("data", "calibration.json").read_text("utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(
            "inferencegym/data/calibration.json is missing from the installed package: reinstall "
            "InferenceGym or regenerate it with `python -m inferencegym.sim.calibration.fit`") from None
    return json.loads(text)


def check_engine_profile(name: str) -> str:
    """``name`` if it is a known engine profile, else ValueError listing the valid ones."""
    if name not in ENGINE_PROFILES:
        raise ValueError(f"unknown engine profile {name!r}; valid: {', '.join(ENGINE_PROFILES)}")
    return name


@lru_cache(maxsize=8)
def engine_params(profile: str) -> EngineParams:
    """Fitted overhead of engine profile ``profile`` (all zeros for ``kernel-only``)."""
    check_engine_profile(profile)
    if profile == "kernel-only":
        return EngineParams(fixed_s=0.0, per_layer_s=0.0, per_layer_tp_s=0.0, per_seq_s=0.0,
                            per_token_s=0.0, kernel_slowdown_per_token=0.0)
    if profile == "vllm-v0":  # V0 (2024): one process (API server in the engine's loop), synchronous
        # steps, graphs up to batch 256
        cal = load_calibration()["engines"]
        # the V1 engine figures as fitted over the 2024 kernels V0 ran (``calibration.fit``)
        v1 = EngineParams.from_dict({**cal["vllm-v1"], **cal.get("vllm-v0", {})})
        return dataclasses.replace(v1, async_scheduling=False, frontend_s=0.0, cudagraph_max_tokens=256,
                                   gpu_fixed_s=0.0, gpu_per_layer_s=0.0, allreduce_latency_tp_s=(),
                                   sampler_s_per_logit=0.0, sampler_s_per_logit_gpu=(),
                                   api_server_per_request_s=_V0_API_SERVER_PER_REQUEST_S,
                                   spec_batch_expansion=True, spec_chunked_prefill=False,
                                   ngram_per_seq_s=_V0_NGRAM_OPS * _eager_op_s(),
                                   spec_per_seq_s=float(load_calibration()["engines"]["vllm-2023"]["per_seq_s"]))
    return EngineParams.from_dict(load_calibration()["engines"][profile])


_V0_NGRAM_OPS = 15
"""Eager torch ops per sequence of vLLM V0's n-gram proposer (see ``EngineParams.ngram_per_seq_s``)."""
_EAGER_LAYER_OPS = 9
"""Kernels of one Llama layer run eagerly (2 norms, QKV, RoPE, attention, O, gate-up, SiLU-mul, down)."""


def _eager_op_s() -> float:
    """CPU launch cost of one eager torch op: the ``vllm-2023`` engines (no CUDA graphs) pay
    ``per_layer_s`` per layer (fitted on SplitwiseSim's measured times) for ``_EAGER_LAYER_OPS`` ops."""
    return float(load_calibration()["engines"]["vllm-2023"]["per_layer_s"]) / _EAGER_LAYER_OPS


_REGISTERED_KERNELS: dict[str, dict] = {}


def register_gpu_kernel(gpu_name: str, kernel: dict) -> None:
    """Use ``kernel`` (KernelParams fields without the all-reduce ones) for ``gpu_name`` from now on
    (a GPU fitted by ``inferencegym calibrate --profile``; see ``calibration.custom``)."""
    KernelParams.from_dict(dict(kernel))  # validate the keys now
    _REGISTERED_KERNELS[gpu_name] = dict(kernel)
    _params_for.cache_clear()


@lru_cache(maxsize=64)
def _params_for(gpu_name: str, network_profile: str,
                engine_profile: str = "vllm-2023") -> tuple[KernelParams, EngineParams, bool]:
    cal = load_calibration()
    gpus = {**cal.get("gpus", {}), **_REGISTERED_KERNELS}
    if gpu_name in gpus:
        kd = dict(gpus[gpu_name])
        fitted = True
    else:
        kd = dict(cal.get("default_gpu", {}))
        fitted = False
    attn_from = cal.get("engine_attention", {}).get(engine_profile)
    if attn_from and gpu_name in gpus:  # the profile's engines ran another generation's kernels
        kd.update({k: v for k, v in gpus[attn_from].items() if k.startswith("attn_")})
    era_gemm = cal.get("engine_gemm", {}).get(engine_profile, {}).get(gpu_name)
    if era_gemm and gpu_name not in _REGISTERED_KERNELS:  # the profile's engines ran 2024's GEMM kernels
        kd.update(era_gemm)
    net = cal.get("network", {}).get(network_profile)
    if net:
        kd["allreduce_latency_s"] = net["latency_s"]
        kd["allreduce_gbytes_per_s"] = net["gbytes_per_s"]
    kernel = KernelParams.from_dict(kd)
    return kernel, engine_params(engine_profile), fitted


def engine_gemm_gpus(engine_profile: str) -> tuple[str, ...]:
    """The GPUs whose GEMMs an engine profile runs at another software generation's fit
    (``vllm-2023``, ``vllm-v0``, ``kernel-only`` on H100: Vidur's 2024 profile; ``calibration.fit``)."""
    return tuple(sorted(load_calibration().get("engine_gemm", {}).get(engine_profile, {})))


def engine_attention_gpu(engine_profile: str) -> str | None:
    """The GPU whose attention fit an engine profile imposes on every calibrated GPU (``vllm-2023``:
    the A100 fit, 2023 engines had no Hopper-optimised attention), or None (each GPU's own)."""
    return load_calibration().get("engine_attention", {}).get(engine_profile)
