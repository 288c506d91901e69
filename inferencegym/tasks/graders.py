"""Graders: an absolute score in [0, 1] per episode, independent of the reward weights.

``grade(task_id, episode_log) -> GradeResult`` (``float(result)`` is the score). The episode log is
the JSON-serialisable :class:`EpisodeLog` that :class:`LLMServeEnv` fills (``env.episode_log()``)
and that an HTTP client can post.

Formula (the same for every single-agent task; the reference points are per task, see
``TaskSpec.grader`` and docs/environments.md):

- ``slo_share`` = sum over tenants of ``weight_t * good_t`` / sum of ``weight_t * offered_t``, where
  ``offered_t`` = output tokens of the tenant's requests that arrived during the episode and
  ``good_t`` = output tokens of those that completed within the episode and met both the tenant's
  TTFT SLO and TPOT SLO (:func:`inferencegym.sim.slo.meets_slo`: mean time per output token).
  Unfinished requests count as not served.
- ``cost_score`` = clip((bad - c) / (bad - good), 0, 1), c = GPU cost of the episode in USD per 1k
  good output tokens (infinite when nothing was good), ``good``/``bad`` = the task's
  ``cost_good_usd_per_1k`` / ``cost_bad_usd_per_1k``.
- ``quality_score`` = clip(1 - d / quality_bad_delta, 0, 1), d = output-token-weighted mean quality
  delta of the quantization tiers used.
- ``served_share`` = clip(produced / offered, 0, 1): output tokens produced during the episode over
  output tokens offered (0 when nothing was offered).
- ``latency_score`` (cluster tasks, ``w_latency > 0``) = tenant-weighted mean over tenants of
  clip(ln(bad / q) / ln(bad / good), 0, 1), q = the tenant's ``latency_quantile`` TTFT over the
  episode (:attr:`EpisodeLog.tenant_ttft_tail_s`; None = no first token that far into the tail: 0),
  good / bad = ``latency_good_slo_ratio`` / ``latency_bad_slo_ratio`` x its TTFT SLO.
- ``score`` = w_slo * slo_share + served_share * (w_cost * cost_score + w_quality * quality_score)
  + w_latency * latency_score (weights sum to 1; 0.65 / 0.10 / 0.25 / 0 on the single-agent tasks,
  0.5 / 0 / 0 / 0.5 on the cluster tasks). Every term scales with the work actually served: a
  configuration that serves almost nothing (``batch_cap=1``, ``kv_budget_fraction=0.1``) cannot
  collect the quality and cost terms for free, and unserved requests are infinitely late in the tail.

Good tokens count at most the offered tokens per tenant (in the SLO share and in the cost), and every
figure must be finite. The score only ever sees logs the environment wrote: the HTTP grader replays a
submitted episode's actions from its task and seed (:mod:`inferencegym.envs.verifier`) instead of
trusting a client's figures.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from inferencegym.tasks.spec import TaskSpec, get_task


class WindowRecord(BaseModel):
    """What the grader needs from one control window."""

    model_config = ConfigDict(extra="allow")

    step: int = Field(ge=0)
    offered_tokens: list[float] = Field(description="output tokens offered per tenant (arrivals)")
    good_tokens: list[float] = Field(description="output tokens completed within SLO per tenant")
    produced_tokens: float = Field(ge=0, allow_inf_nan=False,
                                   description="output tokens produced in the window")
    window_usd: float = Field(ge=0, allow_inf_nan=False, description="GPU cost of the window in USD")
    quality_delta: float = Field(ge=0, allow_inf_nan=False,
                                 description="quality delta of the quantization tier in use")

    @model_validator(mode="after")
    def _check(self) -> "WindowRecord":
        if len(self.offered_tokens) != len(self.good_tokens):
            raise ValueError(f"offered_tokens ({len(self.offered_tokens)} tenants) and good_tokens "
                             f"({len(self.good_tokens)} tenants) must have one entry per tenant")
        for name in ("offered_tokens", "good_tokens"):
            for v in getattr(self, name):
                if not (v >= 0 and math.isfinite(v)):
                    raise ValueError(f"{name} entries must be finite and >= 0, got {v}")
        return self


class EpisodeLog(BaseModel):
    """A JSON-serialisable record of one episode (``model_dump_json`` / ``model_validate_json``)."""

    model_config = ConfigDict(extra="allow")

    task_id: str
    seed: int | None = None
    policy: str | None = None
    windows: list[WindowRecord] = Field(default_factory=list)
    metrics: dict[str, float | None] = Field(default_factory=dict,
                                      description="episode metrics (p99 TTFT etc.), not graded")
    tenant_ttft_tail_s: list[float | None] = Field(
        default_factory=list, description="per tenant: the task's latency_quantile of TTFT over the "
                                          "episode (None: no first token that far into the tail); "
                                          "graded only where the task's w_latency > 0")


class GradeResult(BaseModel):
    """A grade and its breakdown."""

    task_id: str
    score: float
    slo_share: float
    cost_score: float
    quality_score: float
    latency_score: float
    cost_usd_per_1k_good_tokens: float | None
    mean_quality_delta: float
    offered_tokens: float
    good_tokens: float
    served_share: float = 0.0
    """Produced over offered output tokens, in [0, 1]: the factor on the cost and quality terms."""

    def __float__(self) -> float:
        return self.score

    def breakdown(self) -> dict[str, Any]:
        return {f"grade/{k}": v for k, v in self.model_dump().items() if k != "task_id"}


def _clip01(x: float) -> float:
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else x


def grade(task_id: str | TaskSpec, episode_log: EpisodeLog | dict | str) -> GradeResult:
    """Score one episode on its task (deterministic, absolute; see the module docstring)."""
    task = get_task(task_id)
    if isinstance(episode_log, str):
        log = EpisodeLog.model_validate_json(episode_log)
    elif isinstance(episode_log, dict):
        log = EpisodeLog.model_validate(episode_log)
    elif isinstance(episode_log, EpisodeLog):
        log = episode_log
    else:
        raise TypeError(f"episode_log must be an EpisodeLog, a dict or a JSON string, "
                        f"got {type(episode_log).__name__}")
    if log.task_id != task.task_id:
        raise ValueError(f"episode log is for task {log.task_id!r} but grade() was asked for "
                         f"{task.task_id!r}")
    n_t = len(task.tenants)
    weights = [t.grade_weight for t in task.tenants]
    offered = [0.0] * n_t
    good = [0.0] * n_t
    produced = usd = delta_tokens = 0.0
    for w in log.windows:
        if len(w.offered_tokens) != n_t:
            raise ValueError(f"window {w.step}: {len(w.offered_tokens)} tenant entries, task "
                             f"{task.task_id!r} has {n_t} tenants")
        for i in range(n_t):
            offered[i] += w.offered_tokens[i]
            good[i] += w.good_tokens[i]
        produced += w.produced_tokens
        usd += w.window_usd
        delta_tokens += w.quality_delta * w.produced_tokens
    good = [min(gd, o) for gd, o in zip(good, offered)]  # never more good than offered
    w_off = sum(wt * o for wt, o in zip(weights, offered))
    w_good = sum(wt * gd for wt, gd in zip(weights, good))
    slo_share = _clip01(w_good / w_off) if w_off > 0 else 0.0
    total_offered = sum(offered)
    served_share = _clip01(produced / total_offered) if total_offered > 0 else 0.0
    g = task.grader
    total_good = sum(good)
    if total_good > 0:
        cost = usd / (total_good / 1000.0)
        cost_score = _clip01((g.cost_bad_usd_per_1k - cost) / (g.cost_bad_usd_per_1k - g.cost_good_usd_per_1k))
    else:
        cost, cost_score = None, 0.0
    mean_delta = delta_tokens / produced if produced > 0 else 0.0
    quality_score = _clip01(1.0 - mean_delta / g.quality_bad_delta)
    latency_score = _latency_score(task, log) if g.w_latency > 0 else 0.0
    score = (g.w_slo * slo_share + served_share * (g.w_cost * cost_score + g.w_quality * quality_score)
             + g.w_latency * latency_score)
    return GradeResult(task_id=task.task_id, score=float(score), slo_share=float(slo_share),
                       cost_score=float(cost_score), quality_score=float(quality_score),
                       latency_score=float(latency_score),
                       cost_usd_per_1k_good_tokens=cost, mean_quality_delta=float(mean_delta),
                       offered_tokens=float(total_offered), good_tokens=float(total_good),
                       served_share=float(served_share))


def _latency_score(task: TaskSpec, log: EpisodeLog) -> float:
    """Tenant-weighted tail-latency score (see the module docstring)."""
    tails = log.tenant_ttft_tail_s
    if len(tails) != len(task.tenants):
        raise ValueError(f"task {task.task_id!r} grades tail latency: the episode log needs "
                         f"tenant_ttft_tail_s with {len(task.tenants)} entries, got {len(tails)}")
    g = task.grader
    span = math.log(g.latency_bad_slo_ratio / g.latency_good_slo_ratio)
    num = den = 0.0
    for t, q in zip(task.tenants, tails):
        if q is not None and not (isinstance(q, float) and math.isfinite(q) and q >= 0):
            raise ValueError(f"tenant_ttft_tail_s must hold finite values >= 0 or null, got {q!r}")
        bad = g.latency_bad_slo_ratio * t.ttft_slo_s
        s = 0.0 if q is None else _clip01(math.log(bad / max(q, 1e-12)) / span)
        num += t.grade_weight * s
        den += t.grade_weight
    return num / den if den > 0 else 0.0
