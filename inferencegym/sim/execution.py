"""Execution-time model: how long one iteration of a replica takes.

:class:`ExecutionModel` answers it for one replica (``tensor_parallel`` GPUs running one model
copy): the kernel time of the step's ops (``execution_kernels.py``: a roofline model per
transformer layer with efficiencies fitted on measured kernel profiles, Vidur's A100/H100 profiles
and measured H200 rows; weight-format rates in ``execution_rates.py``), the speculative proposer's
passes (``execution_spec.py``) and the overhead of a named engine profile (``vllm-v1``,
``vllm-v0``, ``vllm-2023``, ``kernel-only``; parameters in ``execution_params.py``); what may be
built is ``execution_setup.py``'s, what memory is left for the KV cache ``gpu_memory.py``'s (vLLM's
profiling rule), pipeline stages ``execution_pipeline.py``'s. See ``docs/calibration.md``.

Engine overhead per iteration: kernel time x ``(1 + slowdown * n)`` plus ``fixed + layers *
(per_layer + per_layer_tp * (tp-1)) + per_seq * sequences + per_token * n`` (scheduling, sampling,
kernel launches, synchronisation: what kernel profiles miss); with asynchronous scheduling the CPU
work overlaps the kernels (the step takes the longer of the two); decode batches are padded to the
engine's CUDA-graph sizes. A speculative step of depth k verifies k+1 tokens per sequence in one
target pass (by batch expansion into ``B*(k+1)`` sequences under vLLM V0) after the proposer's work.

The hot path uses plain Python floats and memoises per token count and per decode batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from inferencegym.sim.calibration_error import calibration_error_for
from inferencegym.sim.execution_kernels import KernelCosts
from inferencegym.sim.execution_params import (
    DEFAULT_ENGINE_PROFILE,
    EngineParams,
    KernelParams,
    _params_for,
    check_engine_profile,
    cudagraph_padded_tokens,
    load_calibration,
)
from inferencegym.sim.execution_pipeline import PipelineCosts
from inferencegym.sim.execution_rates import dense_tier
from inferencegym.sim.execution_setup import check_model_args
from inferencegym.sim.execution_shared import shared_model as _shared
from inferencegym.sim.execution_spec import SpeculativeCosts, draft_shape, resolve_proposer
from inferencegym.sim.gpu_memory import memory_budget, sampler_path
from inferencegym.sim.presets import (
    GPUPreset,
    ModelPreset,
    QuantizationTier,
    get_gpu,
    get_model,
    get_quantization,
)

__all__ = ["ExecutionModel"]


class ExecutionModel(KernelCosts, SpeculativeCosts, PipelineCosts):
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
        check_model_args(model=model, gpu=gpu, quantization=quantization,
                         tensor_parallel=tensor_parallel, expert_parallel=expert_parallel,
                         pipeline_parallel=pipeline_parallel, kv_cache_dtype=kv_cache_dtype,
                         gpu_memory_utilization=gpu_memory_utilization, gpu_hour_usd=gpu_hour_usd)
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
        self._shared_key: tuple | None = None
        """The key of this model in the process's shared models (:meth:`shared_preset`), or None."""
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
        _share: bool = False,
    ) -> ExecutionModel:
        """Model of ``model`` on ``tensor_parallel`` GPUs of type ``gpu`` at a quantization tier.

        ``draft_model``: the speculative proposer: a draft model preset (``"default"``: the model's
        preset draft), ``"ngram"`` (prompt lookup), ``"eagle"`` (a one-layer EAGLE head) or ``None``
        (no speculation). ``engine_profile``: the serving engine's per-iteration
        overhead, one of ``ENGINE_PROFILES`` (default ``DEFAULT_ENGINE_PROFILE``);
        ``engine_overhead=False`` is an alias of ``engine_profile="kernel-only"`` (kernel time only,
        what Vidur's profiles measure: on the H100 the GEMMs of its 2024 profile, where ``vllm-v1``
        runs today's; ``model._replace(engine_overhead=False)`` gives a profile's own kernels).
        ``gpu_hour_usd`` overrides the preset price per GPU-hour.
        Raises ValueError for unknown names or when the weights do not fit in GPU memory.
        """
        mp = get_model(model)
        gp = get_gpu(gpu)
        qt = get_quantization(quantization)
        dp = resolve_proposer(mp, draft_model)
        if not engine_overhead:
            if engine_profile not in (None, "kernel-only"):
                raise ValueError(f"engine_overhead=False means engine_profile='kernel-only', but "
                                 f"engine_profile={engine_profile!r} was given; pass only one")
            engine_profile = "kernel-only"
        profile = check_engine_profile(engine_profile or DEFAULT_ENGINE_PROFILE)
        kernel, engine, fitted = _params_for(gp.name, gp.network_profile, profile)
        args = dict(model=mp, gpu=gp, tensor_parallel=tensor_parallel, quantization=qt,
                    kernel=kernel, engine=engine, draft=dp, engine_overhead=profile != "kernel-only",
                    gpu_memory_utilization=gpu_memory_utilization, gpu_hour_usd=gpu_hour_usd,
                    calibrated=fitted and gp.calibrated, engine_profile=profile,
                    expert_parallel=expert_parallel, kv_cache_dtype=kv_cache_dtype,
                    pipeline_parallel=pipeline_parallel)
        return _shared(cls, args) if _share else cls(**args)

    @classmethod
    def shared_preset(cls, model: str = "llama-2-7b", gpu: str = "a100-80gb", tensor_parallel: int = 1,
                      quantization: str = "fp16", **kw: Any) -> ExecutionModel:
        """:meth:`from_preset`'s model, one instance per distinct set of constructor inputs in this
        process (``execution_shared.py``): answers as a fresh one, with its memos warm; its
        :meth:`with_quantization` tiers are shared too. A shared model must not be changed."""
        return cls.from_preset(model, gpu, tensor_parallel, quantization, _share=True, **kw)

    def _replace(self, **kw) -> ExecutionModel:
        args = self._args()
        args.update(kw)
        if self._shared_key is not None:
            return _shared(ExecutionModel, args)
        return ExecutionModel(**args)

    def _args(self) -> dict[str, Any]:
        """The constructor arguments this model was built from."""
        return dict(model=self.model, gpu=self.gpu, tensor_parallel=self.tensor_parallel,
                    quantization=self.quantization, kernel=self.kernel, engine=self.engine,
                    draft=self.draft, engine_overhead=self.engine_overhead,
                    gpu_memory_utilization=self.gpu_memory_utilization,
                    max_batched_tokens=self.max_batched_tokens,
                    gpu_hour_usd=self._gpu_hour_override, calibrated=self.calibrated,
                    check_memory=self._check_memory, engine_profile=self.engine_profile,
                    expert_parallel=self.expert_parallel, kv_cache_dtype=self.kv_cache_dtype,
                    pipeline_parallel=self.pipeline_parallel)

    def with_quantization(self, quantization: str) -> ExecutionModel:
        """A new model identical but for the quantization tier (``fp16``, ``int8``, ``int4``)."""
        return self._replace(quantization=get_quantization(quantization))

    def _setup(self) -> None:
        self._setup_kernels()
        # engine overhead
        e, t = self.engine, self.tensor_parallel
        if self.engine_overhead:
            self._ovh_fixed = (e.fixed_s + self._layers * (e.per_layer_s + e.per_layer_tp_s * (t - 1)))
            self._ovh_seq = e.per_seq_s / self._dp
            self._ovh_tok = e.per_token_s
            self._slow = e.kernel_slowdown_per_token
        else:
            self._ovh_fixed = self._ovh_seq = self._ovh_tok = self._slow = 0.0
        self._async = bool(self.engine_overhead and e.async_scheduling)
        on = self.engine_overhead
        self._gpu_ovh = (e.gpu_fixed_s + self._layers * e.gpu_per_layer_s) if on else 0.0
        """GPU time per iteration outside the profiled kernels (engine profile; never hidden)."""
        self._gpu_seq = e.sampler_s_per_logit_on(self.gpu.name) * self.model.vocab_size / self._dp if on else 0.0
        """... and per sampled sequence (the sampler over the vocabulary; data-parallel attention
        ranks each sample their own sequences, side by side, as they do their per-sequence work)."""
        self._graph_max = int(e.cudagraph_max_tokens) if self.engine_overhead else 0
        self.frontend_s = float(e.frontend_s) if self.engine_overhead else 0.0
        """API-server latency per request (engine profile), added to TTFT and E2E by the replica."""
        self.api_server_per_request_s = float(e.api_server_per_request_s) if self.engine_overhead else 0.0
        """Per-request API-server work ahead of the engine, served in arrival order (engine profile)."""
        # memory
        mem = memory_budget(
            model=self.model, gpu=self.gpu, quantization_name=self.quantization.name,
            tensor_parallel=t, pipeline_parallel=self.pipeline_parallel, gemms=self._gemms,
            weight_bytes_per_param=dense_tier(self.quantization).weight_bytes_per_param,
            moe_weight_bytes_gpu=self._moe.weight_bytes_gpu if self._moe else None,
            kv_bytes_per_token_layer=self._kv_bytes_per_token_layer, q_heads=self._q_heads,
            kv_heads=self._kv_heads, max_batched_tokens=self.max_batched_tokens,
            gpu_memory_utilization=self.gpu_memory_utilization, check=self._check_memory,
            kv_layers=self._full_layers,
            moe_workspace_bytes=self._moe.workspace_bytes(self.max_batched_tokens) if self._moe else 0.0,
            gpus_per_replica=t * self.expert_parallel * self.pipeline_parallel,
            sampler=sampler_path(self.engine_profile))
        self.memory = mem
        """This GPU's memory budget (``gpu_memory.MemoryBudget``: weights, profiling peak, non-torch)."""
        self.weight_bytes_per_gpu = mem.weight_bytes_per_gpu
        self.kv_bytes_per_token = mem.kv_bytes_per_token
        """KV bytes per token on one GPU (with pipeline stages: its stage's layers; sliding-window
        layers hold their window only and are not counted, ``sim/sliding_window.py``)."""
        self._setup_pipeline()
        self._coeff_cache: dict[tuple[int, int], tuple] = {}  # (a_s, b_s) (plain tuple: one object)
        self._prefill1_cache: dict[tuple[int, int], float] = {}
        """``iteration_time_s`` of one prompt chunk without decodes, per (chunk tokens, context): a
        pure function of the model (as the decode coefficients), ~90 % hits on a replayed trace."""
        # the proposer's own execution model (kernel time only; the engine's launch overhead is
        # added per draft pass by SpeculativeCosts)
        shape = draft_shape(self.model, self.draft, t)
        self._setup_speculation(None if shape is None else ExecutionModel(
            model=shape[0], gpu=self.gpu, tensor_parallel=shape[1],
            quantization=get_quantization("fp16"), kernel=self.kernel, engine=self.engine,
            draft=None, engine_overhead=False, gpu_memory_utilization=1.0,
            max_batched_tokens=1024, gpu_hour_usd=0.0, calibrated=self.calibrated,
            check_memory=False))

    # ------------------------------------------------------------------ public API
    def decode_coeffs(self, decode_batch: int, speculation_depth: int = 0) -> tuple:
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
                          + self._layers * (kern.attn_decode_floor_s + self._attn_dec_per_seq * nseq)) \
                + self._gpu_ovh + self._gpu_seq * ntok  # ntok: sampled positions (k + 1 a sequence)
            cpu = self._ovh_fixed + self._ovh_seq * nseq + self._ovh_tok * ntok
            if kd and self.engine_overhead:  # speculative bookkeeping per sequence (engine profile)
                cpu += self._spec_cpu_s(B)
            if self._async:  # CPU work overlaps the previous step's kernels (exact while the
                a = kern_a if kern_a >= cpu else cpu  # kernels take longer)
            else:
                a = kern_a + cpu
            if self._sw_layers:  # window-bounded layers: a per-sequence term, not per context token
                a += f * self._sw_decode_s(q, B)
            b = f * self._full_layers * self._attn_decode_slope(q)
            if kd > 0:  # the proposer's passes (execution_spec.py)
                a, b = self._add_draft_coeffs(a, b, B, kd)
            c = (a, b)
        self._coeff_cache[key] = c
        return c

    def iteration_time_s(
        self,
        prefill_chunks: Sequence[tuple] = (),  # (int pairs; numpy integers too, never memoised)
        decode_batch: int = 0,
        decode_context_tokens: float = 0,
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
        if not decode_batch and len(prefill_chunks) == 1:  # one prompt alone (no decodes: the
            key: Any = prefill_chunks[0]  # speculation depth plays no part): memoised per (chunk, context)
            if type(key) is tuple and len(key) == 2 and type(key[0]) is int and type(key[1]) is int:
                t = self._prefill1_cache.get(key)
                if t is None:
                    t = self._prefill1_cache[key] = self._iteration_time_s(prefill_chunks, 0, 0, 0)
                return t
        return self._iteration_time_s(prefill_chunks, decode_batch, decode_context_tokens, speculation_depth)

    def _iteration_time_s(self, prefill_chunks, decode_batch: int, decode_context_tokens: float,
                          speculation_depth: int) -> float:
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
            cpu += self._spec_cpu_s(B)
        t = t * (1.0 + self._slow * ntok) + self._gpu_ovh + self._gpu_seq * (len(prefill_chunks) + B * q)
        if self._async:
            if cpu > t:
                t = cpu
        else:
            t += cpu
        if B > 0 and speculation_depth > 0:  # the proposer's passes (execution_spec.py)
            t += self._draft_time_s(B, speculation_depth, decode_context_tokens)
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

    def kv_capacity_tokens(self, kv_budget_fraction: float = 1.0, max_num_seqs: int = 256) -> int:
        """KV-cache tokens one replica holds: (GPU memory x utilisation - weights - the profiling
        run's peak at ``max_num_seqs`` - non-torch memory) x fraction / kv_bytes_per_token (per GPU;
        every GPU holds its heads' share; ``gpu_memory.py``)."""
        if not 0.0 < kv_budget_fraction <= 1.0:
            raise ValueError(f"kv_budget_fraction must be in (0, 1], got {kv_budget_fraction!r}")
        if not isinstance(max_num_seqs, int) or max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be an int >= 1 (the batch cap), got {max_num_seqs!r}")
        free = self.memory.kv_free_bytes(max_num_seqs)
        return int(free * kv_budget_fraction // self.kv_bytes_per_token) * self._dp

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

