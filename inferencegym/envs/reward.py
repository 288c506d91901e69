"""Shaped per-window reward: named components, weights in a frozen :class:`RewardConfig`.

Every component depends only on the latest window's figures (the ``raw`` dict built by the env,
see ``LLMServeEnv`` for the names) and is logged as ``reward/<name>`` in ``info``. The total is
``sum(weight_name * component_name)``.

Components (all dimensionless, O(1)):

- ``throughput``: output tokens produced in the window / output tokens offered in the window,
  clipped to [0, 2] (draining a backlog can exceed 1; stated clip). 0 when nothing was offered and
  nothing produced... then it is 1 (nothing to do, nothing missed).
- ``slo``: SLO attainment of the requests that produced their first token in the window (share
  within TTFT and TBT SLOs) plus a latency term on r = p99 TTFT / TTFT SLO and q = p99 TBT / TBT SLO:
  for r <= 1 a bonus ``slo_bonus * (1 - r)`` (latency well under the SLO), for r > 1 a penalty
  ``-ln(r)`` that keeps growing without bound (no clip); the same for q.
- ``kv_band``: 0 while the mean KV occupancy is inside [kv_low, kv_high] (60-85 %), linear penalties
  on both sides: ``-(kv_low - occ) / kv_low`` below, ``-(occ - kv_high) / (1 - kv_high)`` above.
- ``preemption``: ``-preemptions / max(1, completions + running)`` in the window.
- ``cost``: ``-(window GPU cost in USD per 1k produced tokens) / cost reference`` of the task,
  with produced tokens floored at 10 % of the offered tokens (stated floor: keeps it finite).
- ``quality``: ``-quality_delta / quality reference`` of the quantization tier in use.
- ``grade``: the task grader split into windows (:func:`grade_term`): the window's in-SLO output
  tokens (tenant-weighted) over the *nominal* offered tokens of one window, plus the window's cost
  and quality scores, with the grader's own weights. Its mean over an episode approximates the
  episode's grade (exactly, when the realised offered load equals the nominal one), so a policy that
  maximises it maximises the grade. Credit arrives when a request completes (a late request earns
  nothing), not when it is admitted. Off by default (``w_grade = 0``); the training configs of the
  single-agent tasks use it alone (docs/training.md: why).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Mapping, Sequence

REWARD_COMPONENTS: tuple[str, ...] = ("throughput", "slo", "kv_band", "preemption", "cost", "quality",
                                      "grade")


@dataclass(frozen=True, kw_only=True)
class RewardConfig:
    """Weights of the reward components (Tune sweeps these) and the component shapes."""

    w_throughput: float = 1.0
    """Weight of ``throughput`` (produced / offered output tokens)."""
    w_slo: float = 1.0
    """Weight of ``slo`` (attainment + soft latency penalty / bonus)."""
    w_kv_band: float = 0.2
    """Weight of ``kv_band`` (KV occupancy kept in [kv_low, kv_high])."""
    w_preemption: float = 0.2
    """Weight of ``preemption``."""
    w_cost: float = 0.3
    """Weight of ``cost``."""
    w_quality: float = 0.5
    """Weight of ``quality``."""
    w_grade: float = 0.0
    """Weight of ``grade`` (the grader split into windows; 0 = off)."""
    slo_bonus: float = 0.25
    """Largest bonus per latency term when p99 latency is far under the SLO."""
    kv_low: float = 0.60
    """Lower edge of the KV-occupancy band."""
    kv_high: float = 0.85
    """Upper edge of the KV-occupancy band."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def weights(self) -> dict[str, float]:
        return {name: getattr(self, f"w_{name}") for name in REWARD_COMPONENTS}


def latency_term(ratio: float, bonus: float) -> float:
    """Bonus ``bonus * (1 - ratio)`` under the SLO, ``-ln(ratio)`` past it (unbounded)."""
    if not math.isfinite(ratio):
        return 0.0 if math.isnan(ratio) else -math.log(1e6)
    if ratio <= 1.0:
        return bonus * (1.0 - ratio)
    return -math.log(ratio)


