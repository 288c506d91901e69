"""Execution-time model: how long one iteration of a replica takes.

A roofline model per transformer layer (summed over layers; tensor parallelism splits heads and the
MLP across the GPUs of a replica), with efficiencies fitted on measured kernel profiles (Vidur's
A100/H100 profiles, measured H200 rows) and the overhead of a named engine profile (``vllm-v1``,
``vllm-2023``, ``kernel-only``; parameters in ``execution_params``); see ``docs/calibration.md``.

Per layer and per iteration with ``n`` batched tokens:

* GEMMs (QKV, O, gate+up, down): ``floor + ((F/(P*ec))**p + (M/(BW*em))**p)**(1/p)``, a smooth
  roofline max of compute time (FLOPs F at peak P) and memory time (bytes M: weights once per
  iteration plus activations at bandwidth BW);
* elementwise ops (2 RMSNorms, RoPE, SiLU*mul, one residual add as profiled by Vidur; vLLM fuses
  the other into the norm): bandwidth-bound, one efficiency per op;
* attention prefill per chunk (FlashAttention-like): causal FLOPs ``4*heads*d*N*(N+1)/2`` and
  cached-context FLOPs ``4*heads*d*N*C`` at their own efficiencies, roofline with KV bytes read;
* attention decode: KV bytes read (linear in the batch's total context), a term per sequence and
  KV head on the GPU (GQA, TP) and, with speculative verification, k+1 queries per sequence;
* tensor-parallel all-reduce, two per layer: ``latency(tp) + bytes / bandwidth(tp)``;
* outside the layers: embedding, final norm, LM head (FP16, only on tokens that need logits);
* engine overhead per iteration: kernel time x ``(1 + slowdown * n)`` plus ``fixed + layers *
  (per_layer + per_layer_tp * (tp-1)) + per_seq * sequences + per_token * n`` (scheduling,
  sampling, kernel launches, synchronisation: what kernel profiles miss); an engine with its own
  all-reduce kernel (``vllm-v1``) replaces the NCCL latency where it is lower.

Speculative decoding (depth k), by proposer (``from_preset(draft_model=...)``): a draft model, k
sequential draft decode passes at batch B (TP 1 on one GPU of the replica); ``"eagle"``, k passes of
a one-layer head of the target's width with the target's LM head, at the target's TP (EAGLE, Li et
al. 2024); ``"ngram"``, prompt lookup on the CPU, no GPU work (one pass over the sequences at the
engine's per-sequence rate). Then one target pass verifying k+1 tokens per sequence: one sequence
with k+1 queries (V1), or by batch expansion into k+1 single-query sequences (vLLM V0 of 2024,
``EngineParams.spec_batch_expansion``). Quantization tiers
change the weight bytes, the GEMM compute peak (W8A8) and add dequantisation overhead (W4A16).

The hot path uses plain Python floats and memoises per token count.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from inferencegym.sim.calibration_error import calibration_error_for
from inferencegym.sim.execution_params import (  # noqa: F401  (re-exported: the public names live here too)
    DEFAULT_ENGINE_PROFILE,
    ENGINE_PROFILES,
    EngineParams,
    KernelParams,
    _params_for,
    check_engine_profile,
    cudagraph_padded_tokens,
    engine_attention_gpu,
    engine_params,
    load_calibration,
    register_gpu_kernel,
)
from inferencegym.sim.moe import MXFP4_HOPPER_PAD, MoECost, dequant_weight_factor, moe_kernel_efficiency
from inferencegym.sim.sliding_window import window_keys
from inferencegym.sim.pipeline import (
    PP_DEGREES,
    microbatch_count,
    p2p_time_s,
    split_microbatches,
    step_time_s,
)
from inferencegym.sim.presets import (
    FP8_COMPUTE_EFFICIENCY,
    GIB,
    GPUPreset,
    ModelPreset,
    QuantizationTier,
    get_gpu,
    get_model,
    get_quantization,
)

__all__ = [
    "DEFAULT_ENGINE_PROFILE",
    "ENGINE_PROFILES",
    "EngineParams",
    "ExecutionModel",
    "KernelParams",
    "expected_tokens_per_step",
    "load_calibration",
]

_VALID_TP = (1, 2, 4, 8)
_VALID_EP = (1, 2, 4, 8, 16, 32, 64)
KV_CACHE_DTYPES = ("auto", "fp8")
_ACT_BYTES = 2.0  # FP16/BF16 activations


SPEC_PROPOSERS = ("ngram", "eagle")
"""Draft-model-free proposers ``from_preset(draft_model=...)`` accepts besides model preset names."""


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """Expected tokens produced by one speculative step of depth ``k`` at acceptance ``alpha``.

    ``(1 - alpha**(k+1)) / (1 - alpha)`` (Leviathan et al., 2023), = k+1 at alpha = 1, = 1 at k = 0.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"acceptance alpha must be in [0, 1], got {alpha!r}")
    if k < 0:
        raise ValueError(f"speculation depth k must be >= 0, got {k!r}")
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


