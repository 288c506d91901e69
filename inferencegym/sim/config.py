"""Configuration dataclasses of the simulator: replicas, tenants and the cluster.

Frozen, keyword-only, a docstring per field, units in the names; ``to_dict()`` feeds MLflow/Tune.
Validation of values happens in ``__post_init__`` so a bad config fails at construction with a clear
message. Names of registered implementations (router, scheduler, engine profile) are plain strings
here, checked where the cluster is built (:mod:`inferencegym.sim.names`): configs import no registry.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

QUANTIZATION_TIERS = ("fp16", "int8", "int4", "fp8", "mxfp4")
"""Every weight tier the simulator models (the one definition; labels elsewhere derive)."""

ACTION_QUANTIZATION_TIERS = QUANTIZATION_TIERS[:3]
"""The tiers the single-agent action offers, in its index order. fp8 is not among them: the
single-agent tasks run on A100s, which have no FP8, and the shipped modules' action space stays."""


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


@dataclass(frozen=True, kw_only=True)
class TenantSpec:
    """One tenant class: its priority, its SLOs and its speculative-decoding acceptance rate."""

    name: str = "default"
    """Tenant name, used as the key of per-tenant metrics."""
    priority: int = 0
    """0 = best effort, 1 = priority (jumps the queue when priority routing is on)."""
    ttft_slo_s: float = 2.0
    """Time-to-first-token target in seconds."""
    tbt_slo_s: float = 0.2
    """Time-per-output-token target in seconds: the request's mean gap between output tokens (TPOT),
    as DistServe and vLLM's goodput define it; see :mod:`inferencegym.sim.slo`."""
    spec_acceptance: float | None = None
    """Per-token acceptance rate alpha of draft tokens for this tenant's requests (None: the replica's)."""

    def __post_init__(self) -> None:
        _check(self.priority in (0, 1), f"TenantSpec.priority must be 0 or 1, got {self.priority!r}")
        _check(self.ttft_slo_s > 0 and self.tbt_slo_s > 0,
               f"TenantSpec SLOs must be > 0 s, got ttft_slo_s={self.ttft_slo_s}, tbt_slo_s={self.tbt_slo_s}")
        if self.spec_acceptance is not None:
            _check(0.0 <= self.spec_acceptance <= 1.0,
                   f"TenantSpec.spec_acceptance must be in [0, 1], got {self.spec_acceptance}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, kw_only=True)
class ReplicaKnobs:
    """The serving knobs an agent controls, with their one set of defaults: vLLM's
    (``max_num_seqs=256``, ``gpu_memory_utilization=0.9``, no speculation, FP16). Tasks start their
    replicas from a ``ReplicaKnobs`` (both environments, replay's simulated target), the action
    space defaults to it and :class:`ReplicaConfig` takes its defaults from it."""

    scheduler: str = "vllm"
    """Batching policy of the replicas at reset (a name of ``batching.SCHEDULERS``)."""
    batch_cap: int = 256
    """Max running sequences per replica (vLLM ``max_num_seqs``)."""
    kv_budget_fraction: float = 0.9
    """Share of free GPU memory given to the KV cache (vLLM ``gpu_memory_utilization``-like)."""
    speculation_depth: int = 0
    """Draft tokens per step (0 = speculative decoding off)."""
    quantization: str = "fp16"
    """Weight precision tier (one of ``QUANTIZATION_TIERS``)."""

    def __post_init__(self) -> None:
        _check(self.quantization in QUANTIZATION_TIERS,
               f"unknown quantization {self.quantization!r}; valid: {', '.join(QUANTIZATION_TIERS)}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


DEFAULT_KNOBS = ReplicaKnobs()
"""vLLM's defaults (what ``ServeAction()``, replay's ``SimTarget`` and ``ReplicaConfig`` start from)."""


@dataclass(frozen=True, kw_only=True)
class ReplicaConfig:
    """One model replica (a group of ``tensor_parallel`` GPUs running one engine instance)."""

    model: str = "llama-2-7b"
    """Model preset name (see ``inferencegym.sim.presets``)."""
    gpu: str = "a100-80gb"
    """GPU preset name."""
    tensor_parallel: int = 1
    """GPUs per replica (tensor parallel degree)."""
    quantization: str = DEFAULT_KNOBS.quantization
    """Weight tier: fp16, int8 (W8A8), int4 (weight-only), fp8 (W8A8 FP8, Hopper/Ada and later) or
    mxfp4 (MoE experts in MXFP4, the rest BF16: gpt-oss checkpoints)."""
    expert_parallel: int = 1
    """Expert-parallel degree of a mixture-of-experts model: the replica has tensor_parallel x
    expert_parallel GPUs, attention data-parallel across the expert_parallel ranks (1: experts split by TP)."""
    kv_cache_dtype: str = "auto"
    """KV-cache element type: auto (FP16/BF16) or fp8 (half the bytes per token)."""
    pipeline_parallel: int = 1
    """Pipeline stages: the replica has tensor_parallel x expert_parallel x pipeline_parallel GPUs, its
    layers split into consecutive stages, each step cut into micro-batches (``sim/pipeline.py``)."""
    cpu_kv_gb: float = 0.0
    """Host memory per replica for the CPU tier of the prefix cache, GB (0: no CPU tier)."""
    cpu_kv_link_gb_s: float | None = None
    """Host-to-GPU bandwidth per GPU for CPU-tier offloads and reloads, GB/s (None: the GPU preset's
    ``host_link_gb_s``: 25 on PCIe Gen4 x16, 54.6 measured on an H100's Gen5 x16)."""
    cpu_kv_connector: str = "offload"
    """How the CPU tier stores and reloads (``sim/cpu_kv.py``): offload (vLLM's native CPU offloading:
    asynchronous stores on eviction, 16-token blocks) or lmcache (LMCache's connector: synchronous store
    of each prefill, 256-token chunks, its measured store/retrieve rates)."""
    engine_profile: str = "vllm-v1"
    """Serving-engine overhead per iteration: vllm-v1, vllm-2023 or kernel-only (docs/calibration.md);
    a name of ``execution_params.ENGINE_PROFILES``, checked when the cluster is built."""
    scheduler: str = DEFAULT_KNOBS.scheduler
    """Batching policy: vllm (prefill-first), sarathi (chunked prefill) or static (request-level);
    a name of ``batching.SCHEDULERS``, checked when the cluster is built."""
    batch_cap: int = DEFAULT_KNOBS.batch_cap
    """Maximum number of running sequences (vLLM ``max_num_seqs``)."""
    chunk_size: int = 512
    """Sarathi token budget per iteration (decodes count one token each)."""
    max_tokens_per_iter: int = 4096
    """vLLM token budget per prefill iteration (a longer single prompt is admitted alone)."""
    kv_budget_fraction: float = DEFAULT_KNOBS.kv_budget_fraction
    """Fraction of the KV memory left after weights and activations that the cache may use."""
    block_size: int = 16
    """PagedAttention block size in tokens."""
    watermark_fraction: float = 0.01
    """Admission keeps at least this fraction of blocks free (vLLM's watermark)."""
    speculation_depth: int = DEFAULT_KNOBS.speculation_depth
    """Draft tokens proposed per decode step (0 = off, up to 8)."""
    spec_acceptance: float = 0.7
    """Default per-token acceptance rate alpha (a tenant may override it)."""
    draft_model: str = "default"
    """Speculative proposer: ``default`` (the model preset's draft model), a draft model preset name,
    ``ngram`` (prompt lookup) or ``eagle`` (a one-layer EAGLE head); acceptance rates by proposer and
    workload from the literature: ``inferencegym.sim.spec_acceptance``."""
    host_to_gpu_gb_s: float = 25.0
    """Host-to-GPU bandwidth per GPU used for weight reloads on a quantization switch (PCIe 4.0 x16)."""
    prefix_caching: bool = True
    """Automatic prefix caching (vLLM V1): a request reuses the cached KV blocks of the longest
    prompt prefix (``Request.block_hashes``) on the replica; without block hashes nothing changes."""
    num_scheduler_steps: int = 1
    """vLLM V0 multi-step scheduling (v0.6.x ``--num-scheduler-steps``): a pure-decode batch runs as
    a block of this many steps before the scheduler is called again, so a prompt that arrives
    mid-block waits for the block's end (``vllm/engine/llm_engine.py`` ``step``: the scheduler is
    skipped while ``_has_remaining_steps``). 1 = off (every other engine). vLLM allows it only
    without chunked prefill and speculative decoding (``EngineArgs.create_engine_config``), so
    > 1 needs ``scheduler="vllm"`` and ``speculation_depth=0``."""

    def __post_init__(self) -> None:
        # (plain tests, the messages formatted only on failure: a running replica's config is
        # rebuilt at every knob change)
        if not (self.tensor_parallel in (1, 2, 4, 8)):
            raise ValueError(f"tensor_parallel must be 1, 2, 4 or 8, got {self.tensor_parallel}")
        if not (self.expert_parallel in (1, 2, 4, 8, 16, 32, 64)):
            raise ValueError(f"expert_parallel must be 1, 2, 4, ..., 64, got {self.expert_parallel}")
        if not (self.pipeline_parallel in (1, 2, 4, 8)):
            raise ValueError(f"pipeline_parallel must be 1, 2, 4 or 8, got {self.pipeline_parallel}")
        if not (self.pipeline_parallel == 1 or self.speculation_depth == 0):
            raise ValueError(f"speculative decoding with pipeline_parallel={self.pipeline_parallel} is not "
                             f"modelled; set speculation_depth=0 or pipeline_parallel=1")
        if not (self.kv_cache_dtype in ("auto", "fp8")):
            raise ValueError(f"kv_cache_dtype must be 'auto' or 'fp8', got {self.kv_cache_dtype!r}")
        if not (self.cpu_kv_gb >= 0):
            raise ValueError(f"cpu_kv_gb must be >= 0 (GB of host memory), got {self.cpu_kv_gb}")
        if not (self.cpu_kv_link_gb_s is None or self.cpu_kv_link_gb_s > 0):
            raise ValueError(f"cpu_kv_link_gb_s must be > 0 GB/s or None (the GPU's host link), "
                             f"got {self.cpu_kv_link_gb_s}")
        if not (self.cpu_kv_connector in ("offload", "lmcache")):
            raise ValueError(f"cpu_kv_connector must be 'offload' or 'lmcache', got {self.cpu_kv_connector!r}")
        if not (self.quantization in QUANTIZATION_TIERS):
            raise ValueError(f"unknown quantization {self.quantization!r}; valid: {', '.join(QUANTIZATION_TIERS)}")
        if not (self.batch_cap >= 1):
            raise ValueError(f"batch_cap must be >= 1, got {self.batch_cap}")
        if not (self.chunk_size >= 16):
            raise ValueError(f"chunk_size must be >= 16 tokens, got {self.chunk_size}")
        if not (self.max_tokens_per_iter >= 1):
            raise ValueError(f"max_tokens_per_iter must be >= 1, got {self.max_tokens_per_iter}")
        if not (0.0 < self.kv_budget_fraction <= 1.0):
            raise ValueError(f"kv_budget_fraction must be in (0, 1], got {self.kv_budget_fraction}")
        if not (self.block_size >= 1):
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
        if not (0.0 <= self.watermark_fraction < 0.5):
            raise ValueError(f"watermark_fraction must be in [0, 0.5), got {self.watermark_fraction}")
        if not (0 <= self.speculation_depth <= 8):
            raise ValueError(f"speculation_depth must be in 0..8, got {self.speculation_depth}")
        if not (0.0 <= self.spec_acceptance <= 1.0):
            raise ValueError(f"spec_acceptance must be in [0, 1], got {self.spec_acceptance}")
        if not (self.host_to_gpu_gb_s > 0):
            raise ValueError(f"host_to_gpu_gb_s must be > 0, got {self.host_to_gpu_gb_s}")
        if not (isinstance(self.prefix_caching, bool)):
            raise ValueError(f"prefix_caching must be True or False, got {self.prefix_caching!r}")
        if not (isinstance(self.num_scheduler_steps, int) and self.num_scheduler_steps >= 1):
            raise ValueError(f"num_scheduler_steps must be an integer >= 1, got {self.num_scheduler_steps!r}")
        if self.num_scheduler_steps > 1:
            _check(self.scheduler == "vllm" and self.speculation_depth == 0,
                   f"num_scheduler_steps={self.num_scheduler_steps} (multi-step) needs scheduler='vllm' and "
                   f"speculation_depth=0, as in vLLM; got scheduler={self.scheduler!r}, "
                   f"speculation_depth={self.speculation_depth} (set num_scheduler_steps=1 to use them)")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, kw_only=True)
class ClusterConfig:
    """A group of identical replicas behind one router."""

    replica: ReplicaConfig = field(default_factory=ReplicaConfig)
    """Configuration of every replica at start (``Cluster.apply_replica_config`` changes it later)."""
    num_replicas: int = 1
    """Number of replicas."""
    router: str = "round_robin"
    """Global routing policy, a name of ``inferencegym.sim.router.ROUTERS`` (checked when the cluster
    is built); ``external`` for an agent."""
    tenants: tuple[TenantSpec, ...] = (TenantSpec(),)
    """Tenant classes; ``Request.tenant`` indexes this tuple."""
    priority_routing: bool = False
    """Priority requests jump queues and may preempt best-effort ones."""
    disaggregate: bool = False
    """Split the replicas into prefill and decode instances (Splitwise/DistServe)."""
    prefill_replicas: int = 1
    """Number of prefill instances when disaggregated (the rest decode)."""
    decode_router: str = "least_outstanding_requests"
    """When disaggregated, the router (a name of ``ROUTERS``, checked when the cluster is built)
    that places a prefilled request on a decode instance; ties rotate, never always replica 0."""
    gpu_hour_usd: float | None = None
    """Price of one GPU-hour; None uses the GPU preset's price."""
    recent_window: int = 32
    """Number of recent TTFT / iteration samples per replica behind ``replica_features()``."""
    cache_publish_interval_s: float = 0.05
    """Cache-aware routers see the replicas' prefix caches and load metrics as published every
    this many simulated seconds (KV events / metrics scraping; 0 = always current)."""
    replica_configs: tuple[ReplicaConfig, ...] = ()
    """Heterogeneous clusters (e.g. mixed A100/H100): one ``ReplicaConfig`` per replica, overriding
    ``replica``; empty (the default) = every replica uses ``replica``. Added for the cluster env."""

    def __post_init__(self) -> None:
        _check(self.num_replicas >= 1, f"num_replicas must be >= 1, got {self.num_replicas}")
        object.__setattr__(self, "replica_configs", tuple(self.replica_configs))
        _check(not self.replica_configs or len(self.replica_configs) == self.num_replicas,
               f"replica_configs has {len(self.replica_configs)} entries for num_replicas="
               f"{self.num_replicas}; give one ReplicaConfig per replica or none")

        _check(len(self.tenants) >= 1, "ClusterConfig.tenants needs at least one TenantSpec")
        object.__setattr__(self, "tenants", tuple(self.tenants))
        if self.disaggregate:
            _check(self.num_replicas >= 2, "disaggregation needs num_replicas >= 2 (>= 1 prefill and >= 1 decode)")
            _check(1 <= self.prefill_replicas < self.num_replicas,
                   f"prefill_replicas must be in 1..num_replicas-1 = {self.num_replicas - 1}, "
                   f"got {self.prefill_replicas}")
        if self.gpu_hour_usd is not None:
            _check(self.gpu_hour_usd >= 0, f"gpu_hour_usd must be >= 0, got {self.gpu_hour_usd}")
        _check(self.recent_window >= 1, f"recent_window must be >= 1, got {self.recent_window}")
        _check(self.cache_publish_interval_s >= 0,
               f"cache_publish_interval_s must be >= 0 s, got {self.cache_publish_interval_s}")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["tenants"] = [t.to_dict() for t in self.tenants]
        return d
