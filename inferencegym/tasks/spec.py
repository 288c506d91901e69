"""Task specs and their registry: one frozen, documented :class:`TaskSpec` per task.

A task fixes the workload, the cluster (hardware, initial serving knobs, cluster-only settings in
:class:`ClusterOptions`), the SLOs, the control window, the episode length and the grader's
reference points. Single-agent tasks (``kind="single"``, :mod:`inferencegym.tasks.single`) run in
``LLMServeEnv``; cluster tasks (``kind="cluster"``, :mod:`inferencegym.tasks.cluster`) in
``ClusterEnv``. :mod:`inferencegym.tasks.adapter` turns a spec into simulator objects.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from inferencegym.sim.config import DEFAULT_KNOBS, ReplicaKnobs
from inferencegym.tasks.prefix_spec import PREFIX_PRESETS, PrefixSharingSpec

__all__ = ["TenantSLO", "WorkloadSpec", "PrefixSharingSpec", "PREFIX_PRESETS", "GraderSpec",
           "ReplicaKnobs", "DEFAULT_KNOBS", "ClusterOptions", "TaskSpec", "register_task",
           "list_tasks", "task_ids", "get_task"]


@dataclass(frozen=True, kw_only=True)
class TenantSLO:
    """One tenant of a task: its share of traffic, priority and latency SLOs."""

    name: str
    """Tenant name (shown in metrics)."""
    priority: int = 0
    """0 = best effort, 1 = priority (jumps queues when priority routing is on)."""
    ttft_slo_s: float = 1.0
    """Time-to-first-token SLO in seconds."""
    tbt_slo_s: float = 0.2
    """Time-per-output-token SLO in seconds: the request's mean gap between output tokens (TPOT),
    the DistServe / vLLM goodput convention; the one rule is :func:`inferencegym.sim.slo.meets_slo`."""
    grade_weight: float = 1.0
    """Weight of this tenant's tokens in the grader's SLO share."""
    spec_acceptance: float = 0.7
    """Per-token acceptance probability of speculative drafts for this tenant's requests."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class WorkloadSpec:
    """Arrival process and request lengths of a task (generated per episode from the env's seed).

    ``process``:
    - ``"poisson"``: homogeneous Poisson at ``rate_rps``.
    - ``"onoff"``: Markov-modulated Poisson, exponential ON/OFF periods (``on_mean_s``,
      ``off_mean_s``) at ``burst_rate_rps`` / ``rate_rps``; the hidden phase is ON/OFF.
    - ``"sinusoidal"``: Poisson with rate ``rate_rps * (1 + amplitude * sin(2 pi t / period_s + phi))``
      (phi drawn per episode) plus unannounced mega-prompts; the hidden phase is (high/low load,
      mega-prompt in flight).
    - ``"prefix"``: prefix-sharing sessions (``prefix``: shared system prompts, multi-turn
      conversations, agent loops) at ``rate_rps`` requests per second; prompts and outputs come from
      the session generator (``length_fit`` is not used), clipped at the maxima below.
    """

    process: Literal["poisson", "onoff", "sinusoidal", "prefix"] = "poisson"
    """Arrival process (see above)."""
    rate_rps: float = 2.0
    """Base arrival rate in requests per second (OFF rate for ``onoff``)."""
    burst_rate_rps: float = 0.0
    """ON-phase arrival rate (``onoff`` only)."""
    on_mean_s: float = 0.0
    """Mean ON-period length in seconds (``onoff``)."""
    off_mean_s: float = 0.0
    """Mean OFF-period length in seconds (``onoff``)."""
    amplitude: float = 0.0
    """Relative amplitude of the sinusoidal rate (``sinusoidal``), 0..1."""
    period_s: float = 60.0
    """Period of the sinusoidal rate in seconds."""
    high_phase_threshold: float = 0.0
    """A window's hidden phase is ``high`` when sin(2 pi t / period_s + phi) at its middle exceeds
    this (``sinusoidal``)."""
    length_fit: str = "azure_conv"
    """Request-length distribution: a fit name of ``inferencegym.workload`` (``azure_conv``,
    ``azure_code``) or ``"lognormal"`` with the parameters below."""
    prompt_median_tokens: float = 512.0
    """Median prompt length (``lognormal``)."""
    prompt_sigma: float = 0.6
    """Log-space sigma of prompt length (``lognormal``)."""
    output_median_tokens: float = 128.0
    """Median output length (``lognormal``)."""
    output_sigma: float = 0.6
    """Log-space sigma of output length (``lognormal``)."""
    max_prompt_tokens: int = 4096
    """Prompts are clipped to this many tokens (stated clip: keeps one window's work bounded)."""
    max_output_tokens: int = 1024
    """Outputs are clipped to this many tokens."""
    tenant_shares: tuple[float, ...] = (1.0,)
    """Share of arrivals per tenant (same order as ``TaskSpec.tenants``)."""
    tenant_rate_profile: tuple[str, ...] = ("modulated",)
    """Per tenant: ``"modulated"`` follows the sinusoid, ``"anti"`` follows it in antiphase,
    ``"flat"`` stays at its base share (``sinusoidal`` only)."""
    mega_prompt_rate_per_s: float = 0.0
    """Rate of unannounced mega-prompts (Poisson), per second."""
    mega_prompt_tokens: int = 0
    """Prompt length of a mega-prompt."""
    mega_prompt_output_tokens: int = 64
    """Output length of a mega-prompt."""
    mega_prompt_tenant: int = 0
    """Tenant index that sends mega-prompts."""
    mega_prompt_when: Literal["always", "low"] = "always"
    """``always``: mega-prompts at a constant rate; ``low``: only while the sinusoidal load is in its
    low half (an adversary hiding in quiet periods)."""
    prefix: PrefixSharingSpec | None = None
    """The session generator of ``process="prefix"`` (required there, unused otherwise)."""

    def __post_init__(self) -> None:
        if (self.process == "prefix") != (self.prefix is not None):
            raise ValueError(f"WorkloadSpec: process='prefix' needs prefix=PrefixSharingSpec(...) and "
                             f"other processes take none; got process={self.process!r}, "
                             f"prefix={self.prefix!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class GraderSpec:
    """Absolute reference points of a task's grader (never derived from any agent's score)."""

    w_slo: float = 0.65
    """Weight of the share of offered output tokens served within SLO."""
    w_cost: float = 0.10
    """Weight of the cost score."""
    w_quality: float = 0.25
    """Weight of the quality score (quantization is a user-visible quality loss: with this weight
    INT4 throughout costs 0.25 and cannot buy its way up with latency alone)."""
    cost_good_usd_per_1k: float = 0.01
    """Cost per 1k in-SLO output tokens that scores 1 (the task's cluster at full goodput)."""
    cost_bad_usd_per_1k: float = 0.05
    """Cost per 1k in-SLO output tokens that scores 0."""
    quality_bad_delta: float = 0.15
    """Token-weighted mean quality delta that scores 0 (quality score = 1 - delta / this); 0.15 is
    the INT4 tier's delta in the execution model, so INT4 throughout scores 0 on quality."""
    w_latency: float = 0.0
    """Weight of the tail-latency score (the cluster tasks use it: an SLO share alone saturates
    when every reasonable router meets a loose SLO, while tails still differ severalfold)."""
    latency_quantile: float = 99.0
    """Quantile of each tenant's TTFT the latency score reads (requests with no first token count
    as infinitely late)."""
    latency_good_slo_ratio: float = 0.25
    """The latency score is 1 when the tenant's TTFT quantile is at most this x its TTFT SLO..."""
    latency_bad_slo_ratio: float = 2.0
    """... and 0 at this x its TTFT SLO or later, log-linear in between; tenants weighted by
    ``grade_weight``."""

    def __post_init__(self) -> None:
        ws = (self.w_slo, self.w_cost, self.w_quality, self.w_latency)
        total = sum(ws)
        if abs(total - 1.0) > 1e-9 or min(ws) < 0:
            raise ValueError(f"GraderSpec weights must be >= 0 and sum to 1, got w_slo={self.w_slo}, "
                             f"w_cost={self.w_cost}, w_quality={self.w_quality}, "
                             f"w_latency={self.w_latency} (sum {total})")
        if not 0 < self.latency_good_slo_ratio < self.latency_bad_slo_ratio:
            raise ValueError(f"GraderSpec needs 0 < latency_good_slo_ratio < latency_bad_slo_ratio, got "
                             f"{self.latency_good_slo_ratio} and {self.latency_bad_slo_ratio}")
        if not 0 < self.latency_quantile <= 100:
            raise ValueError(f"GraderSpec.latency_quantile must be in (0, 100], got {self.latency_quantile}")
        if not 0 < self.cost_good_usd_per_1k < self.cost_bad_usd_per_1k:
            raise ValueError(f"GraderSpec needs 0 < cost_good_usd_per_1k < cost_bad_usd_per_1k, got "
                             f"{self.cost_good_usd_per_1k} and {self.cost_bad_usd_per_1k}")
        if self.quality_bad_delta <= 0:
            raise ValueError(f"GraderSpec.quality_bad_delta must be > 0, got {self.quality_bad_delta}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class ClusterOptions:
    """Settings only the cluster tasks have (typed; the simulator adapter reads them)."""

    replica_hardware: tuple[tuple[str, int], ...] = ()
    """A pattern of ``(gpu, tensor_parallel)`` pairs cycled over the replicas (replica ``i`` gets
    ``pattern[i % len(pattern)]``); empty = every replica is ``(TaskSpec.gpu, TaskSpec.tensor_parallel)``."""
    capacity_rps: tuple[float, ...] = ()
    """Measured sustainable request rate of one replica of each pattern entry under the task's
    request lengths (``inferencegym.tasks.capacity.measure_capacity_rps``)."""
    load_fraction: float = 0.8
    """Offered load as a share of the cluster's summed capacity (the arrival rates follow from it)."""
    burst_ratio: float = 4.0
    """ON-rate / OFF-rate of on/off workloads (``process="onoff"``)."""
    cpu_kv_gb: float = 0.0
    """Host memory per replica for the CPU tier of the prefix cache, GB (``ReplicaConfig.cpu_kv_gb``;
    0: the KV cache lives in GPU memory only)."""

    def __post_init__(self) -> None:
        if not (self.cpu_kv_gb >= 0.0 and math.isfinite(self.cpu_kv_gb)):
            raise ValueError(f"ClusterOptions.cpu_kv_gb must be a finite number of GB >= 0, "
                             f"got {self.cpu_kv_gb}")
        if not 0.0 < self.load_fraction <= 10.0:
            raise ValueError(f"ClusterOptions.load_fraction must be in (0, 10], got {self.load_fraction}")
        if self.burst_ratio < 1.0:
            raise ValueError(f"ClusterOptions.burst_ratio must be >= 1, got {self.burst_ratio}")
        if any(c <= 0 for c in self.capacity_rps):
            raise ValueError(f"ClusterOptions.capacity_rps must be > 0, got {self.capacity_rps}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    """One task: workload, cluster, SLOs, control window, episode length and grader references."""

    task_id: str
    """Registry key."""
    kind: Literal["single", "cluster"] = "single"
    """``single``: LLMServeEnv (one serving configuration); ``cluster``: the multi-agent ClusterEnv."""
    description: str = ""
    """What the task teaches."""
    difficulty: str = "easy"
    """easy / medium / hard."""
    model: str = "llama-2-7b"
    """Model preset of ``inferencegym.sim``."""
    gpu: str = "a100-80gb"
    """GPU preset."""
    tensor_parallel: int = 1
    """GPUs per replica."""
    engine_profile: str = "vllm-v1"
    """Per-iteration engine overhead of the execution model (``vllm-v1``, ``vllm-2023``,
    ``kernel-only``; docs/calibration.md)."""
    replicas: int = 1
    """Replicas in the cluster."""
    prefill_replicas: int = 1
    """Replicas that do prefill when ``prefill_decode_split`` disaggregates (replicas >= 2)."""
    chunk_size_tokens: int = 256
    """Token budget per iteration (Sarathi) when ``prefill_decode_split`` chunks prefills."""
    split_mode: Literal["auto", "chunked", "disaggregated"] = "auto"
    """What ``prefill_decode_split=True`` does: ``chunked`` = chunked prefill (Sarathi scheduler) on
    every replica; ``disaggregated`` = ``prefill_replicas`` prefill-only and the rest decode-only
    replicas (Splitwise/DistServe); ``auto`` = chunked on one replica, disaggregated on several."""
    router: str = "round_robin"
    """Router of the cluster (``least_outstanding_requests`` etc.)."""
    window_s: float = 1.0
    """Simulated seconds per control window (one env step)."""
    episode_windows: int = 200
    """Steps per episode (truncation)."""
    tenants: tuple[TenantSLO, ...] = (TenantSLO(name="default"),)
    """Tenants with their SLOs."""
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    """Arrival process and lengths."""
    grader: GraderSpec = field(default_factory=GraderSpec)
    """Grader reference points."""
    ref_batch: float = 32.0
    """Normalisation of queue depth / running requests in the observation."""
    knobs: ReplicaKnobs = DEFAULT_KNOBS
    """Serving knobs of every replica at reset."""
    cluster: ClusterOptions | None = None
    """Cluster-only settings (``kind="cluster"``: required)."""

    def __post_init__(self) -> None:
        if self.kind == "cluster" and self.cluster is None:
            raise ValueError(f"cluster task {self.task_id!r} needs cluster=ClusterOptions(...) "
                             f"(hardware pattern, capacity_rps, load_fraction)")

    @property
    def episode_s(self) -> float:
        return self.window_s * self.episode_windows

    @property
    def split_disaggregates(self) -> bool:
        """True when ``prefill_decode_split`` means disaggregation on this task."""
        return self.split_mode == "disaggregated" or (self.split_mode == "auto" and self.replicas > 1)

    def scaled(self, *, load_scale: float, burst_scale: float) -> TaskSpec:
        """A copy with the workload's arrival rates scaled (the training curriculum's intensity):
        ``rate_rps x load_scale``, ``burst_rate_rps x load_scale x burst_scale`` and
        ``mega_prompt_rate_per_s x burst_scale``; everything else (SLOs, grader, cluster) unchanged.

        Both scales must be finite and > 0 (ValueError otherwise); ``(1.0, 1.0)`` returns ``self``.
        """
        for name, v in (("load_scale", load_scale), ("burst_scale", burst_scale)):
            try:
                ok = not isinstance(v, bool) and math.isfinite(float(v)) and float(v) > 0.0
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ValueError(f"{name} must be a finite number > 0 (valid range: 0 < {name} < inf), "
                                 f"got {v!r}")
        load, burst = float(load_scale), float(burst_scale)
        if load == 1.0 and burst == 1.0:
            return self
        w = self.workload
        wl = dataclasses.replace(w, rate_rps=w.rate_rps * load,
                                 burst_rate_rps=w.burst_rate_rps * load * burst,
                                 mega_prompt_rate_per_s=w.mega_prompt_rate_per_s * burst)
        return dataclasses.replace(self, workload=wl)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_REGISTRY: dict[str, TaskSpec] = {}


def register_task(spec: TaskSpec, *, replace: bool = False) -> TaskSpec:
    """Add a task to the registry (the cluster env registers its ``kind="cluster"`` tasks here)."""
    if not isinstance(spec, TaskSpec):
        raise TypeError(f"register_task expects a TaskSpec, got {type(spec).__name__}")
    if spec.task_id in _REGISTRY and not replace and _REGISTRY[spec.task_id] != spec:
        raise ValueError(f"task {spec.task_id!r} is already registered with a different spec; "
                         f"pass replace=True to override")
    _REGISTRY[spec.task_id] = spec
    return spec


def list_tasks(kind: str | None = None) -> list[TaskSpec]:
    """Registered tasks in registration order, optionally only one ``kind``."""
    return [t for t in _REGISTRY.values() if kind is None or t.kind == kind]


def task_ids(kind: str | None = None) -> list[str]:
    return [t.task_id for t in list_tasks(kind)]


def get_task(task_id: str | TaskSpec) -> TaskSpec:
    """The spec of ``task_id``; ValueError listing the valid ids otherwise."""
    if isinstance(task_id, TaskSpec):
        return task_id
    try:
        return _REGISTRY[task_id]
    except (KeyError, TypeError):
        raise ValueError(f"unknown task {task_id!r}; valid: {', '.join(_REGISTRY)}") from None
