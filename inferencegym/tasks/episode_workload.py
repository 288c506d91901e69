"""One episode's requests for a task, generated from a numpy Generator (the env's seed).

The arrival processes follow ``WorkloadSpec.process``; request lengths come from the fitted
length models of :mod:`inferencegym.workload` when the spec names one (``azure_conv``,
``azure_code``) and that package provides it, else from the lognormal stand-ins below (same
medians and spreads as the Azure 2023 traces, see /work/shared/reference/trace_stats.json).
The hidden phase of every window is recorded for the clairvoyant reference policy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from inferencegym.sim import portable_math
from inferencegym.tasks.prefix_workload import (
    HASH_BLOCK_TOKENS,
    generate_prefix_episode,
    mean_output_tokens_prefix,
)
from inferencegym.tasks.spec import TaskSpec, WorkloadSpec

# Lognormal stand-ins for the Azure 2023 traces: (prompt median, prompt sigma, output median,
# output sigma), medians from trace_stats.json, sigmas from their p90/p50 ratios.
_LOGNORMAL_FITS: dict[str, tuple[float, float, float, float]] = {
    "azure_conv": (1020.0, 0.77, 129.0, 0.92),
    "azure_code": (1469.0, 0.98, 13.0, 1.13),
}

def mean_output_tokens(spec) -> float:
    """Mean output length in tokens of a :class:`~inferencegym.tasks.spec.WorkloadSpec`'s requests
    (lognormal mean ``median * exp(sigma^2 / 2)``, capped at ``max_output_tokens``; mega-prompts
    not included). A router may know this: it is a property of the workload, not of one request."""
    import math

    if spec.process == "prefix":
        return min(mean_output_tokens_prefix(spec), float(spec.max_output_tokens))
    if spec.length_fit == "lognormal":
        om, osig = spec.output_median_tokens, spec.output_sigma
    elif spec.length_fit in _LOGNORMAL_FITS:
        _, _, om, osig = _LOGNORMAL_FITS[spec.length_fit]
    else:
        raise ValueError(f"unknown length_fit {spec.length_fit!r}; valid: lognormal, "
                         f"{', '.join(_LOGNORMAL_FITS)}")
    return float(min(om * math.exp(osig * osig / 2.0), spec.max_output_tokens))


PHASE_NAMES: dict[str, tuple[str, ...]] = {
    "poisson": ("steady",),
    "onoff": ("off", "on"),
    "sinusoidal": ("low", "high", "low+mega", "high+mega"),
    "prefix": ("steady",),
}


@dataclass(frozen=True, kw_only=True)
class EpisodeWorkload:
    """Requests of one episode as numpy arrays sorted by arrival, plus the hidden phase per window."""

    arrival_s: np.ndarray
    """float64 arrival times from the episode start."""
    prompt_tokens: np.ndarray
    """int64 prompt lengths."""
    output_tokens: np.ndarray
    """int64 output lengths."""
    tenant: np.ndarray
    """int64 tenant index."""
    priority: np.ndarray
    """int64 priority (0 best effort, 1 priority)."""
    mega: np.ndarray
    """bool: the request is an injected mega-prompt."""
    window_start_idx: np.ndarray
    """int64 (episode_windows + 1,): requests of window w are [idx[w], idx[w+1])."""
    phase: np.ndarray
    """int64 (episode_windows,) hidden phase code per window (names in ``phase_names``)."""
    phase_names: tuple[str, ...]
    hash_ids: tuple[np.ndarray, ...] | None = None
    """Per request, the hash ids of its prompt's blocks (``process="prefix"``; None otherwise)."""
    hash_block_tokens: int = HASH_BLOCK_TOKENS
    """Tokens per hash id."""

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])


