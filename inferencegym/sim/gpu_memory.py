"""One GPU's memory of a replica as vLLM splits it: weights, the profiling run's peak, non-torch
memory and what is left for the KV cache (the one KV-capacity rule of every model and engine).

vLLM sizes the KV cache once, at start-up (``Worker.determine_available_memory``, vLLM V1
``v1/worker/gpu_worker.py``; ``vllm/utils/mem_utils.py::memory_profiling``)::

    KV bytes = gpu_memory_utilization x total device memory
               - weights - torch peak increase of the profiling run - non-torch increase

* **The profiling run** (``GPUModelRunner.profile_run``) runs the model once on
  ``max_num_batched_tokens`` dummy tokens spread over ``min(max_num_seqs, max_num_batched_tokens)``
  requests, then, on the last pipeline stage, the sampler over those requests' logits
  (``_dummy_sampler_run``: temperature, top-k = V - 1, top-p 0.9). Its peak is the larger of the
  forward pass's transients (:func:`forward_peak_bytes`) and the sampler's buffers beside the
  retained hidden states (:func:`sampler_peak_bytes`); the sampler dominates for large
  vocabularies at large ``max_num_seqs``. Its bytes per logit element depend on the top-k/top-p
  path (:data:`SAMPLER_BYTES_PER_LOGIT`):

  - **PyTorch-native** (vLLM V0; V1 without FlashInfer, e.g. pip installs): every row sorted with
    its int64 indices. **38.0 bytes** measured on an H100 (PyTorch 2.11; 38.0-38.6 at 128-1,024
    requests and 32,000-201,088 entries; ``benchmarks/device/sampler_memory.py``,
    ``benchmarks/results/sampler_memory_h100.json``): BF16 logits 2, their FP32 copy 4, the
    sorted values 4 and indices 8, the sort's double buffers 12, masks, scatter and probabilities.
  - **FlashInfer** (vLLM V1 wherever FlashInfer is installed, as in its container: V1 read an unset
    ``VLLM_USE_FLASHINFER_SAMPLER`` as "on", ``v1/sample/ops/topk_topp_sampler.py``, "In V0, None
    means False, while in V1, None means True"; releases of 2026 made it opt-in):
    ``top_k_top_p_sampling_from_logits`` needs no sort: BF16 logits 2, the FP32 copy 4, the
    top-k-masked logits 4 and the probabilities 4 = **14 bytes** (counted from the op sequence).

* **Non-torch memory**: what the run adds outside PyTorch's allocator (cuBLAS workspaces and
  handles; NCCL and custom all-reduce buffers on multi-GPU replicas).
* **CUDA graphs are not in the rule**: vLLM captures them after the KV cache is allocated
  (``compile_or_warm_up_model``: "``memory_profiling`` does not consider CUDAGraph memory size"), so
  they come out of the ``1 - gpu_memory_utilization`` headroom, as does the sampler's second
  warm-up after capture.

Checked against published vLLM logs in ``docs/bench/models_memory.md`` ("The KV-capacity
rule against vLLM's logs").
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from inferencegym.sim.execution_rates import ACT_BYTES
from inferencegym.sim.presets import GIB, GPUPreset, ModelPreset

SAMPLER_BYTES_PER_LOGIT = {"torch-native": 38.0, "flashinfer": 14.0}
"""Peak bytes per logit element (requests x vocabulary) of the profiling run's sampler pass by
top-k/top-p path: PyTorch-native measured on an H100 (``benchmarks/results/sampler_memory_h100.json``),
FlashInfer counted (module docstring)."""
V0_ENGINE_PROFILES = ("vllm-v0", "vllm-2023")
"""Engine profiles of vLLM V0, whose sampler sorts (PyTorch-native); the others are vLLM V1 as its
container ships it (FlashInfer)."""
NON_TORCH_SINGLE_GPU_BYTES = 0.17e9
"""Non-torch memory of a one-GPU replica: the cuBLAS workspace and handles the first GEMM adds,
measured on an H100 (165.7 MB, ``benchmarks/results/sampler_memory_h100.json``); vLLM's own
one-GPU logs print 0.01-0.20 GiB ("non_torch_memory takes 0.12GiB", Llama-3-8B on an H100)."""
NON_TORCH_MULTI_GPU_BYTES = 1.07 * GIB
"""Non-torch memory per GPU of a multi-GPU replica: NCCL and custom all-reduce buffers besides the
cuBLAS workspace (vLLM log of DeepSeek-V2.5 at TP8: "non_torch_memory takes 1.07GiB"; other TP8
logs 1.2-1.8 GiB)."""


def sampler_path(engine_profile: str) -> str:
    """The top-k/top-p path of an engine profile's sampler (:data:`V0_ENGINE_PROFILES`: PyTorch-native)."""
    return "torch-native" if engine_profile in V0_ENGINE_PROFILES else "flashinfer"