class ExecutionModel:
    """Time of one iteration of one replica (``tensor_parallel`` GPUs running one model copy).

    Build it with :meth:`from_preset`. All methods are pure (memoised) functions of their
    arguments: one instance can be shared by many replicas and simulators.
    """

    def __init__(
        self,
        *,
        model: ModelPreset,
        gpu: GPUPreset,
        tensor_parallel: int,
        quantization: QuantizationTier,
        kernel: KernelParams,
        engine: EngineParams,
        draft: ModelPreset | str | None = None,
        engine_overhead: bool = True,
        gpu_memory_utilization: float = 0.9,
        max_batched_tokens: int = 8192,
        gpu_hour_usd: float | None = None,
        calibrated: bool = False,
        check_memory: bool = True,
        engine_profile: str = "custom",
        expert_parallel: int = 1,
        kv_cache_dtype: str = "auto",
        pipeline_parallel: int = 1,
    ) -> None:
        if pipeline_parallel not in PP_DEGREES or pipeline_parallel > model.num_layers:
            raise ValueError(f"pipeline_parallel must be one of {PP_DEGREES} and at most the "
                             f"{model.num_layers} layers of {model.name}, got {pipeline_parallel!r}")
        if expert_parallel not in _VALID_EP:
            raise ValueError(f"expert_parallel must be one of {_VALID_EP}, got {expert_parallel!r}")
        if expert_parallel > 1 and not model.is_moe:
            raise ValueError(f"expert_parallel={expert_parallel} needs a mixture-of-experts model; "
                             f"{model.name} is dense (use tensor_parallel or more replicas)")
        if kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype must be one of {KV_CACHE_DTYPES}, got {kv_cache_dtype!r}")
        if quantization.experts_only and not model.is_moe:
            raise ValueError(f"quantization {quantization.name!r} is the expert-weight format of "
                             f"mixture-of-experts checkpoints (gpt-oss); {model.name} is dense: use int4 "
                             f"(W4A16) or fp8")
        if quantization.dequant_instr_per_weight > 0 and gpu.fp4_tflops <= 0 and gpu.cuda_core_tflops <= 0:
            raise ValueError(f"quantization {quantization.name!r} on {gpu.name} needs the GPU's "
                             f"cuda_core_tflops (dequantisation rate) or fp4_tflops (native FP4); "
                             f"the preset gives neither: set one in the GPUPreset")
        if quantization.fp8_compute and gpu.fp8_tflops <= 0:
            raise ValueError(f"quantization 'fp8' needs FP8 tensor cores (Hopper/Ada or later); "
                             f"{gpu.name} has none: use h100-80gb, h200-141gb or l40s-48gb, or int8")
        if tensor_parallel not in _VALID_TP:
            raise ValueError(f"tensor_parallel must be one of {_VALID_TP}, got {tensor_parallel!r}")
        if model.num_heads % tensor_parallel:
            raise ValueError(f"{model.name} has {model.num_heads} heads, not divisible by "
                             f"tensor_parallel={tensor_parallel}")
        if not 0.0 < gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization!r}")
        if gpu_hour_usd is not None and not gpu_hour_usd >= 0:
            raise ValueError(f"gpu_hour_usd must be >= 0 (USD per GPU-hour) or None for the preset "
                             f"price, got {gpu_hour_usd!r}")
        self.model = model
        self.gpu = gpu
        self.tensor_parallel = int(tensor_parallel)
        self.quantization = quantization
        self.kernel = kernel
        self.engine = engine
        self.draft = draft
        self.engine_overhead = bool(engine_overhead)
        self.engine_profile = "kernel-only" if not engine_overhead else str(engine_profile)
        """Name of the engine-overhead profile (``custom`` for explicitly given parameters)."""
        self.gpu_memory_utilization = float(gpu_memory_utilization)
        self.max_batched_tokens = int(max_batched_tokens)
        self.calibrated = bool(calibrated)
        self._gpu_hour_override = gpu_hour_usd
        self._check_memory = bool(check_memory)
        self.expert_parallel = int(expert_parallel)
        """Expert-parallel degree: data-parallel attention ranks of ``tensor_parallel`` GPUs each,
        experts spread over all ``tensor_parallel * expert_parallel`` GPUs (1: experts split by TP)."""
        self.kv_cache_dtype = str(kv_cache_dtype)
        """``auto`` (FP16/BF16 KV cache) or ``fp8`` (1 byte per element: half the KV bytes)."""
        self.pipeline_parallel = int(pipeline_parallel)
        """Pipeline stages (``sim/pipeline.py``): consecutive layer groups on ``pipeline_parallel``
        GPU groups, the step cut into micro-batches (1: no pipeline)."""
        self._setup()

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_preset(
        cls,
        model: str = "llama-2-7b",
        gpu: str = "a100-80gb",
        tensor_parallel: int = 1,
        quantization: str = "fp16",
        *,
        draft_model: str | None = "default",
        engine_overhead: bool = True,
        engine_profile: str | None = None,
        gpu_memory_utilization: float = 0.9,
        gpu_hour_usd: float | None = None,
        expert_parallel: int = 1,
        kv_cache_dtype: str = "auto",
        pipeline_parallel: int = 1,
    ) -> ExecutionModel:
        """Model of ``model`` on ``tensor_parallel`` GPUs of type ``gpu`` at a quantization tier.

        ``draft_model``: the speculative proposer: a draft model preset (``"default"``: the model's
        preset draft), ``"ngram"`` (prompt lookup), ``"eagle"`` (a one-layer EAGLE head) or ``None``
        (no speculation). ``engine_profile``: the serving engine's per-iteration
        overhead, one of :data:`ENGINE_PROFILES` (default :data:`DEFAULT_ENGINE_PROFILE`);
        ``engine_overhead=False`` is an alias of ``engine_profile="kernel-only"`` (kernel time only,
        what Vidur's profiles measure). ``gpu_hour_usd`` overrides the preset price per GPU-hour.
        Raises ValueError for unknown names or when the weights do not fit in GPU memory.
        """
        mp = get_model(model)
        gp = get_gpu(gpu)
        qt = get_quantization(quantization)
        if draft_model == "default":
            draft_model = mp.draft_model
        if draft_model in SPEC_PROPOSERS:
            dp = draft_model
        else:
            try:
                dp = get_model(draft_model) if draft_model else None
            except ValueError as e:
                raise ValueError(f"draft_model must be 'default', a draft model preset, "
                                 f"{' or '.join(repr(p) for p in SPEC_PROPOSERS)} or None; {e}") from None
        if not engine_overhead:
            if engine_profile not in (None, "kernel-only"):
                raise ValueError(f"engine_overhead=False means engine_profile='kernel-only', but "
                                 f"engine_profile={engine_profile!r} was given; pass only one")
            engine_profile = "kernel-only"
        profile = check_engine_profile(engine_profile or DEFAULT_ENGINE_PROFILE)
        kernel, engine, fitted = _params_for(gp.name, gp.network_profile, profile)
        return cls(model=mp, gpu=gp, tensor_parallel=tensor_parallel, quantization=qt,
                   kernel=kernel, engine=engine, draft=dp, engine_overhead=profile != "kernel-only",
                   gpu_memory_utilization=gpu_memory_utilization, gpu_hour_usd=gpu_hour_usd,
                   calibrated=fitted and gp.calibrated, engine_profile=profile,
                   expert_parallel=expert_parallel, kv_cache_dtype=kv_cache_dtype,
                   pipeline_parallel=pipeline_parallel)

    def _replace(self, **kw) -> ExecutionModel:
        args = dict(model=self.model, gpu=self.gpu, tensor_parallel=self.tensor_parallel,
                    quantization=self.quantization, kernel=self.kernel, engine=self.engine,
                    draft=self.draft, engine_overhead=self.engine_overhead,
                    gpu_memory_utilization=self.gpu_memory_utilization,
                    max_batched_tokens=self.max_batched_tokens,
                    gpu_hour_usd=self._gpu_hour_override, calibrated=self.calibrated,
                    check_memory=self._check_memory, engine_profile=self.engine_profile,
                    expert_parallel=self.expert_parallel, kv_cache_dtype=self.kv_cache_dtype,
                    pipeline_parallel=self.pipeline_parallel)
        args.update(kw)
        return ExecutionModel(**args)

    def with_quantization(self, quantization: str) -> ExecutionModel:
        """A new model identical but for the quantization tier (``fp16``, ``int8``, ``int4``)."""
        return self._replace(quantization=get_quantization(quantization))

    def _setup(self) -> None:
        m, g, k, t = self.model, self.gpu, self.kernel, self.tensor_parallel
        qx = self.quantization  # the experts' tier; the dense weights' tier is q
        q = get_quantization("fp16") if qx.experts_only else qx
        d = m.head_dim
        h = m.hidden_size
        self._layers = m.num_layers
        self._q_heads = m.num_heads // t
        self._kv_heads = max(1, m.num_kv_heads // t)  # replicated when tp > kv heads
        self._peak_fp16 = g.fp16_tflops * 1e12
        peak_gemm = (g.fp8_tflops * q.compute_efficiency if q.fp8_compute
                     else g.int8_tops if q.int8_compute else g.fp16_tflops) * 1e12
        bw = g.mem_gbytes_per_s * 1e9
        self._bw = bw
        wb = q.weight_bytes_per_param
        a_in = 1.0 if (q.int8_compute or q.fp8_compute) else _ACT_BYTES
        kv_el = 1.0 if self.kv_cache_dtype == "fp8" else 2.0
        self._dp = self.expert_parallel if m.is_moe else 1
        o_in = self._q_heads * d
        qkv_n = ((m.attn_linear_params - m.num_heads * d * h) // (h * t) if m.is_mla
                 else (self._q_heads + 2 * self._kv_heads) * d)
        # GEMMs of one layer on one GPU: (K, N)
        gemms = [
            (h, qkv_n),  # QKV (MLA: the query and KV down/up projections)
            (o_in, h),  # O
            (h, (2 if m.gated_mlp else 1) * m.ffn_size // t),  # gate + up
            (m.ffn_size // t, h),  # down
        ]
        self._gemms = gemms
        p = k.gemm_p
        self._gemm_terms = []  # per GEMM: (flop_time_per_token, weight_time, act_time_per_token)
        inv_c = q.gemm_compute_overhead / (peak_gemm * k.gemm_eff_compute)
        inv_m = 1.0 / (bw * k.gemm_eff_mem)
        for kk, nn in gemms:
            self._gemm_terms.append((2.0 * kk * nn * inv_c, kk * nn * wb * inv_m,
                                     (kk * a_in + nn * _ACT_BYTES) * inv_m))
        self._gemm_p = p
        self._gemm_inv_p = 1.0 / p
        # elementwise ops per layer (as profiled by Vidur; vLLM fuses the second residual add into
        # the post-attention norm, so one add): bytes per token / (bandwidth * efficiency)
        f_g = m.ffn_size / t
        qk = (self._q_heads + self._kv_heads) * d
        act_in = 2 if m.gated_mlp else 1
        self._elem_coef = {
            "input_layernorm": 2 * h * _ACT_BYTES / (bw * k.norm_eff_mem),
            "attn_rope": 2 * qk * _ACT_BYTES / (bw * k.rope_eff_mem),
            "post_attention_layernorm": 2 * h * _ACT_BYTES / (bw * k.norm_eff_mem),
            "mlp_act": (act_in + 1) * f_g * _ACT_BYTES / (bw * k.act_eff_mem),
            "add": 3 * h * _ACT_BYTES / (bw * k.add_eff_mem),
        }
        # W8A8: per-token activation quantisation before each GEMM input (read 2B, write 1B)
        self._elem_coef["act_quant"] = (q.activation_quant_ops * 3 * h / (bw * k.add_eff_mem))
        self._n_elem_ops = 5 + q.activation_quant_ops
        self._elem_time_per_token = sum(self._elem_coef.values())
        # all-reduce after O and after down (TP > 1)
        lat, ar_bw = k.allreduce(t)
        e_lat = self.engine.allreduce_latency_s if self.engine_overhead else None
        if e_lat is not None and t > 1 and g.network_profile != "pcie":
            lat = min(lat, e_lat)
        self._ar_lat = lat
        self._ar_time_per_token = (h * _ACT_BYTES / ar_bw) if t > 1 else 0.0
        # attention (MLA: the latent KV is replicated on every GPU of a rank; prefill runs the
        # decompressed heads, decode the weight-absorbed form over the 576-wide latent)
        if m.is_mla:
            self._kv_bytes_per_token_layer = float(m.kv_elems_per_token_layer) * kv_el
            self._attn_flop_per_qk = 2.0 * self._q_heads * (2 * d + m.qk_rope_head_dim)
            self._attn_dec_flop_per_qk = 2.0 * self._q_heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim)
        else:
            self._kv_bytes_per_token_layer = 2.0 * self._kv_heads * d * kv_el
            self._attn_flop_per_qk = 4.0 * self._q_heads * d  # QK^T and PV, per query per key
            self._attn_dec_flop_per_qk = self._attn_flop_per_qk
        # sliding-window layers (gpt-oss; sim/sliding_window.py): window-bounded attention and KV
        self._sw = m.sliding_window if m.sliding_window_layers else 0
        self._sw_layers = m.sliding_window_layers if self._sw else 0
        self._full_layers = m.num_layers - self._sw_layers
        self._attn_pf_inv_c = 1.0 / (self._peak_fp16 * k.attn_prefill_eff_compute)
        self._attn_pf_ctx_inv_c = 1.0 / (self._peak_fp16 * k.attn_prefill_ctx_eff_compute)
        self._attn_pf_inv_m = 1.0 / (bw * k.attn_prefill_eff_mem)
        self._attn_dec_per_seq = k.attn_decode_per_seq_kv_head_s * (
            1 if m.is_mla else self._kv_heads) / self._dp
        self._attn_dec_inv_c = 1.0 / (self._peak_fp16 * k.attn_decode_eff_compute)
        self._attn_dec_inv_m = 1.0 / (bw * k.attn_decode_eff_mem)
        # outside the layers: embedding gather + final norm (bandwidth), LM head GEMM (FP16)
        self._outer_elem_per_token = (2 * 2 * h + 2 * 2 * h) / (bw * k.norm_eff_mem)
        vocab_g = m.vocab_size / t
        self._lm_flop_time = 2.0 * h * vocab_g / (self._peak_fp16 * k.gemm_eff_compute)
        self._lm_weight_time = h * vocab_g * _ACT_BYTES / (bw * k.gemm_eff_mem)
        self._lm_act_time = (h + vocab_g) * _ACT_BYTES / (bw * k.gemm_eff_mem)
        # engine overhead
        e = self.engine
        if self.engine_overhead:
            self._ovh_fixed = (e.fixed_s + self._layers * (e.per_layer_s + e.per_layer_tp_s * (t - 1)))
            self._ovh_seq = e.per_seq_s / self._dp
            self._ovh_tok = e.per_token_s
            self._slow = e.kernel_slowdown_per_token
        else:
            self._ovh_fixed = self._ovh_seq = self._ovh_tok = self._slow = 0.0
        self._async = bool(self.engine_overhead and e.async_scheduling)
        self._graph_max = int(e.cudagraph_max_tokens) if self.engine_overhead else 0
        self.frontend_s = float(e.frontend_s) if self.engine_overhead else 0.0
        self.api_server_per_request_s = float(e.api_server_per_request_s) if self.engine_overhead else 0.0
        """Per-request API-server work ahead of the engine, served in arrival order (engine profile)."""
        """API-server latency per request (engine profile), added to TTFT and E2E by the replica."""
        # mixture of experts (sim/moe.py)
        self._moe = None
        if m.is_moe:
            x_wb, x_a_in, x_inv_c, x_wfac, x_pad = wb, a_in, inv_c, 1.0, (1, 1)
            if qx.experts_only:
                x_wb, x_wfac = qx.weight_bytes_per_param, 1.0
                if g.fp4_tflops > 0:  # native FP4 operands, MXFP8 activations: the FP8 MMA rate
                    x_a_in = 1.0
                    x_inv_c = 1.0 / (g.fp8_tflops * FP8_COMPUTE_EFFICIENCY * 1e12 * k.gemm_eff_compute)
                else:  # upconverted to BF16 in the kernel (W4A16; Marlin's padded layout)
                    x_pad = MXFP4_HOPPER_PAD
                    x_inv_c = qx.gemm_compute_overhead / (self._peak_fp16 * k.gemm_eff_compute)
                    x_wfac = dequant_weight_factor(
                        instr_per_weight=qx.dequant_instr_per_weight, weight_bytes=x_wb,
                        achieved_bytes_per_s=bw * k.gemm_eff_mem,
                        instr_per_s=g.cuda_core_tflops * 1e12 / 2.0)
            self._moe = MoECost(
                model=m, gpu=g, tensor_parallel=t, expert_parallel=self.expert_parallel,
                weight_bytes=x_wb, act_in_bytes=x_a_in, inv_c=x_inv_c,
                inv_c_fp16=1.0 / (self._peak_fp16 * k.gemm_eff_compute), inv_m=inv_m, gemm_p=p,
                gemm_floor_s=k.gemm_floor_s, act_eff_mem=k.act_eff_mem, elem_floor_s=k.elem_floor_s,
                a2a_latency_s=k.allreduce(min(t * self.expert_parallel, 8))[0],
                weight_time_factor=x_wfac,
                grouped_compute_efficiency=moe_kernel_efficiency(m.moe_kernel), pad_to=x_pad)
        # memory
        lin_params_gpu = sum(kk * nn for kk, nn in gemms)
        attn_params_gpu = sum(kk * nn for kk, nn in gemms[:2])
        emb_params_gpu = m.vocab_size * h / t * (1 if m.tied_embeddings else 2)
        moe_bytes = (m.moe_layers * (attn_params_gpu * wb + self._moe.weight_bytes_gpu)
                     if self._moe else 0.0)
        # pipeline stages: the largest stage holds ceil(L / P) layers and the embedding or the LM head
        pp = self.pipeline_parallel
        self._pp = pp
        stage_frac = -(-m.num_layers // pp) / m.num_layers
        emb_gpu = emb_params_gpu if (pp == 1 or m.tied_embeddings) else emb_params_gpu / 2
        self.weight_bytes_per_gpu = float(
            ((m.num_layers - m.moe_layers) * lin_params_gpu * wb + moe_bytes
             + m.num_layers * 2 * h * _ACT_BYTES) * stage_frac + emb_gpu * _ACT_BYTES + h * _ACT_BYTES)
        self.kv_bytes_per_token = float(self._full_layers * self._kv_bytes_per_token_layer * stage_frac)
        """KV bytes per token on one GPU (with pipeline stages: its stage's layers; sliding-window
        layers hold their window only and are not counted, ``sim/sliding_window.py``)."""
        self._p2p_lat = k.allreduce(2)[0]
        self._p2p_bw = g.intra_node_gbytes_per_s * 1e9
        self._stage_model: ExecutionModel | None = None
        self.activation_reserve_bytes = float(
            GIB + self.max_batched_tokens * (h + qk + 3 * f_g) * _ACT_BYTES)
        if self._moe is not None:  # the fused-MoE buffers of the largest batch
            self.activation_reserve_bytes += self._moe.workspace_bytes(self.max_batched_tokens)
        free = g.memory_bytes * self.gpu_memory_utilization - self.weight_bytes_per_gpu \
            - self.activation_reserve_bytes
        if free <= 0 and self._check_memory:
            raise ValueError(
                f"{m.name} ({qx.name}) needs {self.weight_bytes_per_gpu / 1e9:.1f} GB of weights per GPU "
                f"at tensor_parallel={t}, which with the activation reserve exceeds the "
                f"{g.memory_gbytes:.0f} GB of {g.name} (x{self.gpu_memory_utilization} usable); "
                f"use a larger tensor_parallel{' or expert_parallel' if m.is_moe else ''} or a "
                f"lower-bit quantization")
        self._kv_free_bytes = max(free, 0.0)
        # caches
        self._tok_cache: dict[int, float] = {}
        self._lm_cache: dict[int, float] = {}
        self._coeff_cache: dict[tuple[int, int], tuple[float, float]] = {}
        self._draft_model: ExecutionModel | None = None
        self.spec_method = ("draft" if isinstance(self.draft, ModelPreset) else self.draft)
        """Speculative proposer: ``draft`` (a draft model), ``eagle``, ``ngram`` or None (off)."""
        self._spec_expand = bool(self.engine_overhead and self.engine.spec_batch_expansion)
        if self.draft == "eagle":  # one decoder layer of the target's shapes + its LM head, target TP
            head = dataclasses.replace(m, name=f"{m.name}-eagle-head", num_layers=1, draft_model=None,
                                       num_experts=0, experts_per_token=0, moe_ffn_size=0)
            self._draft_model = ExecutionModel(
                model=head, gpu=self.gpu, tensor_parallel=t,
                quantization=get_quantization("fp16"), kernel=self.kernel, engine=self.engine,
                draft=None, engine_overhead=False, gpu_memory_utilization=1.0,
                max_batched_tokens=1024, gpu_hour_usd=0.0, calibrated=self.calibrated,
                check_memory=False)
        elif isinstance(self.draft, ModelPreset):
            self._draft_model = ExecutionModel(
                model=self.draft, gpu=self.gpu, tensor_parallel=1,
                quantization=get_quantization("fp16"), kernel=self.kernel, engine=self.engine,
                draft=None, engine_overhead=False, gpu_memory_utilization=1.0,
                max_batched_tokens=1024, gpu_hour_usd=0.0, calibrated=self.calibrated,
                check_memory=False)

    # ------------------------------------------------------------------ components
    _GEMM_NAMES = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")

    def layer_op_times_s(self, n_tokens):
        """Per-layer time of each token-count-dependent op at ``n_tokens`` batched tokens.

        Keys follow Vidur's profile names (``attn_pre_proj`` = QKV GEMM, ``attn_post_proj`` = O,
        ``mlp_up_proj`` = gate+up, ``mlp_down_proj``, ``input_layernorm``, ``attn_rope``,
        ``post_attention_layernorm``, ``mlp_act``, ``add``) plus ``act_quant`` (W8A8) and
        ``all_reduce`` (both all-reduces of the layer). Works on floats and numpy arrays.
        """
        k = self.kernel
        p, ip = self._gemm_p, self._gemm_inv_p
        out = {}
        for name, (fc, wt, at) in zip(self._GEMM_NAMES, self._gemm_terms):
            tc = fc * n_tokens
            tm = wt + at * n_tokens
            out[name] = k.gemm_floor_s + (tc**p + tm**p) ** ip
        for name, coef in self._elem_coef.items():
            if name == "act_quant" and coef == 0.0:
                out[name] = 0.0 * n_tokens
                continue
            out[name] = k.elem_floor_s * (self._n_elem_ops - 5 if name == "act_quant" else 1) \
                + coef * n_tokens
        if self.tensor_parallel > 1:
            out["all_reduce"] = 2.0 * (self._ar_lat + self._ar_time_per_token * n_tokens)
        else:
            out["all_reduce"] = 0.0 * n_tokens
        return out

    def _token_time(self, n: int) -> float:
        """Time of everything that depends only on the batched token count ``n`` (all layers):
        GEMMs, elementwise ops, all-reduces, embedding and final norm."""
        c = self._tok_cache.get(n)
        if c is not None:
            return c
        if n <= 0:
            self._tok_cache[n] = 0.0
            return 0.0
        if self._moe is None:
            layer = sum(self.layer_op_times_s(n).values())
            total = self._layers * layer + 2 * self.kernel.elem_floor_s + self._outer_elem_per_token * n
        else:  # dense layers and the attention side at a DP rank's tokens, experts on all tokens
            n_r = -(-n // self._dp)
            ops = self.layer_op_times_s(n_r)
            dense = sum(ops.values())
            attn_side = dense - ops["mlp_up_proj"] - ops["mlp_down_proj"] - ops["mlp_act"]
            if self.expert_parallel > 1:  # the combine replaces the MLP's all-reduce
                attn_side -= 0.5 * ops["all_reduce"]
            m = self.model
            total = ((m.num_layers - m.moe_layers) * dense
                     + m.moe_layers * (attn_side + self._moe.layer_time_s(n))
                     + 2 * self.kernel.elem_floor_s + self._outer_elem_per_token * n_r)
        self._tok_cache[n] = total
        return total

    def _lm_head_time(self, n_logits: int) -> float:
        c = self._lm_cache.get(n_logits)
        if c is not None:
            return c
        if n_logits <= 0:
            v = 0.0
        else:
            n_r = -(-n_logits // self._dp)
            p, ip = self._gemm_p, self._gemm_inv_p
            tc = self._lm_flop_time * n_r
            tm = self._lm_weight_time + self._lm_act_time * n_r
            v = self.kernel.gemm_floor_s + (tc**p + tm**p) ** ip
        self._lm_cache[n_logits] = v
        return v

    def _attn_prefill_all(self, chunks: Sequence[tuple[int, int]]) -> float:
        """Prefill attention time of all layers (full-attention and sliding-window ones)."""
        if not self._sw_layers:
            return self._layers * self._attn_prefill_layer(chunks)
        return (self._full_layers * self._attn_prefill_layer(chunks)
                + self._sw_layers * self._attn_prefill_layer(chunks, self._sw))

    def _attn_prefill_layer(self, chunks: Iterable[tuple[int, int]], window: int = 0) -> float:
        """Prefill attention time of one layer for all chunks of the iteration (``window``: a
        sliding-window layer's window, 0: full attention)."""
        k = self.kernel
        total = 0.0
        any_chunk = False
        fpq = self._attn_flop_per_qk
        kvb = self._kv_bytes_per_token_layer
        qo_bytes = 2.0 * self._q_heads * self.model.head_dim * _ACT_BYTES
        for n, c in chunks:
            if n <= 0:
                continue
            any_chunk = True
            if window:
                own, cached = window_keys(n, c, window)
                tc = fpq * own * self._attn_pf_inv_c + fpq * cached * self._attn_pf_ctx_inv_c
                tm = ((min(c, window) + n) * kvb + n * qo_bytes) * self._attn_pf_inv_m
                total += (max(tm, tc)) + k.attn_prefill_per_token_s * n
                continue
            byts = (c + n) * kvb + n * qo_bytes
            tc = fpq * n * 0.5 * (n + 1) * self._attn_pf_inv_c
            tm = byts * self._attn_pf_inv_m
            tc += fpq * n * c * self._attn_pf_ctx_inv_c
            total += (max(tm, tc)) + k.attn_prefill_per_token_s * n
        if not any_chunk:
            return 0.0
        return total / self._dp + k.attn_prefill_floor_s

    def _attn_decode_slope(self, queries: int) -> float:
        """Decode-attention seconds per context token per layer with ``queries`` queries/sequence."""
        tc = self._attn_dec_flop_per_qk * queries * self._attn_dec_inv_c
        tm = self._kv_bytes_per_token_layer * self._attn_dec_inv_m
        return max(tm, tc) / self._dp

    def attention_decode_layer_s(self, batch, context_total, queries: int = 1):
        """Decode-attention time of one layer: ``batch`` sequences with ``context_total`` cached
        tokens in all and ``queries`` query tokens each (k+1 under speculative verification).
        Works on floats and numpy arrays."""
        k = self.kernel
        return (k.attn_decode_floor_s + self._attn_dec_per_seq * batch
                + self._attn_decode_slope(queries) * context_total)

    def attention_prefill_layer_s(self, chunks: Sequence[tuple[int, int]]) -> float:
        """Prefill-attention time of one layer for ``(chunk_tokens, context_before)`` chunks."""
        return self._attn_prefill_layer(chunks)

    def _sw_decode_s(self, queries: int, nseq: int) -> float:
        """Decode attention of the sliding-window layers: each sequence reads its window's KV."""
        return self._sw_layers * self._attn_decode_slope(queries) * self._sw * nseq

    # ------------------------------------------------------------------ public API
    def decode_coeffs(self, decode_batch: int, speculation_depth: int = 0) -> tuple[float, float]:
        """``(a_s, b_s)`` with pure-decode iteration time ``a_s + b_s * S_total`` exactly.

        ``S_total`` is the sum of the contexts of the ``decode_batch`` sequences. Memoised per
        ``(decode_batch, speculation_depth)``.
        """
        key = (decode_batch, speculation_depth)
        c = self._coeff_cache.get(key)
        if c is not None:
            return c
        B, kd = int(decode_batch), int(speculation_depth)
        if B < 0 or kd < 0:
            raise ValueError(f"decode_batch and speculation_depth must be >= 0, got {B}, {kd}")
        if kd > 0 and self.spec_method is None:
            raise ValueError(f"speculation_depth={kd} needs a draft model; {self.model.name} was built "
                             f"with draft_model=None")
        if B == 0:
            c = (0.0, 0.0)
        elif self._pp > 1:  # exact in S: every micro-batch's time is linear in its share of S
            a = self._pipeline_time((), B, 0, kd)
            c = (a, self._pipeline_time((), B, 1_000_000, kd) / 1e6 - a / 1e6)
        else:
            q = kd + 1
            ntok = B * q
            # sequences the target pass sees: B, or B*(k+1) single-query ones under batch expansion
            # (their per-sequence work repeats; their KV reads hit the copies' shared blocks in L2)
            nseq = ntok if (kd and self._spec_expand) else B
            kern = self.kernel
            f = 1.0 + self._slow * ntok
            gtok = cudagraph_padded_tokens(ntok, self._graph_max) if self._graph_max else ntok
            kern_a = f * (self._token_time(gtok) + self._lm_head_time(ntok)
                          + self._layers * (kern.attn_decode_floor_s + self._attn_dec_per_seq * nseq))
            cpu = self._ovh_fixed + self._ovh_seq * nseq + self._ovh_tok * ntok
            if kd and self.engine_overhead:  # speculative bookkeeping per sequence (engine profile)
                cpu += self.engine.spec_per_seq_s * B
            if self._async:  # CPU work overlaps the previous step's kernels (exact while the
                a = kern_a if kern_a >= cpu else cpu  # kernels take longer)
            else:
                a = kern_a + cpu
            if self._sw_layers:  # window-bounded layers: a per-sequence term, not per context token
                a += f * self._sw_decode_s(q, B)
            b = f * self._full_layers * self._attn_decode_slope(q)
            if kd > 0:
                da, db = self._draft_pass_coeffs(B)
                if self.spec_method == "ngram":  # one lookup pass over the sequences, not k
                    a += da
                else:
                    a += kd * da
                    b += kd * db
            c = (a, b)
        self._coeff_cache[key] = c
        return c

    def _pipeline_time(self, prefill_chunks, decode_batch: int, decode_context_tokens: float,
                       speculation_depth: int) -> float:
        """One engine step with pipeline stages (``sim/pipeline.py``): micro-batches of the step
        through ``P`` stages, ``max(m, P)`` slots of the slowest stage, the engine's CPU work once."""
        if speculation_depth:
            raise ValueError("speculative decoding with pipeline_parallel > 1 is not modelled; "
                             "use speculation_depth=0 or pipeline_parallel=1")
        st = self._stage_model
        if st is None:
            st = self._stage_model = self._replace(pipeline_parallel=1, engine_overhead=False,
                                                   check_memory=False, draft=None)
        P = self._pp
        nseq = len(prefill_chunks) + decode_batch
        if nseq == 0:
            return 0.0
        m = microbatch_count(nseq, P)
        stage = []
        ntok = 0
        for pf, b, ctx in split_microbatches(prefill_chunks, decode_batch, decode_context_tokens, m):
            tok = sum(n for n, _c in pf) + b
            ntok += tok
            kern = st.iteration_time_s(pf, b, ctx, 0) * (1.0 + self._slow * tok)
            stage.append(kern / P + p2p_time_s(tok, self.model.hidden_size, self._p2p_bw, self._p2p_lat))
        t = step_time_s(stage, P, m)
        cpu = self._ovh_fixed + self._ovh_seq * nseq + self._ovh_tok * ntok
        if self._async:
            return t if t >= cpu else cpu
        return t + cpu

    def _draft_pass_coeffs(self, B: int) -> tuple[float, float]:
        """One draft decode pass at batch B: (a, b) in the draft's total context, including the
        draft's own launch overhead (per layer and per sequence; the fixed per-iteration cost, CPU-side
        scheduling and input preparation, is paid once per engine step)."""
        e = self.engine
        if self.spec_method == "ngram":  # CPU prompt lookup, per sequence
            if not self.engine_overhead:
                return 0.0, 0.0
            return (e.per_seq_s if e.ngram_per_seq_s is None else e.ngram_per_seq_s) * B, 0.0
        dm = self._draft_model
        assert dm is not None
        a, b = dm.decode_coeffs(B, 0)
        if self.engine_overhead:
            f = 1.0 + self._slow * B
            a = f * a + dm._layers * e.per_layer_s + e.per_seq_s * B
            b = f * b
        return a, b

    def iteration_time_s(
        self,
        prefill_chunks: Sequence[tuple[int, int]] = (),
        decode_batch: int = 0,
        decode_context_tokens: int = 0,
        speculation_depth: int = 0,
    ) -> float:
        """Time of one iteration of a mixed batch.

        ``prefill_chunks``: ``(chunk_tokens, context_before_chunk)`` per prefilling sequence;
        ``decode_batch``: number of decoding sequences; ``decode_context_tokens``: sum of their
        contexts; ``speculation_depth``: draft tokens per decoding sequence (0 = off).
        """
        if self._pp > 1:
            return self._pipeline_time(prefill_chunks, decode_batch, decode_context_tokens, speculation_depth)
        if not prefill_chunks:
            a, b = self.decode_coeffs(decode_batch, speculation_depth)
            return a + b * decode_context_tokens
        n_pf = 0
        for n, _c in prefill_chunks:
            n_pf += n
        q = speculation_depth + 1
        B = decode_batch
        ntok = n_pf + B * q
        nseq = len(prefill_chunks) + B
        kern = self.kernel
        L = self._layers
        gtok = cudagraph_padded_tokens(ntok, self._graph_max) if self._graph_max else ntok
        t = (self._token_time(gtok) + self._lm_head_time(len(prefill_chunks) + B * q)
             + self._attn_prefill_all(prefill_chunks))
        if B > 0:
            nd = B * q if (speculation_depth and self._spec_expand) else B  # batch expansion
            nseq += nd - B
            if self._sw_layers:
                t += (L * (kern.attn_decode_floor_s + self._attn_dec_per_seq * nd) + self._sw_decode_s(q, B)
                      + self._full_layers * self._attn_decode_slope(q) * decode_context_tokens)
            else:
                t += L * (kern.attn_decode_floor_s + self._attn_dec_per_seq * nd
                          + self._attn_decode_slope(q) * decode_context_tokens)
        cpu = self._ovh_fixed + self._ovh_seq * nseq + self._ovh_tok * ntok
        if B and speculation_depth and self.engine_overhead:  # speculative bookkeeping per sequence
            cpu += self.engine.spec_per_seq_s * B
        t = t * (1.0 + self._slow * ntok)
        if self._async:
            if cpu > t:
                t = cpu
        else:
            t += cpu
        if B > 0:
            if speculation_depth > 0:
                if self.spec_method is None:
                    raise ValueError("speculation_depth > 0 needs a draft model")
                da, db = self._draft_pass_coeffs(B)
                passes = 1 if self.spec_method == "ngram" else speculation_depth
                t += passes * (da + db * decode_context_tokens)
        return t

    def prefill_time_s(self, prompt_tokens: int) -> float:
        """One request's whole prefill in one iteration (empty cache), seconds."""
        if prompt_tokens < 1:
            raise ValueError(f"prompt_tokens must be >= 1, got {prompt_tokens!r}")
        return self.iteration_time_s(((int(prompt_tokens), 0),), 0, 0, 0)

    def decode_step_time_s(self, batch_size: int, context_tokens: int) -> float:
        """One decode iteration of ``batch_size`` sequences each at ``context_tokens``, seconds."""
        if batch_size < 1 or context_tokens < 0:
            raise ValueError(f"need batch_size >= 1 and context_tokens >= 0, got {batch_size!r}, "
                             f"{context_tokens!r}")
        a, b = self.decode_coeffs(int(batch_size), 0)
        return a + b * (int(batch_size) * int(context_tokens))

    def speculative_step_time_s(self, batch_size: int, context_tokens: int, depth: int) -> float:
        """One speculative step (k draft passes + verification) at batch B, each seq at context."""
        a, b = self.decode_coeffs(int(batch_size), int(depth))
        return a + b * (int(batch_size) * int(context_tokens))

    def kv_capacity_tokens(self, kv_budget_fraction: float = 1.0) -> int:
        """KV-cache tokens one replica holds: (GPU memory x utilisation - weights - activation
        reserve) x fraction / kv_bytes_per_token (per GPU; every GPU holds its heads' share)."""
        if not 0.0 < kv_budget_fraction <= 1.0:
            raise ValueError(f"kv_budget_fraction must be in (0, 1], got {kv_budget_fraction!r}")
        return int(self._kv_free_bytes * kv_budget_fraction // self.kv_bytes_per_token) * self._dp

    def kv_transfer_time_s(self, tokens: int, link_gbytes_per_s: float | None = None) -> float:
        """Time to move ``tokens`` tokens of KV cache from a prefill to a decode replica.

        Each of the ``tensor_parallel`` GPUs sends its own shard over its own link in parallel, so
        the time is ``latency + tokens * kv_bytes_per_token / link``; default link: the GPU preset's
        inter-node bandwidth per GPU.
        """
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {tokens!r}")
        link = self.gpu.inter_node_gbytes_per_s if link_gbytes_per_s is None else link_gbytes_per_s
        if link <= 0:
            raise ValueError(f"link_gbytes_per_s must be > 0, got {link!r}")
        if tokens == 0:
            return 0.0
        return 2.0e-5 + tokens * self.kv_bytes_per_token / (link * 1e9)

    def calibration_error(self) -> dict:
        """How far to trust this model's predictions: per op family (``gemm``, ``elementwise``,
        ``attn_prefill``, ``attn_decode``, ``all_reduce``) a status (``fitted`` on this GPU and
        shape, or ``transferred`` from other shapes/GPUs) and a MAPE band in percent, the engine
        profile's end-to-end band, the measured ranges and what is extrapolated
        (``docs/calibration.md``; figures from ``inferencegym/data/calibration_error.json``)."""
        return calibration_error_for(gpu=self.gpu.name, model=self.model.name,
                                     tensor_parallel=self.tensor_parallel,
                                     engine_profile=self.engine_profile,
                                     gpu_calibrated=self.calibrated)

    @property
    def gpu_count(self) -> int:
        return self.tensor_parallel * self.expert_parallel * self.pipeline_parallel

    @property
    def gpu_hour_usd(self) -> float:
        """Price of the replica's GPUs for one hour, USD."""
        per = self.gpu.gpu_hour_usd if self._gpu_hour_override is None else self._gpu_hour_override
        return float(per) * self.gpu_count

    @property
    def quality_delta(self) -> float:
        """Quality cost of the quantization tier (perplexity increase vs FP16; 0 for fp16)."""
        return self.quantization.quality_delta

    @property
    def draft_model_name(self) -> str | None:
        if isinstance(self.draft, str):
            return self.draft
        return self.draft.name if self.draft else None

    def to_dict(self) -> dict:
        """Flat config for MLflow / Tune."""
        return {
            "model": self.model.name,
            "gpu": self.gpu.name,
            "tensor_parallel": self.tensor_parallel,
            "expert_parallel": self.expert_parallel,
            "pipeline_parallel": self.pipeline_parallel,
            "quantization": self.quantization.name,
            "kv_cache_dtype": self.kv_cache_dtype,
            "draft_model": self.draft_model_name,
            "engine_overhead": self.engine_overhead,
            "engine_profile": self.engine_profile,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "calibrated": self.calibrated,
            "gpu_hour_usd": self.gpu_hour_usd,
            "quality_delta": self.quality_delta,
            "weight_bytes_per_gpu": self.weight_bytes_per_gpu,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_capacity_tokens": self.kv_capacity_tokens(1.0),
            "calibration_version": load_calibration().get("version", ""),
        }

    def __repr__(self) -> str:
        return (f"ExecutionModel(model={self.model.name!r}, gpu={self.gpu.name!r}, "
                f"tensor_parallel={self.tensor_parallel}, quantization={self.quantization.name!r}, "
                f"engine_profile={self.engine_profile!r})")
