"""Task registry: one frozen, documented :class:`TaskSpec` per task.

A task fixes the workload, the cluster, the SLOs, the control window, the episode length and the
grader's reference points. Single-agent tasks (``kind="single"``) run in :class:`LLMServeEnv`; the
cluster environment registers its own tasks (``kind="cluster"``) with :func:`register_task`.

>>> [t.task_id for t in list_tasks(kind="single")]
['static_workload', 'bursty_workload', 'adversarial_multitenant']
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal


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
    """Largest allowed gap between two output tokens (time between tokens), seconds."""
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
    """

    process: Literal["poisson", "onoff", "sinusoidal"] = "poisson"
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

    def __post_init__(self) -> None:
        total = self.w_slo + self.w_cost + self.w_quality
        if abs(total - 1.0) > 1e-9 or min(self.w_slo, self.w_cost, self.w_quality) < 0:
            raise ValueError(f"GraderSpec weights must be >= 0 and sum to 1, got w_slo={self.w_slo}, "
                             f"w_cost={self.w_cost}, w_quality={self.w_quality} (sum {total})")
        if not 0 < self.cost_good_usd_per_1k < self.cost_bad_usd_per_1k:
            raise ValueError(f"GraderSpec needs 0 < cost_good_usd_per_1k < cost_bad_usd_per_1k, got "
                             f"{self.cost_good_usd_per_1k} and {self.cost_bad_usd_per_1k}")
        if self.quality_bad_delta <= 0:
            raise ValueError(f"GraderSpec.quality_bad_delta must be > 0, got {self.quality_bad_delta}")

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
    """Serving-engine overhead profile of the replicas (vllm-v1, vllm-2023, kernel-only)."""
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
    options: tuple[tuple[str, Any], ...] = ()
    """Extra (key, value) settings for other environments (e.g. the cluster env)."""

    @property
    def episode_s(self) -> float:
        return self.window_s * self.episode_windows

    @property
    def split_disaggregates(self) -> bool:
        """True when ``prefill_decode_split`` means disaggregation on this task."""
        return self.split_mode == "disaggregated" or (self.split_mode == "auto" and self.replicas > 1)

    def option(self, key: str, default: Any = None) -> Any:
        return dict(self.options).get(key, default)

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
        d = asdict(self)
        d["options"] = dict(self.options)
        return d


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


# ---------------------------------------------------------------------------------------------
# The single-agent tasks. Sizes keep one env step cheap (a few arrivals and at most a few dozen
# running requests per window; see docs/environments.md "Why these windows"). The grader's cost
# references are cost_good = (GPU $/s of the cluster) / (nominal offered output tokens/s) * 1000,
# i.e. the cost per 1k tokens when every offered token is served within SLO, and cost_bad = 4x
# that (tests/test_env_tasks_reward_graders.py checks the formula).

register_task(TaskSpec(
    task_id="static_workload",
    description="Steady Poisson arrivals, short prompts and a tight time-between-tokens SLO on one "
                "A100: learn the batch-cap / KV-budget / speculation trade-off. Nothing to adapt to: "
                "the best fixed configuration is (near) optimal.",
    difficulty="easy",
    model="llama-2-7b", gpu="a100-80gb", tensor_parallel=1, replicas=1,
    engine_profile="vllm-2023",  # loads/SLOs set against the 2023 engine; re-derive for vllm-v1
    window_s=1.0, episode_windows=200,
    tenants=(TenantSLO(name="default", priority=0, ttft_slo_s=1.0, tbt_slo_s=0.025),),
    workload=WorkloadSpec(process="poisson", rate_rps=2.4, length_fit="lognormal",
                          prompt_median_tokens=256, prompt_sigma=0.5,
                          output_median_tokens=300, output_sigma=0.5,
                          max_prompt_tokens=2048, max_output_tokens=1024),
    grader=GraderSpec(cost_good_usd_per_1k=6.095e-4, cost_bad_usd_per_1k=2.438e-3),
    ref_batch=16.0,
))

register_task(TaskSpec(
    task_id="bursty_workload",
    description="On/off bursts (Markov-modulated Poisson: 0.5 req/s OFF, 6 req/s ON, mean 8 s ON / "
                "16 s OFF, in the spirit of the Azure code trace's 10-s burstiness) with Azure "
                "conversation lengths on one A100: adapt to the phases.",
    difficulty="medium",
    model="llama-2-7b", gpu="a100-80gb", tensor_parallel=1, replicas=1,
    engine_profile="vllm-2023",  # loads/SLOs set against the 2023 engine; re-derive for vllm-v1
    window_s=1.0, episode_windows=200,
    chunk_size_tokens=512,
    tenants=(TenantSLO(name="default", priority=0, ttft_slo_s=2.0, tbt_slo_s=0.04),),
    workload=WorkloadSpec(process="onoff", rate_rps=0.5, burst_rate_rps=6.0,
                          on_mean_s=8.0, off_mean_s=16.0, length_fit="azure_conv",
                          max_prompt_tokens=4096, max_output_tokens=512),
    grader=GraderSpec(cost_good_usd_per_1k=1.082e-3, cost_bad_usd_per_1k=4.328e-3),
    ref_batch=16.0,
))

register_task(TaskSpec(
    task_id="adversarial_multitenant",
    description="Two tenants on two A100 replicas (interactive: priority, tight SLO, weight 2; "
                "batch: best effort, loose SLO), sinusoidal load, and an adversary that hides in the "
                "quiet half of the cycle and floods unannounced 24k-token mega-prompts: switch "
                "priority routing, KV admission and chunked prefill as the phase changes.",
    difficulty="hard",
    model="llama-2-7b", gpu="a100-80gb", tensor_parallel=1, replicas=2, prefill_replicas=1,
    engine_profile="vllm-2023",  # loads/SLOs set against the 2023 engine; re-derive for vllm-v1
    router="least_outstanding_requests", split_mode="chunked",
    window_s=1.0, episode_windows=200,
    tenants=(TenantSLO(name="interactive", priority=1, ttft_slo_s=1.0, tbt_slo_s=0.05, grade_weight=2.0),
             TenantSLO(name="batch", priority=0, ttft_slo_s=6.0, tbt_slo_s=0.15, grade_weight=1.0)),
    workload=WorkloadSpec(process="sinusoidal", rate_rps=3.5, amplitude=0.9, period_s=60.0,
                          length_fit="lognormal", prompt_median_tokens=1500, prompt_sigma=0.6,
                          output_median_tokens=300, output_sigma=0.6,
                          max_prompt_tokens=6000, max_output_tokens=1024,
                          tenant_shares=(0.5, 0.5), tenant_rate_profile=("modulated", "modulated"),
                          mega_prompt_rate_per_s=0.4, mega_prompt_tokens=24000,
                          mega_prompt_output_tokens=16, mega_prompt_tenant=1, mega_prompt_when="low"),
    grader=GraderSpec(cost_good_usd_per_1k=7.871e-4, cost_bad_usd_per_1k=3.148e-3),
    ref_batch=16.0,
))