def sampler_requests(max_num_seqs: int, max_batched_tokens: int) -> int:
    """Requests the profiling run samples: ``min(max_num_seqs, max_num_batched_tokens)``."""
    return max(1, min(int(max_num_seqs), int(max_batched_tokens)))


def sampler_peak_bytes(model: ModelPreset, *, max_num_seqs: int, max_batched_tokens: int,
                       path: str = "flashinfer") -> float:
    """The sampler pass of the profiling run on one GPU, with the forward's hidden states it keeps.

    Every tensor-parallel rank holds the whole vocabulary's logits (vLLM V1 all-gathers them) and
    runs the sampler, so the term is not divided by the parallel degree."""
    r = sampler_requests(max_num_seqs, max_batched_tokens)
    return (r * model.vocab_size * SAMPLER_BYTES_PER_LOGIT[path]
            + max_batched_tokens * model.hidden_size * ACT_BYTES)


def forward_peak_bytes(model: ModelPreset, *, max_batched_tokens: int, q_heads: int, kv_heads: int,
                       tensor_parallel: int, moe_workspace_bytes: float = 0.0) -> float:
    """Transients of the forward pass over ``max_batched_tokens`` tokens on one GPU: the hidden and
    residual streams' widest layer tensors (hidden, Q/K/V, gate+up and the activation), plus a
    mixture-of-experts layer's fused-MoE buffers. Eager PyTorch measured 1.7x this on a
    Llama-3-8B layer (``benchmarks/results/forward_memory_h100.json``); vLLM's compiled graph fuses
    the activation and keeps the K/V heads unexpanded."""
    f_g = model.ffn_size / tensor_parallel
    qk = (q_heads + kv_heads) * model.head_dim
    return float(max_batched_tokens * (model.hidden_size + qk + 3 * f_g) * ACT_BYTES
                 + moe_workspace_bytes)


def non_torch_bytes(gpus_per_replica: int) -> float:
    """Non-torch memory per GPU (:data:`NON_TORCH_SINGLE_GPU_BYTES` / :data:`NON_TORCH_MULTI_GPU_BYTES`)."""
    return NON_TORCH_SINGLE_GPU_BYTES if gpus_per_replica <= 1 else NON_TORCH_MULTI_GPU_BYTES


@dataclass(frozen=True, kw_only=True)
class MemoryBudget:
    """One GPU's memory of a replica (bytes)."""

    usable_bytes: float
    """``gpu_memory_utilization`` x the device's total memory."""
    weight_bytes_per_gpu: float
    """Weights on the GPU (with pipeline stages: the largest stage's layers, embedding or LM head)."""
    kv_bytes_per_token: float
    """KV-cache bytes per token on the GPU (its heads' share of its stage's layers)."""
    forward_peak_bytes: float
    """The profiling run's forward transients (:func:`forward_peak_bytes`)."""
    sampler_bytes_per_request: float
    """The sampler pass's bytes per sampled request (vocabulary x :data:`SAMPLER_BYTES_PER_LOGIT`)."""
    sampler_path: str
    """The sampler's top-k/top-p path (``flashinfer`` or ``torch-native``, :func:`sampler_path`)."""
    retained_hidden_bytes: float
    """The forward's hidden states still held while the sampler runs."""
    max_batched_tokens: int
    """The profiling run's token count (``max_num_batched_tokens``)."""
    non_torch_bytes: float
    """Non-torch memory (:func:`non_torch_bytes`)."""

    def activation_peak_bytes(self, max_num_seqs: int) -> float:
        """The profiling run's torch peak above the weights at ``max_num_seqs``."""
        r = sampler_requests(max_num_seqs, self.max_batched_tokens)
        return max(self.forward_peak_bytes,
                   self.retained_hidden_bytes + r * self.sampler_bytes_per_request)

    def non_kv_bytes(self, max_num_seqs: int) -> float:
        """Everything but the KV cache: weights, the profiling peak and non-torch memory."""
        return self.weight_bytes_per_gpu + self.activation_peak_bytes(max_num_seqs) + self.non_torch_bytes

    def kv_free_bytes(self, max_num_seqs: int) -> float:
        """What is left for the KV cache at ``max_num_seqs`` (0 when nothing is)."""
        return max(self.usable_bytes - self.non_kv_bytes(max_num_seqs), 0.0)

    def variant(self, *, usable_bytes: float | None = None, max_batched_tokens: int | None = None,
                sampler: str | None = None) -> MemoryBudget:
        """The same GPU under other engine settings: another usable memory, another
        ``max_num_batched_tokens`` (the forward's transients and retained states scale with it) or
        another sampler path (for comparisons with published logs)."""
        t = self.max_batched_tokens if max_batched_tokens is None else int(max_batched_tokens)
        path = self.sampler_path if sampler is None else sampler
        scale = t / self.max_batched_tokens
        return replace(
            self, usable_bytes=self.usable_bytes if usable_bytes is None else float(usable_bytes),
            max_batched_tokens=t, forward_peak_bytes=self.forward_peak_bytes * scale,
            retained_hidden_bytes=self.retained_hidden_bytes * scale, sampler_path=path,
            sampler_bytes_per_request=self.sampler_bytes_per_request
            / SAMPLER_BYTES_PER_LOGIT[self.sampler_path] * SAMPLER_BYTES_PER_LOGIT[path])