def _lengths(spec: WorkloadSpec, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    if spec.length_fit == "lognormal":
        pm, ps, om, os_ = (spec.prompt_median_tokens, spec.prompt_sigma,
                           spec.output_median_tokens, spec.output_sigma)
    elif spec.length_fit in _LOGNORMAL_FITS:
        pm, ps, om, os_ = _LOGNORMAL_FITS[spec.length_fit]
    else:
        raise ValueError(f"unknown length_fit {spec.length_fit!r}; valid: lognormal, "
                         f"{', '.join(_LOGNORMAL_FITS)}")
    prompt = portable_math.exp(math.log(pm) + ps * rng.standard_normal(n))
    output = portable_math.exp(math.log(om) + os_ * rng.standard_normal(n))
    # stated clips: at least one token, at most the spec's maxima
    prompt = np.clip(np.rint(prompt), 1, spec.max_prompt_tokens).astype(np.int64)
    output = np.clip(np.rint(output), 1, spec.max_output_tokens).astype(np.int64)
    return prompt, output


def _poisson_times(rate: float, t0: float, t1: float, rng: np.random.Generator) -> np.ndarray:
    if rate <= 0 or t1 <= t0:
        return np.empty(0)
    n = rng.poisson(rate * (t1 - t0))
    return np.sort(rng.uniform(t0, t1, size=n))


def generate_episode_workload(task: TaskSpec, rng: np.random.Generator) -> EpisodeWorkload:
    """The requests of one episode of ``task`` (deterministic given ``rng``'s state)."""
    spec = task.workload
    T = task.episode_s
    W = task.episode_windows
    n_tenants = len(task.tenants)
    if len(spec.tenant_shares) != n_tenants:
        raise ValueError(f"task {task.task_id!r}: tenant_shares has {len(spec.tenant_shares)} entries "
                         f"for {n_tenants} tenants")
    mids = (np.arange(W) + 0.5) * task.window_s
    times: list[np.ndarray] = []
    tenants: list[np.ndarray] = []
    phase = np.zeros(W, dtype=np.int64)

    chains = None
    if spec.process == "prefix":
        arrival, prompt, output, tenant, chains = generate_prefix_episode(task, rng)
    elif spec.process == "poisson":
        for i, share in enumerate(spec.tenant_shares):
            t = _poisson_times(spec.rate_rps * share, 0.0, T, rng)
            times.append(t)
            tenants.append(np.full(t.shape, i, dtype=np.int64))
    elif spec.process == "onoff":
        p_on = spec.on_mean_s / (spec.on_mean_s + spec.off_mean_s)
        on = bool(rng.random() < p_on)
        t = 0.0
        on_intervals = []
        while t < T:
            d = rng.exponential(spec.on_mean_s if on else spec.off_mean_s)
            end = min(T, t + d)
            rate = spec.burst_rate_rps if on else spec.rate_rps
            for i, share in enumerate(spec.tenant_shares):
                tt = _poisson_times(rate * share, t, end, rng)
                times.append(tt)
                tenants.append(np.full(tt.shape, i, dtype=np.int64))
            if on:
                on_intervals.append((t, end))
            t, on = end, not on
        # phase of a window = ON when more than half of it is ON
        on_time = np.zeros(W)
        edges = np.arange(W + 1) * task.window_s
        for a, b in on_intervals:
            lo = np.clip(a, edges[:-1], edges[1:])
            hi = np.clip(b, edges[:-1], edges[1:])
            on_time += hi - lo
        phase = (on_time > 0.5 * task.window_s).astype(np.int64)
    elif spec.process == "sinusoidal":
        phi = rng.uniform(0.0, 2.0 * np.pi)  # noqa: F841 (also used for mega-prompt timing)
        amp = spec.amplitude
        for i, share in enumerate(spec.tenant_shares):
            base = spec.rate_rps * share
            profile = spec.tenant_rate_profile[i]
            if profile == "flat":
                t = _poisson_times(base, 0.0, T, rng)
            elif profile in ("modulated", "anti"):
                sign = 1.0 if profile == "modulated" else -1.0
                cand = _poisson_times(base * (1.0 + amp), 0.0, T, rng)
                lam = base * (1.0 + sign * amp * np.sin(2.0 * np.pi * cand / spec.period_s + phi))
                keep = rng.random(cand.shape[0]) * base * (1.0 + amp) < lam
                t = cand[keep]
            else:
                raise ValueError(f"unknown tenant rate profile {profile!r}; valid: flat, modulated, anti")
            times.append(t)
            tenants.append(np.full(t.shape, i, dtype=np.int64))
        high = np.sin(2.0 * np.pi * mids / spec.period_s + phi) > spec.high_phase_threshold
        phase = high.astype(np.int64)
    else:
        raise ValueError(f"unknown arrival process {spec.process!r}; valid: poisson, onoff, sinusoidal")

    if chains is None:
        arrival = np.concatenate(times) if times else np.empty(0)
        tenant = np.concatenate(tenants) if tenants else np.empty(0, dtype=np.int64)
        prompt, output = _lengths(spec, arrival.shape[0], rng)
    mega = np.zeros(arrival.shape[0], dtype=bool)
    if spec.mega_prompt_rate_per_s > 0 and spec.mega_prompt_tokens > 0:
        tm = _poisson_times(spec.mega_prompt_rate_per_s, 0.0, T, rng)
        if spec.mega_prompt_when == "low" and spec.process == "sinusoidal":
            tm = tm[np.sin(2.0 * np.pi * tm / spec.period_s + phi) <= 0.0]
        arrival = np.concatenate([arrival, tm])
        tenant = np.concatenate([tenant, np.full(tm.shape, spec.mega_prompt_tenant, dtype=np.int64)])
        prompt = np.concatenate([prompt, np.full(tm.shape, spec.mega_prompt_tokens, dtype=np.int64)])
        output = np.concatenate([output, np.full(tm.shape, spec.mega_prompt_output_tokens, dtype=np.int64)])
        mega = np.concatenate([mega, np.ones(tm.shape, dtype=bool)])
        if chains is not None:
            chains = chains + tuple(np.zeros(0, np.int64) for _ in range(tm.shape[0]))
        w_of = np.minimum((tm // task.window_s).astype(np.int64), W - 1)
        mega_w = np.zeros(W, dtype=bool)
        mega_w[w_of] = True
        if spec.process == "sinusoidal":
            phase = phase + 2 * mega_w.astype(np.int64)
    order = np.argsort(arrival, kind="stable")
    arrival, tenant, prompt, output, mega = (arrival[order], tenant[order], prompt[order],
                                             output[order], mega[order])
    if chains is not None:
        chains = tuple(chains[k] for k in order.tolist())
    prio_of = np.array([t.priority for t in task.tenants], dtype=np.int64)
    edges = np.arange(W + 1) * task.window_s
    idx = np.searchsorted(arrival, edges, side="left").astype(np.int64)
    idx[-1] = arrival.shape[0]
    return EpisodeWorkload(arrival_s=arrival, prompt_tokens=prompt, output_tokens=output,
                           tenant=tenant, priority=prio_of[tenant] if tenant.size else tenant.copy(),
                           mega=mega, window_start_idx=idx, phase=phase,
                           phase_names=PHASE_NAMES[spec.process], hash_ids=chains)
