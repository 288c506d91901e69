"""Prefix-sharing episodes of a task (``WorkloadSpec.process="prefix"``).

A task names a session-generator preset of :mod:`inferencegym.workload` (fitted to the Mooncake
trace) and overrides the figures it wants (prefix count, Zipf exponent, lengths as lognormals);
:func:`generator_spec` resolves that into the generator's :class:`PrefixWorkloadSpec`, and
:func:`generate_prefix_episode` draws one episode from the env's Generator: arrivals, lengths and the
hash chain of every prompt (16-token blocks, the simulator's KV block), which the adapter turns into
``Request.block_hashes``.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
from scipy.special import ndtri

from inferencegym.sim import portable_math
from inferencegym.tasks.spec import PrefixSharingSpec, TaskSpec, WorkloadSpec
from inferencegym.workload import PrefixWorkloadSpec, default_prefix_spec, generate_prefix_workload
from inferencegym.workload.prefix_gen import LEVELS

HASH_BLOCK_TOKENS = 16
"""Tokens per generated hash id (the simulator's KV block size: one id per block)."""
PILOT_SESSIONS = 5000
"""Sessions of the pilot draw that measures requests per session (:func:`requests_per_session`)."""
_TAIL_LEVEL = 0.001
"""A lognormal's 0 and 1 quantile levels are read at this and 1 - this (finite tables)."""


def lognormal_table(median: float, sigma: float, hi: float = np.inf) -> tuple[float, ...]:
    """Quantiles of a lognormal on the generator's ``LEVELS`` (tails at 0.1 % / 99.9 %), capped at ``hi``."""
    lv = np.clip(np.asarray(LEVELS), _TAIL_LEVEL, 1.0 - _TAIL_LEVEL)
    q = portable_math.exp(math.log(median) + sigma * ndtri(lv))
    return tuple(np.minimum(q, hi).tolist())


@functools.lru_cache(maxsize=64)
def generator_spec(w: WorkloadSpec) -> PrefixWorkloadSpec:
    """The session generator a ``process="prefix"`` workload names, with its overrides applied,
    at ``w.rate_rps`` requests per second (sessions/s = that / :func:`requests_per_session`);
    outputs capped at ``w.max_output_tokens`` and sessions
    ended when a prompt would exceed ``w.max_prompt_tokens`` (the context limit)."""
    p: PrefixSharingSpec | None = w.prefix
    if p is None:
        raise ValueError(f"workload process {w.process!r} has no prefix-sharing spec")
    base = default_prefix_spec(p.preset)
    kw: dict = {"block_tokens": HASH_BLOCK_TOKENS, "max_prompt_tokens": int(w.max_prompt_tokens)}
    for name in ("num_prefixes", "zipf_s", "unique_share", "context_includes_output"):
        v = getattr(p, name)
        if v is not None:
            kw[name] = v
    if p.prefix_tokens is not None:
        kw["prefix_tokens"] = lognormal_table(*p.prefix_tokens)
    if p.message_tokens is not None:
        kw["first_message_tokens"] = kw["turn_message_tokens"] = lognormal_table(*p.message_tokens)
    if p.unique_prompt_tokens is not None:
        kw["unique_prompt_tokens"] = lognormal_table(*p.unique_prompt_tokens)
    out = lognormal_table(*p.output_tokens) if p.output_tokens is not None else base.output_tokens
    kw["output_tokens"] = tuple(np.minimum(out, w.max_output_tokens).tolist())
    if p.turns is not None:
        kw["turns"] = lognormal_table(*p.turns)
    if p.think_time_s is not None:
        kw["think_time_s"] = lognormal_table(*p.think_time_s)
    if kw.get("num_prefixes", base.num_prefixes) == 0:
        kw["unique_share"] = 1.0
    spec = dataclasses.replace(base, source=f"{base.source}; task overrides", **kw)
    rate = max(w.rate_rps, 1e-9)
    return dataclasses.replace(spec, session_rate_per_s=rate / requests_per_session(spec))


@functools.lru_cache(maxsize=64)
def requests_per_session(spec: PrefixWorkloadSpec) -> float:
    """Mean requests a session of ``spec`` really sends: its drawn turns, less the turns cut at the
    context limit (``max_prompt_tokens``). Measured on a fixed pilot draw (its own Generator, seed
    0, 5,000 sessions, nothing drawn from an episode's Generator), so that ``rate_rps`` is the
    request rate an episode really offers."""
    if np.interp(1.0, LEVELS, spec.turns) < 1.5:
        return 1.0
    pilot = dataclasses.replace(spec, session_rate_per_s=1.0)
    w = generate_prefix_workload(pilot, float(PILOT_SESSIONS), np.random.default_rng(0))
    # per drawn session (a session whose first prompt exceeds the context sends nothing)
    return max(len(w) / PILOT_SESSIONS, 1e-3)


@functools.lru_cache(maxsize=64)
def mean_output_tokens_prefix(w: WorkloadSpec) -> float:
    """Mean output length of a ``process="prefix"`` workload (its capped output table's mean)."""
    table = generator_spec(w).output_tokens
    return float(np.mean(np.interp(np.linspace(0.0, 1.0, 2001), LEVELS, table)))


def session_lead_s(spec: PrefixWorkloadSpec, episode_s: float) -> float:
    """How long before the episode sessions start being drawn (their turns before 0 are dropped), so
    that conversations are already under way at 0 and the request rate is ``rate_rps`` throughout:
    the 90th-percentile session span (turns - 1) x think time, at most the episode length; 0 for
    one-turn sessions."""
    turns90 = float(np.interp(0.9, LEVELS, spec.turns))
    think90 = float(np.interp(0.9, LEVELS, spec.think_time_s))
    return float(min(max(np.rint(turns90) - 1.0, 0.0) * think90, episode_s))


def generate_prefix_episode(task: TaskSpec, rng: np.random.Generator):
    """Arrays of one prefix-sharing episode: ``(arrival_s, prompt_tokens, output_tokens, tenant,
    hash_ids)`` sorted by arrival (sessions drawn from ``-session_lead_s`` so that multi-turn
    conversations are in steady state at 0; earlier turns dropped); tenant ``i`` gets ``rate_rps x tenant_shares[i]`` from its own
    child Generator (its own prefixes), so tenants share nothing with each other."""
    w = task.workload
    spec = generator_spec(w)
    T = task.episode_s
    lead = session_lead_s(spec, T)
    parts = []
    children = rng.spawn(len(w.tenant_shares))
    for i, (share, child) in enumerate(zip(w.tenant_shares, children)):
        if share <= 0:
            continue
        sub = dataclasses.replace(spec, session_rate_per_s=spec.session_rate_per_s * share)
        parts.append(generate_prefix_workload(sub, T + lead, child, tenant=i))
    arrival = np.concatenate([p.arrival_s for p in parts]) - lead if parts else np.empty(0)
    prompt = np.concatenate([p.prompt_tokens for p in parts]) if parts else np.empty(0, np.int64)
    output = np.concatenate([p.output_tokens for p in parts]) if parts else np.empty(0, np.int64)
    tenant = np.concatenate([p.tenant for p in parts]) if parts else np.empty(0, np.int64)
    chains = [h for p in parts for h in p.hash_ids]
    keep = np.flatnonzero(arrival >= 0.0)
    order = keep[np.argsort(arrival[keep], kind="stable")]
    prompt = np.clip(prompt[order], 1, None).astype(np.int64)
    output = np.clip(output[order], 1, w.max_output_tokens).astype(np.int64)
    return (arrival[order], prompt, output, tenant[order].astype(np.int64),
            tuple(np.asarray(chains[k], dtype=np.int64) for k in order.tolist()))