def memory_budget(*, model: ModelPreset, gpu: GPUPreset, quantization_name: str, tensor_parallel: int,
                  pipeline_parallel: int, gemms: list[tuple[int, int]], weight_bytes_per_param: float,
                  moe_weight_bytes_gpu: float | None, kv_bytes_per_token_layer: float,
                  q_heads: int, kv_heads: int, max_batched_tokens: int,
                  gpu_memory_utilization: float, check: bool, kv_layers: int | None = None,
                  moe_workspace_bytes: float = 0.0, gpus_per_replica: int = 1,
                  sampler: str = "flashinfer", check_max_num_seqs: int = 1) -> MemoryBudget:
    """Split one GPU's memory; ValueError when the weights and the profiling peak do not fit
    (``check``, at ``check_max_num_seqs`` sampled requests).

    ``gemms``: the ``(K, N)`` shapes of one dense layer's GEMMs on one GPU (QKV, O, gate+up, down);
    ``moe_weight_bytes_gpu``: one MoE layer's expert weights on one GPU (None: dense model);
    ``kv_layers``: layers whose KV grows with the context (None: all; sliding-window layers hold
    their window only, ``sim/sliding_window.py``); ``moe_workspace_bytes``: the fused-MoE buffers of
    the largest batch; ``gpus_per_replica``: the replica's GPUs (one: no NCCL buffers); ``sampler``:
    the sampler's top-k/top-p path (:func:`sampler_path`).
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
    budget = MemoryBudget(
        usable_bytes=float(g.memory_bytes * gpu_memory_utilization), weight_bytes_per_gpu=weights,
        kv_bytes_per_token=kv_per_token,
        forward_peak_bytes=forward_peak_bytes(m, max_batched_tokens=max_batched_tokens, q_heads=q_heads,
                                              kv_heads=kv_heads, tensor_parallel=t,
                                              moe_workspace_bytes=moe_workspace_bytes),
        sampler_bytes_per_request=m.vocab_size * SAMPLER_BYTES_PER_LOGIT[sampler], sampler_path=sampler,
        retained_hidden_bytes=float(max_batched_tokens * h * ACT_BYTES),
        max_batched_tokens=int(max_batched_tokens), non_torch_bytes=non_torch_bytes(gpus_per_replica))
    if check and budget.kv_free_bytes(check_max_num_seqs) <= 0:
        raise ValueError(
            f"{m.name} ({quantization_name}) needs {weights / 1e9:.1f} GB of weights per GPU "
            f"at tensor_parallel={t}, which with the profiling run's activations exceeds the "
            f"{g.memory_gbytes:.0f} GB of {g.name} (x{gpu_memory_utilization} usable); "
            f"use a larger tensor_parallel{' or expert_parallel' if m.is_moe else ''} or a "
            f"lower-bit quantization")
    return budget
