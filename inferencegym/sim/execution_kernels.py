"""Kernel time of one iteration: the per-layer roofline of every op, without the engine's overhead.

Per layer and per iteration with ``n`` batched tokens:

* GEMMs (QKV, O, gate+up, down): ``floor + ((F/(P*ec))**p + (M/(BW*em))**p)**(1/p)``, a smooth
  roofline max of compute time (FLOPs F at peak P) and memory time (bytes M: weights once per
  iteration plus activations at bandwidth BW); rates per weight format in ``execution_rates.py``;
* elementwise ops (2 RMSNorms, RoPE, SiLU*mul, one residual add as profiled by Vidur; vLLM fuses
  the other into the norm): bandwidth-bound, one efficiency per op;
* attention prefill per chunk (FlashAttention-like): causal FLOPs ``4*heads*d*N*(N+1)/2`` and
  cached-context FLOPs ``4*heads*d*N*C`` at their own efficiencies, roofline with KV bytes read;
* attention decode: KV bytes read (linear in the batch's total context), a term per sequence and
  KV head on the GPU (GQA, TP) and, with speculative verification, k+1 queries per sequence;
* sliding-window layers (gpt-oss, ``sim/sliding_window.py``): prefill attends to at most the
  window's keys per query, decode reads the window's KV per sequence;
* tensor-parallel all-reduce, two per layer: ``latency(tp) + bytes / bandwidth(tp)``; an engine
  with its own all-reduce kernel (``vllm-v1``) replaces the NCCL latency where it is lower;
* mixture-of-experts layers: ``moe.MoECost`` (experts on all tokens, attention per DP rank);
* outside the layers: embedding, final norm, LM head (FP16, only on tokens that need logits).

:class:`KernelCosts` is the base of :class:`~inferencegym.sim.execution.ExecutionModel`. State
contract: the subclass sets ``model``, ``gpu``, ``kernel``, ``engine``, ``engine_overhead``,
``tensor_parallel``, ``quantization``, ``expert_parallel`` and ``kv_cache_dtype`` before calling
:meth:`KernelCosts._setup_kernels`, which sets every ``_``-attribute the methods here read
(per-token coefficients, ``_dp``, ``_moe``, the memo dictionaries). The hot path uses plain Python
floats and memoises per token count.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

from inferencegym.sim.execution_params import EngineParams, KernelParams
from inferencegym.sim.execution_rates import ACT_BYTES, dense_gemm_rates, dense_tier, expert_gemm_rates
from inferencegym.sim.moe import MXFP4_HOPPER_PAD, MoECost, moe_kernel_figures
from inferencegym.sim.presets import GPUPreset, ModelPreset, QuantizationTier
from inferencegym.sim.sliding_window import window_keys

_GEMM_NAMES = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")


class KernelCosts:
    """Kernel time per op and per iteration (the roofline part of the execution model)."""

    model: ModelPreset
    gpu: GPUPreset
    kernel: KernelParams
    engine: EngineParams
    engine_overhead: bool
    tensor_parallel: int
    quantization: QuantizationTier
    expert_parallel: int
    kv_cache_dtype: str

    def _setup_kernels(self) -> None:
        """Per-token and per-layer coefficients of every op (see the module docstring)."""
        m, g, k, t = self.model, self.gpu, self.kernel, self.tensor_parallel
        q = dense_tier(self.quantization)  # the dense weights' tier; self.quantization the experts'
        d = m.head_dim
        h = m.hidden_size
        self._layers = m.num_layers
        self._q_heads = m.num_heads // t
        self._kv_heads = max(1, m.num_kv_heads // t)  # replicated when tp > kv heads
        self._peak_fp16 = g.fp16_tflops * 1e12
        bw = g.mem_gbytes_per_s * 1e9
        self._bw = bw
        rates = dense_gemm_rates(q, g, k)
        wb, a_in, inv_c, inv_m = rates.weight_bytes, rates.act_in_bytes, rates.inv_c, rates.inv_m
        kv_el = 1.0 if self.kv_cache_dtype == "fp8" else 2.0
        self._dp = self.expert_parallel if m.is_moe else 1
        o_in = self._q_heads * d
        qkv_n = ((m.attn_linear_params - m.num_heads * d * h) // (h * t) if m.is_mla
                 else (self._q_heads + 2 * self._kv_heads) * d)
        # GEMMs of one layer on one GPU: (K, N)
        self._gemms = [
            (h, qkv_n),  # QKV (MLA: the query and KV down/up projections)
            (o_in, h),  # O
            (h, (2 if m.gated_mlp else 1) * m.ffn_size // t),  # gate + up
            (m.ffn_size // t, h),  # down
        ]
        p = k.gemm_p
        self._gemm_terms = []  # per GEMM: (flop_time_per_token, weight_time, act_time_per_token)
        for kk, nn in self._gemms:
            self._gemm_terms.append((2.0 * kk * nn * inv_c, kk * nn * wb * inv_m,
                                     (kk * a_in + nn * ACT_BYTES) * inv_m))
        self._gemm_p = p
        self._gemm_inv_p = 1.0 / p
        # elementwise ops per layer (as profiled by Vidur; vLLM fuses the second residual add into
        # the post-attention norm, so one add): bytes per token / (bandwidth * efficiency)
        f_g = m.ffn_size / t
        qk = (self._q_heads + self._kv_heads) * d
        act_in = 2 if m.gated_mlp else 1
        self._elem_coef = {
            "input_layernorm": 2 * h * ACT_BYTES / (bw * k.norm_eff_mem),
            "attn_rope": 2 * qk * ACT_BYTES / (bw * k.rope_eff_mem),
            "post_attention_layernorm": 2 * h * ACT_BYTES / (bw * k.norm_eff_mem),
            "mlp_act": (act_in + 1) * f_g * ACT_BYTES / (bw * k.act_eff_mem),
            "add": 3 * h * ACT_BYTES / (bw * k.add_eff_mem),
        }
        # W8A8: per-token activation quantisation before each GEMM input (read 2B, write 1B)
        self._elem_coef["act_quant"] = (q.activation_quant_ops * 3 * h / (bw * k.add_eff_mem))
        self._n_elem_ops = 5 + q.activation_quant_ops
        self._elem_time_per_token = sum(self._elem_coef.values())
        # all-reduce after O and after down (TP > 1)
        lat, ar_bw = k.allreduce(t)
        e_lat = self.engine.engine_allreduce_latency_s(t) if self.engine_overhead else None
        if e_lat is not None and t > 1 and g.network_profile != "pcie":
            lat = min(lat, e_lat)
        self._ar_lat = lat
        self._ar_time_per_token = (h * ACT_BYTES / ar_bw) if t > 1 else 0.0
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
        self._lm_weight_time = h * vocab_g * ACT_BYTES / (bw * k.gemm_eff_mem)
        self._lm_act_time = (h + vocab_g) * ACT_BYTES / (bw * k.gemm_eff_mem)
        # mixture of experts (sim/moe.py), expert weights at their own tier (execution_rates.py)
        self._moe = None
        if m.is_moe:
            x = expert_gemm_rates(self.quantization, rates, g, k)
            # MXFP4 without FP4 tensor cores: Marlin's padded layout (moe.MXFP4_HOPPER_PAD)
            pad = MXFP4_HOPPER_PAD if self.quantization.experts_only and g.fp4_tflops <= 0 else (1, 1)
            self._moe = MoECost(
                model=m, gpu=g, tensor_parallel=t, expert_parallel=self.expert_parallel,
                weight_bytes=x.weight_bytes, act_in_bytes=x.act_in_bytes, inv_c=x.inv_c,
                inv_c_fp16=1.0 / (self._peak_fp16 * k.gemm_eff_compute), inv_m=inv_m, gemm_p=p,
                gemm_floor_s=k.gemm_floor_s, act_eff_mem=k.act_eff_mem, elem_floor_s=k.elem_floor_s,
                a2a_latency_s=k.allreduce(min(t * self.expert_parallel, 8))[0],
                weight_time_factor=x.weight_time_factor,
                pad_to=pad, **moe_kernel_figures(
                    m.moe_kernel, fp8=self.quantization.fp8_compute and not self.quantization.experts_only))
        self._tok_cache: dict[int, float] = {}
        self._lm_cache: dict[int, float] = {}

    # ------------------------------------------------------------------ components
    _GEMM_NAMES: ClassVar[tuple[str, ...]] = _GEMM_NAMES

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
        qo_bytes = 2.0 * self._q_heads * self.model.head_dim * ACT_BYTES
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