def reward_components(raw: Mapping[str, float], *, cost_ref_usd_per_1k: float,
                      quality_ref_delta: float, config: RewardConfig,
                      grade: float = 0.0) -> dict[str, float]:
    """The named components of one window (see the module docstring); ``grade`` is the window's
    :func:`grade_term` (it needs per-tenant figures the env computes)."""
    offered = raw["offered_tokens"]
    produced = raw["produced_tokens"]
    if offered > 0:
        throughput = min(produced / offered, 2.0)
    else:
        throughput = 1.0
    if raw["first_tokens"] > 0:
        attainment = raw["slo_compliance"]
        slo = attainment + latency_term(raw["ttft_p99_s"] / raw["ttft_slo_s"], config.slo_bonus)
    else:
        # nobody started in this window: attainment from the queue (waiting is a miss when work waits)
        slo = 1.0 if raw["queue_depth"] == 0 else 0.0
    if raw["tbt_samples"] > 0:
        slo += latency_term(raw["tbt_p99_s"] / raw["tbt_slo_s"], config.slo_bonus)
    occ = raw["kv_occupancy"]
    if occ < config.kv_low:
        kv_band = -(config.kv_low - occ) / config.kv_low
    elif occ > config.kv_high:
        kv_band = -(occ - config.kv_high) / (1.0 - config.kv_high)
    else:
        kv_band = 0.0
    preemption = -raw["preemptions"] / max(1.0, raw["completions"] + raw["running"])
    denom_k = max(produced, 0.1 * offered, 1.0) / 1000.0
    cost = -(raw["window_usd"] / denom_k) / cost_ref_usd_per_1k
    quality = -raw["quality_delta"] / quality_ref_delta
    return {"throughput": throughput, "slo": slo, "kv_band": kv_band, "preemption": preemption,
            "cost": cost, "quality": quality, "grade": float(grade)}


def grade_term(*, good_tokens: Sequence[float], tenant_weights: Sequence[float],
               nominal_weighted_tokens: float, window_usd: float,
               quality_delta: float, grader: Any, served_share: float = 1.0) -> float:
    """The ``grade`` component of one window (see the module docstring).

    ``good_tokens``: output tokens per tenant of requests that completed in this window within both
    SLOs; ``nominal_weighted_tokens``: tenant-weighted output tokens the task offers per window on
    average (from its spec, never the realised episode); ``grader``: the task's ``GraderSpec``.
    The SLO part is not clipped at 1: a window that drains a backlog earns what it serves.
    ``served_share``: the window's produced over nominal output tokens, clipped to [0, 1]; it scales
    the cost and quality parts as the grader's served share does."""
    good_w = float(sum(w * g for w, g in zip(tenant_weights, good_tokens)))
    slo_part = good_w / nominal_weighted_tokens if nominal_weighted_tokens > 0 else 1.0
    total_good = float(sum(good_tokens))
    if total_good > 0:
        cost = window_usd / (total_good / 1000.0)
        span = grader.cost_bad_usd_per_1k - grader.cost_good_usd_per_1k
        cost_score = min(1.0, max(0.0, (grader.cost_bad_usd_per_1k - cost) / span))
    else:
        cost_score = 0.0  # as the grader: no good tokens, no cost score
    quality_score = min(1.0, max(0.0, 1.0 - quality_delta / grader.quality_bad_delta))
    served = min(1.0, max(0.0, float(served_share)))
    return grader.w_slo * slo_part + served * (grader.w_cost * cost_score + grader.w_quality * quality_score)


@lru_cache(maxsize=64)
def _weights(config: RewardConfig) -> tuple[float, ...]:
    """``config.weights()`` in ``REWARD_COMPONENTS`` order (a frozen config: computed once)."""
    w = config.weights()
    return tuple(w[k] for k in REWARD_COMPONENTS)


def total_reward(components: Mapping[str, float], config: RewardConfig) -> float:
    return float(sum(wk * components[k] for wk, k in zip(_weights(config), REWARD_COMPONENTS)))


@dataclass(frozen=True, kw_only=True)
class ClusterRewardConfig:
    """Weights of the cluster env's reward components (see the module docstring)."""

    w_queue: float = 1.0
    """Router: weight of the Decima term (integral of weighted requests in the system)."""
    w_router_slo: float = 0.5
    """Router: weight of the TTFT latency terms of first tokens in the interval."""
    w_reject: float = 1.0
    """Router: weight of rejected requests."""
    w_throughput: float = 1.0
    """Replica: weight of local throughput."""
    w_replica_slo: float = 1.0
    """Replica: weight of local SLO terms."""
    w_preemption: float = 0.2
    """Replica: weight of local preemptions."""
    w_shared: float = 0.5
    """Replica: weight of the shared cluster SLO term."""
    slo_bonus: float = 0.25
    """Largest bonus of one latency term well under its SLO (``latency_term``)."""
    sojourn_ref_s: float = 10.0
    """Normaliser of the Decima term: a typical request sojourn (s)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
